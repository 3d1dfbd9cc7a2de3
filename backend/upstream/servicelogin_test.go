package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

// codeAS is a protected MCP endpoint (/mcp, 401 without a token) and its
// authorization server on one loopback listener: enough for Login's
// discovery, its preregistered client and the code exchange, which it
// checks (the code it was told to expect, the PKCE S256 verifier against
// the challenge of the authorization URL, the resource).
type codeAS struct {
	srv *httptest.Server

	mu        sync.Mutex
	challenge string // from the authorization URL
	exchanges int
}

func startCodeAS(t *testing.T) *codeAS {
	a := &codeAS{}
	mux := http.NewServeMux()
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	base := a.srv.URL
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
		http.Error(w, "no token", http.StatusUnauthorized)
	})
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{
			"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
			"response_types_supported": []string{"code"}, "grant_types_supported": []string{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported": []string{"S256"}, "authorization_response_iss_parameter_supported": true,
			"token_endpoint_auth_methods_supported": []string{"none"},
		})
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		a.mu.Lock()
		a.exchanges++
		challenge := a.challenge
		a.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if r.PostForm.Get("code") != "good-code" || base64.RawURLEncoding.EncodeToString(sum[:]) != challenge || r.PostForm.Get("resource") != base+"/mcp" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_grant"}`)
			return
		}
		writeJSON(w, map[string]any{"access_token": "at-1", "token_type": "Bearer", "refresh_token": "rt-1", "expires_in": 3600, "scope": "tools"})
	})
	return a
}

// TestServiceLoginsAcrossReplicas: two ServiceLogins (two replicas) share
// a LoginStore; a flow started at A completes at B's callback, where B
// relays the redirect to A, which checks and exchanges it (PKCE S256,
// resource) and saves the token; B's Complete returns A's outcome. The
// same redirect again, at either replica, is refused; a redirect with a
// wrong iss relayed from B fails at A without an exchange; without a
// store, B knows nothing of A's flow.
func TestServiceLoginsAcrossReplicas(t *testing.T) {
	as := startCodeAS(t)
	shared := &MemoryLogins{}
	const redirect = "http://127.0.0.1:2/oauth/upstream/callback"
	a := NewServiceLogins(&ServiceLoginsOptions{RedirectURL: redirect, Store: shared})
	b := NewServiceLogins(&ServiceLoginsOptions{RedirectURL: redirect, Store: shared})
	defer a.Close()
	defer b.Close()
	srv := Server{Name: "remote", URL: as.srv.URL + "/mcp", OAuth: &OAuth{Grant: GrantAuthorizationCode, ClientID: "backplane"}}

	start := func(saved chan StoredToken) url.Values {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		u, err := a.Start(ctx, srv, func(_ context.Context, st StoredToken) error { saved <- st; return nil })
		if err != nil {
			t.Fatal(err)
		}
		pu, _ := url.Parse(u)
		q := pu.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("state") == "" || q.Get("resource") != srv.URL || q.Get("redirect_uri") != redirect {
			t.Fatalf("the authorization URL: %s", u)
		}
		as.mu.Lock()
		as.challenge = q.Get("code_challenge")
		as.mu.Unlock()
		return q
	}
	callback := func(l *ServiceLogins, query string) (string, error) {
		r := httptest.NewRequest("GET", redirect+"?"+query, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return l.Complete(r.WithContext(ctx))
	}

	saved := make(chan StoredToken, 1)
	q := start(saved)
	if b.Handles(q.Get("state")) || !a.Handles(q.Get("state")) {
		t.Errorf("Handles: only the replica running the flow knows it locally")
	}
	good := url.Values{"state": {q.Get("state")}, "code": {"good-code"}, "iss": {as.srv.URL}}.Encode()
	server, err := callback(b, good)
	if err != nil || server != "remote" {
		t.Fatalf("the redirect at B: %q %v", server, err)
	}
	select {
	case st := <-saved:
		if st.Token.AccessToken != "at-1" || st.Mode != "service" || st.ClientID != "backplane" {
			t.Errorf("the saved token: %+v", st)
		}
	default:
		t.Fatal("Complete at B returned before A saved the token")
	}
	for _, l := range []*ServiceLogins{a, b} {
		if _, err := callback(l, good); !errors.Is(err, ErrNoServiceLogin) {
			t.Errorf("the redirect again: %v, want ErrNoServiceLogin", err)
		}
	}

	// A wrong iss, relayed from B: A refuses it before any exchange.
	as.mu.Lock()
	before := as.exchanges
	as.mu.Unlock()
	q = start(make(chan StoredToken, 1))
	bad := url.Values{"state": {q.Get("state")}, "code": {"good-code"}, "iss": {"http://127.0.0.1:1"}}.Encode()
	if server, err := callback(b, bad); err == nil || server != "remote" {
		t.Errorf("a wrong iss at B: %q %v, want a failure", server, err)
	}
	as.mu.Lock()
	after := as.exchanges
	as.mu.Unlock()
	if after != before {
		t.Errorf("a redirect with a wrong iss was exchanged")
	}

	// Without a store, B cannot complete A's flow; A's own callback can.
	a2 := NewServiceLogins(&ServiceLoginsOptions{RedirectURL: redirect})
	b2 := NewServiceLogins(&ServiceLoginsOptions{RedirectURL: redirect})
	defer a2.Close()
	defer b2.Close()
	a = a2
	saved = make(chan StoredToken, 1)
	q = start(saved)
	good = url.Values{"state": {q.Get("state")}, "code": {"good-code"}, "iss": {as.srv.URL}}.Encode()
	if _, err := callback(b2, good); !errors.Is(err, ErrNoServiceLogin) {
		t.Errorf("B without a store: %v, want ErrNoServiceLogin", err)
	}
	if server, err := callback(a2, good); err != nil || server != "remote" || len(saved) != 1 {
		t.Errorf("A's own callback without a store: %q %v", server, err)
	}
}
