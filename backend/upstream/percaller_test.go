package upstream

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

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

func testCallerAuth(t *testing.T, logins *Logins) *callerAuth {
	t.Helper()
	return newCallerAuth(http.DefaultTransport, Server{Name: "tracker", URL: "http://127.0.0.1:1/mcp", OAuth: &OAuth{
		Mode: OAuthModePerCaller, ClientID: "c", Scopes: []string{"tools"}, TokenURL: "http://127.0.0.1:1/token",
		PerCaller: CallerOAuth{AuthURL: "http://127.0.0.1:1/authorize"},
	}}, &MemoryTokens{}, logins, slog.New(slog.DiscardHandler))
}

// TestLoginsReuseCapExpiry: a caller's retry gets the flow in progress
// again (per set of scopes: a step-up is another flow); a caller at the
// cap is refused, saying why, while another caller is not; an expired
// flow is replaced.
func TestLoginsReuseCapExpiry(t *testing.T) {
	ctx := context.Background()
	l := NewLogins(&LoginsOptions{RedirectURL: "http://127.0.0.1:2/cb", MaxPerCaller: 2, TTL: 300 * time.Millisecond})
	a := testCallerAuth(t, l)
	first, err := l.begin(ctx, a, "alice", []string{"tools"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := l.begin(ctx, a, "alice", []string{"tools"})
	if err != nil || again.URL != first.URL || again.ElicitationID != first.ElicitationID {
		t.Fatalf("the retry got another flow: %v", err)
	}
	up, err := l.begin(ctx, a, "alice", []string{"admin", "tools"})
	if err != nil || up.URL == first.URL || !strings.Contains(up.URL, "scope=admin+tools") {
		t.Fatalf("the step-up flow: %s %v", up.URL, err)
	}
	if again, err := l.begin(ctx, a, "alice", []string{"tools", "admin"}); err != nil || again.URL != up.URL {
		t.Fatalf("the same scopes in another order got another flow: %v", err)
	}
	_, err = l.begin(ctx, a, "alice", []string{"tools", "other"})
	var oe *OAuthError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "2 logins in progress") {
		t.Fatalf("a third flow at a cap of 2: %v", err)
	}
	if _, err := l.begin(ctx, a, "bob", []string{"tools"}); err != nil {
		t.Fatalf("bob is refused for alice's flows: %v", err)
	}
	time.Sleep(350 * time.Millisecond)
	next, err := l.begin(ctx, a, "alice", []string{"tools"})
	if err != nil || next.URL == first.URL {
		t.Fatalf("after the TTL: %v (same URL: %v)", err, next.URL == first.URL)
	}
}

// TestLoginsCallbackRefusals: the callback refuses a request without a
// state, a state no flow has (or had: taken once), and a flow of a
// server this process does not serve, each with a page saying so.
func TestLoginsCallbackRefusals(t *testing.T) {
	ctx := context.Background()
	shared := &MemoryLogins{}
	begun := NewLogins(&LoginsOptions{RedirectURL: "http://127.0.0.1:2/cb", Store: shared})
	other := NewLogins(&LoginsOptions{RedirectURL: "http://127.0.0.1:2/cb", Store: shared}) // serves no server
	f, err := begun.begin(ctx, testCallerAuth(t, begun), "alice", []string{"tools"})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(f.URL)
	state := u.Query().Get("state")
	answer := func(l *Logins, q string) (int, string) {
		w := httptest.NewRecorder()
		l.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/cb?"+q, nil))
		return w.Code, w.Body.String()
	}
	for _, tc := range []struct {
		l    *Logins
		q    string
		want string
	}{
		{begun, "code=x", "carries no state"},
		{begun, "state=forged&code=x", "expired or was already used"},
		{other, "state=" + url.QueryEscape(state) + "&code=x", "no per_caller server named tracker"},
		{begun, "state=" + url.QueryEscape(state) + "&code=x", "expired or was already used"}, // taken by other
	} {
		if code, body := answer(tc.l, tc.q); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 400 saying %q", tc.q, code, body, tc.want)
		}
	}
}

// TestStepUpScopes: the step-up asks for the configuration's scopes, the
// held and the demanded, each once.
func TestStepUpScopes(t *testing.T) {
	a := &callerAuth{cfg: OAuth{Scopes: []string{"tools"}}}
	if got := a.stepUpScopes([]string{"tools", "read"}, "admin read"); !slices.Equal(got, []string{"tools", "read", "admin"}) {
		t.Errorf("stepUpScopes = %v", got)
	}
}
