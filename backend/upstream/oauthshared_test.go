package upstream

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// turnTokens is MemoryTokens with turns (TokenLocker), counting them.
type turnTokens struct {
	MemoryTokens
	turn  sync.Mutex
	turns atomic.Int32
}

func (s *turnTokens) WithTokenLock(ctx context.Context, _ TokenKey, fn func(context.Context) error) error {
	s.turn.Lock()
	defer s.turn.Unlock()
	s.turns.Add(1)
	return fn(ctx)
}

// TestTokenSharedReplicas: three transports (three replicas' upstreams)
// share one TokenStore with turns: twenty concurrent requests for a token
// across them make one token request, saved with the client it was
// issued to and no secret; a 401 on each makes one more; a stored token
// of another client is not used.
func TestTokenSharedReplicas(t *testing.T) {
	a := startAS(t, "s3cret")
	a.resource = "http://127.0.0.1:1/mcp"
	store := &turnTokens{}
	cfg := OAuth{ClientID: "backplane", ClientSecret: "s3cret", TokenURL: a.tokenURL(), Tokens: store}
	var ts []*oauthTransport
	for range 3 {
		ts = append(ts, newOAuthTransport(http.DefaultTransport, "remote", "http://127.0.0.1:1/mcp", cfg))
	}
	ctx := context.Background()
	get := func(r func(i int) *authRefusal) []*oauth2.Token {
		out := make([]*oauth2.Token, 21)
		var wg sync.WaitGroup
		for i := range out {
			wg.Go(func() {
				tok, err := ts[i%3].token(ctx, r(i))
				if err != nil {
					t.Errorf("token: %v", err)
				}
				out[i] = tok
			})
		}
		wg.Wait()
		return out
	}
	first := get(func(int) *authRefusal { return nil })
	if req, _, issued := a.counts(); req != 1 || issued != 1 {
		t.Fatalf("21 concurrent token() across 3 transports: %d token requests, want 1", req)
	}
	for _, tok := range first {
		if tok == nil || tok.AccessToken != first[0].AccessToken {
			t.Fatalf("the transports hold different tokens")
		}
	}
	st, err := store.Token(ctx, TokenKey{Server: "remote"})
	if err != nil || st.Token.AccessToken != first[0].AccessToken || st.ClientID != "backplane" || st.ClientSecret != "" || st.Mode != "service" || st.TokenURL != a.tokenURL() {
		t.Fatalf("the stored token: %+v %v", st, err)
	}

	second := get(func(i int) *authRefusal { return &authRefusal{tok: first[i]} })
	if req, _, _ := a.counts(); req != 2 {
		t.Fatalf("a 401 on every request: %d token requests in all, want 2", req)
	}
	for _, tok := range second {
		if tok == nil || tok.AccessToken == first[0].AccessToken || tok.AccessToken != second[0].AccessToken {
			t.Fatalf("after the 401s the transports do not share one new token")
		}
	}

	// Another client's token in the store is not this one's: it asks for
	// its own (which this authorization server refuses).
	other := newOAuthTransport(http.DefaultTransport, "remote", "http://127.0.0.1:1/mcp",
		OAuth{ClientID: "someone-else", ClientSecret: "s3cret", TokenURL: a.tokenURL(), Tokens: store})
	if tok, err := other.token(ctx, nil); err == nil || tok != nil {
		t.Fatalf("a transport of another client used backplane's stored token")
	}
	// (x/oauth2's auto-detection tries Basic, then the form: two refusals.)
	if _, refused, issued := a.counts(); issued != 2 || refused == 0 {
		t.Errorf("%d tokens issued (%d requests refused), want 2 (some)", issued, refused)
	}
	if st, _ := store.Token(ctx, TokenKey{Server: "remote"}); st.Token.AccessToken != second[0].AccessToken {
		t.Errorf("a refused request replaced the stored token")
	}
}

// TestTokenSharedExpired: a stored token past its expiry is not used; the transport obtains a new one and saves it.
func TestTokenSharedExpired(t *testing.T) {
	a := startAS(t, "s3cret")
	a.resource = "http://127.0.0.1:1/mcp"
	store := &turnTokens{}
	ctx := context.Background()
	old := &oauth2.Token{AccessToken: "old", Expiry: time.Now().Add(-time.Second)}
	if err := store.SaveToken(ctx, TokenKey{Server: "remote"}, StoredToken{Token: old, Mode: "service", ClientID: "backplane"}); err != nil {
		t.Fatal(err)
	}
	tr := newOAuthTransport(http.DefaultTransport, "remote", "http://127.0.0.1:1/mcp",
		OAuth{ClientID: "backplane", ClientSecret: "s3cret", TokenURL: a.tokenURL(), Tokens: store})
	tok, err := tr.token(ctx, nil)
	if err != nil || tok == nil || tok.AccessToken == "old" {
		t.Fatalf("token: %v; want a new one instead of the one about to expire", err)
	}
	if st, _ := store.Token(ctx, TokenKey{Server: "remote"}); st.Token.AccessToken != tok.AccessToken {
		t.Errorf("the new token was not saved")
	}
	if store.turns.Load() != 1 {
		t.Errorf("%d turns taken, want 1", store.turns.Load())
	}
}

// TestServiceLoginsRefusals: without a callback URL a console login
// cannot start; a redirect whose state is no flow's is not taken.
func TestServiceLoginsRefusals(t *testing.T) {
	l := NewServiceLogins(nil)
	defer l.Close()
	srv := Server{Name: "remote", URL: "http://127.0.0.1:1/mcp", OAuth: &OAuth{Grant: GrantAuthorizationCode}}
	if _, err := l.Start(context.Background(), srv, nil); !errors.Is(err, ErrNoCallback) || !errors.Is(err, ErrLogin) {
		t.Errorf("Start without a callback: %v", err)
	}
	if l.Handles("") || l.Handles("some-state") {
		t.Errorf("Handles a state no flow has")
	}
	r, _ := http.NewRequest("GET", "http://127.0.0.1/oauth/upstream/callback?state=some-state&code=c", nil)
	if server, err := l.Complete(r); !errors.Is(err, ErrNoServiceLogin) || server != "" {
		t.Errorf("Complete of an unknown state: %q %v", server, err)
	}
}
