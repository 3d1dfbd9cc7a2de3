package upstream

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/tool"
)

// TestCheckCallerOAuth: the per-caller modes' settings are checked; a
// public client (no secret) is fine for them, never for service.
func TestCheckCallerOAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    OAuth
		want string // "" accepted
	}{
		{"per_caller public client", OAuth{Mode: OAuthModePerCaller, ClientID: "c"}, ""},
		{"exchange", OAuth{Mode: OAuthModeExchange, ClientID: "c", ClientSecret: "s"}, ""},
		{"service without secret", OAuth{ClientID: "c"}, "client secret"},
		{"per_caller registers its client", OAuth{Mode: OAuthModePerCaller}, ""},
		{"exchange without client id", OAuth{Mode: OAuthModeExchange}, "client id"},
		{"a secret without client id", OAuth{Mode: OAuthModePerCaller, ClientSecret: "s"}, "no client id"},
		{"unknown mode", OAuth{Mode: "user", ClientID: "c"}, `mode "user"`},
		{"bad auth url", OAuth{Mode: OAuthModePerCaller, ClientID: "c", PerCaller: CallerOAuth{AuthURL: "ftp://h/a"}}, "http:// or https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			err := (&Server{Name: "s", URL: "http://127.0.0.1:1/mcp", OAuth: &o}).Check()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestLoginRequiredError: it says nothing ran, carries the URL in its
// details only, and unwraps to the input_required answer when it has one.
func TestLoginRequiredError(t *testing.T) {
	e := &LoginRequiredError{Server: "tracker", Caller: "alice", URL: "http://127.0.0.1:1/authorize?state=s3cr3t"}
	var err error = e
	if !errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("not a not-started error")
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("the message repeats the URL: %s", err)
	}
	var de tool.DetailedError
	if !errors.As(err, &de) || de.ErrorDetails()["authorization_url"] != e.URL {
		t.Errorf("the details do not carry the URL")
	}
	var ire *tool.InputRequiredError
	if errors.As(err, &ire) {
		t.Errorf("an input_required answer without one")
	}
	e.input = &tool.InputRequiredError{Server: "tracker", State: loginStatePrefix + "x"}
	if !errors.As(err, &ire) || !isLoginState(ire.State) {
		t.Errorf("no input_required answer")
	}
}
