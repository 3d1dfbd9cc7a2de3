package oauthtest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/storage"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/credstore"
	"github.com/agentbackplane/backplane/internal/secrets"
	"github.com/agentbackplane/backplane/store/sqlite"
)

const publicClient = "backplane-login"

// codeAS is fosite with the authorization code grant (PKCE enforced,
// S256 only), refresh tokens (rotated) and revocation, for a public
// client whose redirect is a loopback URL (any port, RFC 8252). The
// "user" consents at once: the scripted browser only follows redirects.
type codeAS struct {
	*as
	iss string // the iss to add to the redirect ("" none; "issuer" the real one)

	amu       sync.Mutex
	authorize []url.Values // the query of each authorization request
	grants    []string     // each token request's grant_type
	revoked   int
}

func startCodeAS(t *testing.T, life time.Duration, iss string) *codeAS {
	t.Helper()
	a := &codeAS{as: &as{store: storage.NewMemoryStore()}, iss: iss}
	a.store.Clients[publicClient] = &fosite.DefaultClient{
		ID: publicClient, Public: true, RedirectURIs: []string{"http://127.0.0.1/callback", "http://127.0.0.1/oauth/upstream/callback"},
		GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
		Scopes: []string{"tools", "offline_access"},
	}
	cfg := &fosite.Config{
		AccessTokenLifespan: life, GlobalSecret: []byte("a-global-secret-of-32-bytes-long"),
		EnforcePKCE: true, EnablePKCEPlainChallengeMethod: false, RefreshTokenScopes: []string{},
	}
	a.provider = compose.Compose(cfg, a.store, compose.NewOAuth2HMACStrategy(cfg),
		compose.OAuth2AuthorizeExplicitFactory, compose.OAuth2PKCEFactory, compose.OAuth2RefreshTokenGrantFactory,
		compose.OAuth2TokenRevocationFactory, compose.OAuth2TokenIntrospectionFactory)
	l := listen(t)
	a.addr = l.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": a.issuer(), "authorization_endpoint": a.issuer() + "/authorize", "token_endpoint": a.issuer() + "/token",
			"revocation_endpoint":   a.issuer() + "/revoke",
			"grant_types_supported": []string{"authorization_code", "refresh_token"}, "response_types_supported": []string{"code"},
			"token_endpoint_auth_methods_supported":          []string{"none"},
			"code_challenge_methods_supported":               []string{"S256"},
			"scopes_supported":                               []string{"tools", "offline_access"},
			"authorization_response_iss_parameter_supported": a.iss != "",
		})
	})
	mux.HandleFunc("GET /authorize", a.authorizeEndpoint)
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err == nil {
			a.amu.Lock()
			a.grants = append(a.grants, r.PostForm.Get("grant_type"))
			a.amu.Unlock()
		}
		a.token(w, r)
	})
	mux.HandleFunc("POST /revoke", func(w http.ResponseWriter, r *http.Request) {
		err := a.provider.NewRevocationRequest(r.Context(), r)
		if err == nil {
			a.amu.Lock()
			a.revoked++
			a.amu.Unlock()
		}
		a.provider.WriteRevocationResponse(r.Context(), w, err)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *codeAS) authorizeEndpoint(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	a.amu.Lock()
	a.authorize = append(a.authorize, r.URL.Query())
	a.amu.Unlock()
	ar, err := a.provider.NewAuthorizeRequest(ctx, r)
	if err != nil {
		a.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	for _, s := range ar.GetRequestedScopes() {
		ar.GrantScope(s)
	}
	resp, err := a.provider.NewAuthorizeResponse(ctx, ar, &fosite.DefaultSession{Subject: "operator-1"})
	if err != nil {
		a.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	switch a.iss {
	case "":
	case "issuer":
		resp.AddParameter("iss", a.issuer())
	default:
		resp.AddParameter("iss", a.iss)
	}
	a.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
}

// browse is the scripted browser: it opens the URL and follows every
// redirect, to the loopback callback.
func browse(t *testing.T, u string, done chan<- error) {
	resp, err := http.Get(u)
	if err != nil {
		done <- err
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		done <- errors.New("the browser ended on " + resp.Status + " at " + resp.Request.URL.String())
		return
	}
	done <- nil
}

func sealedTokens(t *testing.T) (*credstore.Tokens, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	st, err := sqlite.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	k := make([]byte, secrets.KeySize)
	rand.Read(k)
	sl, err := secrets.New(k)
	if err != nil {
		t.Fatal(err)
	}
	return credstore.New(st, sl), dir
}

func login(t *testing.T, srv upstream.Server) (upstream.StoredToken, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	browsed := make(chan error, 1)
	shown := 0
	st, err := upstream.Login(ctx, srv, &upstream.LoginOptions{Show: func(u string) {
		shown++
		go browse(t, u, browsed)
	}})
	if shown != 1 {
		t.Fatalf("the authorization URL was shown %d times", shown)
	}
	if berr := <-browsed; berr != nil && err == nil {
		t.Fatalf("the browser: %v", berr)
	}
	return st, err
}

// TestFositeLogin: `servers login`'s flow against fosite, then serve's use
// of the saved token: the authorization request carries PKCE S256, a
// state and resource; the iss of the redirect is checked; the token is
// saved sealed; the upstream's call runs with it; after it expires (2s)
// the next call refreshes it (rotated refresh token, resource sent) and
// the store holds the new one; revoked at fosite and forgotten, the next
// call fails as not started, naming the login command. No token is in
// the log, the audit or the store's files.
func TestFositeLogin(t *testing.T) {
	l := listen(t)
	a := startCodeAS(t, 2*time.Second, "issuer")
	u := startUpstream(t, l, a.as)
	tokens, dir := sealedTokens(t)
	srv := upstream.Server{Name: "remote", URL: u.url(), OAuth: &upstream.OAuth{
		Grant: upstream.GrantAuthorizationCode, ClientID: publicClient, Scopes: []string{"tools", "offline_access"}, Tokens: tokens,
	}}
	st, err := login(t, srv)
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	a.amu.Lock()
	q := a.authorize[0]
	a.amu.Unlock()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" || q.Get("resource") != u.url() {
		t.Errorf("the authorization request: %v; want S256 PKCE, a state and resource=%s", q, u.url())
	}
	if !strings.HasPrefix(q.Get("redirect_uri"), "http://127.0.0.1:") {
		t.Errorf("redirect_uri %q, want a loopback one", q.Get("redirect_uri"))
	}
	if st.Token.RefreshToken == "" || st.TokenURL != a.issuer()+"/token" || st.RevocationURL != a.issuer()+"/revoke" || st.ClientID != publicClient {
		t.Fatalf("the login's token: refresh %t, token url %q, revocation %q, client %q", st.Token.RefreshToken != "", st.TokenURL, st.RevocationURL, st.ClientID)
	}
	_, resources, _ := a.snapshot()
	if len(resources) != 1 || resources[0] != u.url() {
		t.Errorf("the code exchange's resource: %q", resources)
	}
	ctx := context.Background()
	if err := tokens.SaveToken(ctx, upstream.TokenKey{Server: "remote"}, st); err != nil {
		t.Fatal(err)
	}

	logs := &syncBuffer{}
	g, log := newGateway(t, logs)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	up, err := upstream.Connect(cctx, srv, &upstream.Options{Registry: g, Logger: log})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer up.Close()
	call(t, g)
	if seen := u.tokensSeen(); len(seen) != 1 || seen[0] != st.Token.AccessToken {
		t.Fatalf("the call ran with %d tokens; want the login's", len(seen))
	}

	time.Sleep(2100 * time.Millisecond)
	call(t, g)
	issued, resources, _ := a.snapshot()
	seen := u.tokensSeen()
	if len(issued) != 2 || len(seen) != 2 || seen[1] != issued[1] {
		t.Fatalf("after expiry: %d tokens issued, the tool saw %d calls; want the refreshed token on the second", len(issued), len(seen))
	}
	a.amu.Lock()
	grants := append([]string(nil), a.grants...)
	a.amu.Unlock()
	if len(grants) != 2 || grants[1] != "refresh_token" || resources[1] != u.url() {
		t.Errorf("token requests %q with resources %q: want a refresh carrying resource", grants, resources)
	}
	saved, err := tokens.Token(ctx, upstream.TokenKey{Server: "remote"})
	if err != nil || saved.Token.AccessToken != issued[1] || saved.Token.RefreshToken == st.Token.RefreshToken {
		t.Fatalf("the store after the refresh: %v; want the new token and the rotated refresh token", err)
	}

	// Revoke at fosite, then forget: the next call is not started and says what to do.
	if err := upstream.Revoke(ctx, nil, saved, "", ""); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if a.revoked != 1 {
		t.Errorf("fosite revoked %d times", a.revoked)
	}
	if _, _, err := a.provider.IntrospectToken(ctx, saved.Token.AccessToken, fosite.AccessToken, &fosite.DefaultSession{}); err == nil {
		t.Errorf("the access token still introspects after its refresh token was revoked")
	}
	if err := tokens.DeleteToken(ctx, upstream.TokenKey{Server: "remote"}); err != nil {
		t.Fatal(err)
	}
	_, err = g.Call(cctx, gateway.CallRequest{Caller: "alice", Tool: "remote.greet", Arguments: json.RawMessage(`{}`)})
	if err == nil || !strings.Contains(err.Error(), "servers login remote") {
		t.Errorf("a call after the revocation: %v; want an error naming servers login", err)
	}
	if n := len(u.tokensSeen()); n != 2 {
		t.Errorf("the tool ran %d times, want 2", n)
	}

	out := logs.String()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var disk []byte
	for _, f := range files {
		b, _ := os.ReadFile(f)
		disk = append(disk, b...)
	}
	for _, tok := range append(issued, st.Token.RefreshToken, saved.Token.RefreshToken) {
		if strings.Contains(out, tok) {
			t.Errorf("a token is in the log or the audit")
		}
		if strings.Contains(string(disk), tok) {
			t.Errorf("a token is in the store's files in clear")
		}
	}
}

// TestFositeLoginWrongIss: an authorization server that advertises RFC
// 9207 but whose redirect carries another issuer: the code is never
// exchanged.
func TestFositeLoginWrongIss(t *testing.T) {
	l := listen(t)
	a := startCodeAS(t, time.Hour, "http://127.0.0.1:1")
	u := startUpstream(t, l, a.as)
	tokens, _ := sealedTokens(t)
	_, err := login(t, upstream.Server{Name: "remote", URL: u.url(), OAuth: &upstream.OAuth{
		Grant: upstream.GrantAuthorizationCode, ClientID: publicClient, Scopes: []string{"tools"}, Tokens: tokens,
	}})
	if err == nil || !errors.Is(err, upstream.ErrLogin) || !strings.Contains(err.Error(), "issuer") {
		t.Fatalf("Login with a wrong iss: %v", err)
	}
	if _, resources, _ := a.snapshot(); len(resources) != 0 {
		t.Errorf("the code was exchanged %d times", len(resources))
	}
}
