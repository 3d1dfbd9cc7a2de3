package upstream

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// refreshAS is a token endpoint of the refresh grant only: each refresh
// token works once (rotated), as fosite's and most servers' do.
type refreshAS struct {
	srv *httptest.Server

	mu        sync.Mutex
	valid     map[string]bool // refresh tokens not used yet
	resources []string
	refreshes int
}

func startRefreshAS(t *testing.T, first string, life time.Duration) *refreshAS {
	a := &refreshAS{valid: map[string]bool{first: true}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.refreshes++
		a.resources = append(a.resources, r.PostForm.Get("resource"))
		rt := r.PostForm.Get("refresh_token")
		w.Header().Set("Content-Type", "application/json")
		if r.PostForm.Get("grant_type") != "refresh_token" || !a.valid[rt] {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		delete(a.valid, rt)
		next := "rt-" + rand.Text()
		a.valid[next] = true
		json.NewEncoder(w).Encode(map[string]any{"access_token": "at-" + rand.Text(), "token_type": "Bearer",
			"refresh_token": next, "expires_in": int(life.Seconds())})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// bearerEcho answers 200 with the bearer token it got, or 403
// insufficient_scope when forbid is set.
func bearerEcho(t *testing.T, forbid bool) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if forbid {
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="tools.write tools.read"`)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Write([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
	}))
	t.Cleanup(s.Close)
	return s
}

func consentTransport(up string, tokens TokenStore) *oauthTransport {
	return newOAuthTransport(http.DefaultTransport, "remote", up, OAuth{Grant: GrantAuthorizationCode, ClientID: "bp", Tokens: tokens})
}

func send(t *testing.T, rt http.RoundTripper, url string) (string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return b.String(), nil
}

// TestConsentSharedAcrossReplicas: two replicas' transports over one
// token store: the first to need a new token refreshes it (resource sent)
// and saves it; the second reads it from the store instead of refreshing
// with the refresh token the first already used.
func TestConsentSharedAcrossReplicas(t *testing.T) {
	a := startRefreshAS(t, "rt-0", time.Hour)
	up := bearerEcho(t, false)
	tokens := &MemoryTokens{}
	key := TokenKey{Server: "remote"}
	if err := tokens.SaveToken(context.Background(), key, StoredToken{Mode: "service", TokenURL: a.srv.URL,
		Token: &oauth2.Token{AccessToken: "at-0", RefreshToken: "rt-0", Expiry: time.Now().Add(400 * time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	r1, r2 := consentTransport(up.URL, tokens), consentTransport(up.URL, tokens)
	for _, r := range []http.RoundTripper{r1, r2} {
		if got, err := send(t, r, up.URL); err != nil || got != "at-0" {
			t.Fatalf("before expiry: %q, %v", got, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // past the replacement time (half the life)
	got1, err := send(t, r1, up.URL)
	if err != nil || got1 == "at-0" {
		t.Fatalf("replica 1 after expiry: %q, %v", got1, err)
	}
	got2, err := send(t, r2, up.URL)
	if err != nil || got2 != got1 {
		t.Fatalf("replica 2 after expiry: %q, %v; want replica 1's new token %q", got2, err, got1)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refreshes != 1 || a.resources[0] != up.URL {
		t.Errorf("%d refreshes with resources %q; want one, with resource=%s", a.refreshes, a.resources, up.URL)
	}
	st, _ := tokens.Token(context.Background(), key)
	if st.Token.AccessToken != got1 || st.Token.RefreshToken == "rt-0" {
		t.Errorf("the store holds %+v; want the refreshed token and the rotated refresh token", st.Token)
	}
}

// TestConsentErrorsNameTheLogin: no token yet, a refused refresh and an
// insufficient_scope each fail with what the operator must do.
func TestConsentErrorsNameTheLogin(t *testing.T) {
	up := bearerEcho(t, false)
	tokens := &MemoryTokens{}
	_, err := send(t, consentTransport(up.URL, tokens), up.URL)
	var oe *OAuthError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "backplane servers login remote") {
		t.Fatalf("no token: %v", err)
	}

	a := startRefreshAS(t, "rt-good", time.Hour)
	tokens.SaveToken(context.Background(), TokenKey{Server: "remote"}, StoredToken{Mode: "service", TokenURL: a.srv.URL,
		Token: &oauth2.Token{AccessToken: "at-old", RefreshToken: "rt-revoked", Expiry: time.Now().Add(-time.Minute)}})
	_, err = send(t, consentTransport(up.URL, tokens), up.URL)
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "invalid_grant") || !strings.Contains(err.Error(), "servers login remote") {
		t.Fatalf("a refused refresh: %v", err)
	}
	if strings.Contains(err.Error(), "rt-revoked") || strings.Contains(err.Error(), "at-old") {
		t.Errorf("the error quotes a token: %v", err)
	}

	forbid := bearerEcho(t, true)
	tokens.SaveToken(context.Background(), TokenKey{Server: "remote"}, StoredToken{Mode: "service",
		Token: &oauth2.Token{AccessToken: "at-fresh", Expiry: time.Now().Add(time.Hour)}})
	_, err = send(t, consentTransport(forbid.URL, tokens), forbid.URL)
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "scope tools.write tools.read (insufficient_scope)") ||
		!strings.Contains(err.Error(), "servers login remote") {
		t.Fatalf("insufficient_scope: %v", err)
	}
}
