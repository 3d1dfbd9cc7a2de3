package oauthtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/storage"
	"golang.org/x/crypto/bcrypt"
)

// callerAS is fosite on 127.0.0.1 with the authorization code grant (PKCE
// enforced), refresh tokens, the client credentials grant (the catalog's
// credential) and introspection. Its authorize endpoint stands for the
// authorization server's sign-in page: the browser's cookie "account"
// says who is signed in there, and the consent is given at once.
type callerAS struct {
	*as
	accounts   map[string]bool // the accounts that may sign in
	registered []string        // the clients registered (RFC 7591)
}

func startCallerAS(t *testing.T, life time.Duration, audience, redirect string) *callerAS {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(clientSecret), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := &callerAS{as: &as{store: storage.NewMemoryStore()}, accounts: map[string]bool{"acct-alice": true, "acct-bob": true, "acct-carol": true}}
	a.store.Clients[clientID] = &fosite.DefaultClient{
		ID: clientID, Secret: hash, RedirectURIs: []string{redirect},
		GrantTypes:    []string{"authorization_code", "refresh_token", "client_credentials"},
		ResponseTypes: []string{"code"}, Scopes: []string{"tools", "admin"}, Audience: []string{audience},
	}
	cfg := &fosite.Config{
		AccessTokenLifespan: life, GlobalSecret: []byte("a-global-secret-of-32-bytes-long"),
		EnforcePKCE: true, EnablePKCEPlainChallengeMethod: false,
		RefreshTokenScopes: []string{}, // every code exchange gets a refresh token
	}
	a.provider = compose.Compose(cfg, a.store, compose.NewOAuth2HMACStrategy(cfg),
		compose.OAuth2AuthorizeExplicitFactory, compose.OAuth2RefreshTokenGrantFactory, compose.OAuth2PKCEFactory,
		compose.OAuth2ClientCredentialsGrantFactory, compose.OAuth2TokenIntrospectionFactory)
	l := listen(t)
	a.addr = l.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": a.issuer(), "authorization_endpoint": a.issuer() + "/authorize", "token_endpoint": a.issuer() + "/token",
			"grant_types_supported":                 []string{"authorization_code", "refresh_token", "client_credentials"},
			"response_types_supported":              []string{"code"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
			"code_challenge_methods_supported":      []string{"S256"},
			"registration_endpoint":                 a.issuer() + "/register",
		})
	})
	mux.HandleFunc("GET /authorize", a.authorize)
	mux.HandleFunc("POST /register", a.register)
	mux.HandleFunc("POST /token", a.codeToken)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

// register is dynamic client registration (RFC 7591), which fosite does
// not implement: this endpoint only turns the request into a public
// fosite client in its store; fosite does the rest.
func (a *callerAS) register(w http.ResponseWriter, r *http.Request) {
	var m oauthex.ClientRegistrationMetadata
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil || len(m.RedirectURIs) == 0 || m.TokenEndpointAuthMethod != "none" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client_metadata"})
		return
	}
	id := fmt.Sprintf("dcr-%d", time.Now().UnixNano())
	a.mu.Lock()
	a.store.Clients[id] = &fosite.DefaultClient{
		ID: id, Public: true, RedirectURIs: m.RedirectURIs, GrantTypes: m.GrantTypes, ResponseTypes: m.ResponseTypes,
		Scopes: strings.Fields(m.Scope), Audience: a.store.Clients[clientID].GetAudience(),
	}
	a.registered = append(a.registered, id)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"client_id": id, "redirect_uris": m.RedirectURIs, "token_endpoint_auth_method": "none",
		"grant_types": m.GrantTypes, "response_types": m.ResponseTypes})
}

func (a *callerAS) authorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c, err := r.Cookie("account")
	if err != nil || !a.accounts[c.Value] {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	ar, err := a.provider.NewAuthorizeRequest(ctx, r)
	if err != nil {
		a.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	for _, s := range ar.GetRequestedScopes() {
		ar.GrantScope(s)
	}
	resp, err := a.provider.NewAuthorizeResponse(ctx, ar, &fosite.DefaultSession{Subject: c.Value})
	if err != nil {
		a.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	a.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
}

// codeToken is the token endpoint; it records every access and refresh
// token it issues, and every grant type asked for.
func (a *callerAS) codeToken(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if err := r.ParseForm(); err == nil {
		a.mu.Lock()
		a.resources = append(a.resources, r.PostForm.Get("grant_type")+" "+r.PostForm.Get("resource"))
		a.mu.Unlock()
	}
	ar, err := a.provider.NewAccessRequest(ctx, r, &fosite.DefaultSession{})
	if err != nil {
		a.mu.Lock()
		a.refused++
		a.mu.Unlock()
		a.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	if ar.GetGrantTypes().ExactOne("client_credentials") {
		for _, s := range ar.GetRequestedScopes() {
			ar.GrantScope(s)
		}
	}
	resp, err := a.provider.NewAccessResponse(ctx, ar)
	if err != nil {
		a.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	a.mu.Lock()
	a.issued = append(a.issued, resp.GetAccessToken())
	if rt, ok := resp.ToMap()["refresh_token"].(string); ok && rt != "" {
		a.issued = append(a.issued, rt)
	}
	a.mu.Unlock()
	a.provider.WriteAccessResponse(ctx, w, ar, resp)
}

// verifyAccount is the upstream's verifier: fosite's introspection, the
// user being the account signed in (the client itself for the client
// credentials grant).
func (a *callerAS) verifyAccount(ctx context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
	_, ar, err := a.provider.IntrospectToken(ctx, tok, fosite.AccessToken, &fosite.DefaultSession{})
	if err != nil {
		return nil, auth.ErrInvalidToken
	}
	user := ar.GetSession().GetSubject()
	if user == "" {
		user = "client:" + ar.GetClient().GetID()
	}
	return &auth.TokenInfo{Scopes: ar.GetGrantedScopes(), Expiration: ar.GetSession().GetExpiresAt(fosite.AccessToken), UserID: user}, nil
}

// seenCall is what the upstream saw of one request.
type seenCall struct {
	user, token string
	call        bool   // a tools/call (its Mcp-Method header)
	tool        string // its Mcp-Name header
	refused     bool   // answered 403 insufficient_scope
}

// accountPeer is a Go SDK server behind auth.RequireBearerToken that
// records, for every request, the account and the token it carried; its
// tool whoami answers the account it ran as. Its tool admin_note needs
// the scope admin besides tools: a call of it with a token without admin
// is answered 403 insufficient_scope (RFC 6750 3.1) naming both.
type accountPeer struct {
	addr string
	mu   sync.Mutex
	seen []seenCall
}

func startAccountPeer(t *testing.T, l net.Listener, issuer string, verify auth.TokenVerifier) *accountPeer {
	return startAccountPeerAt(t, l, issuer, verify, true, false)
}

// startAccountPeerAt: stateless serves 2026-07-28 (else 2025-11-25
// sessions); openCatalog lets every POST but tools/call through without
// a token.
func startAccountPeerAt(t *testing.T, l net.Listener, issuer string, verify auth.TokenVerifier, stateless, openCatalog bool) *accountPeer {
	t.Helper()
	u := &accountPeer{addr: l.Addr().String()}
	s := sdk.NewServer(&sdk.Implementation{Name: "account-upstream", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you are " + req.Extra.TokenInfo.UserID}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "admin_note", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "noted by " + req.Extra.TokenInfo.UserID +
				" with " + strings.Join(req.Extra.TokenInfo.Scopes, " ")}}}, nil
		})
	mux := http.NewServeMux()
	mux.Handle("GET /meta/prm", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: u.url(), AuthorizationServers: []string{issuer}, ScopesSupported: []string{"tools"},
	}))
	// Stateless: MCP 2026-07-28, each request on its own (the SDK's
	// stateful handler serves 2025-11-25 sessions only).
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: stateless})
	protected := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: "http://" + u.addr + "/meta/prm", Scopes: []string{"tools"},
	})(handler)
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		rec := seenCall{token: tok, call: r.Header.Get("Mcp-Method") == "tools/call", tool: r.Header.Get("Mcp-Name")}
		var ti *auth.TokenInfo
		if tok != "" {
			if info, err := verify(r.Context(), tok, r); err == nil {
				ti, rec.user = info, info.UserID
			}
		}
		rec.refused = rec.call && rec.tool == "admin_note" && ti != nil && !slices.Contains(ti.Scopes, "admin")
		u.mu.Lock()
		u.seen = append(u.seen, rec)
		u.mu.Unlock()
		if rec.refused {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope="tools admin", resource_metadata=%q`, "http://"+u.addr+"/meta/prm"))
			http.Error(w, "insufficient scope", http.StatusForbidden)
			return
		}
		if openCatalog && !rec.call && r.Method == http.MethodPost {
			handler.ServeHTTP(w, r)
			return
		}
		protected.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return u
}

func (u *accountPeer) url() string { return "http://" + u.addr + "/mcp" }

func (u *accountPeer) calls() []seenCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []seenCall
	for _, s := range u.seen {
		if s.call {
			out = append(out, s)
		}
	}
	return out
}

// runs are the tools/call requests the upstream let through (with a
// token it accepted).
func (u *accountPeer) runs() []seenCall {
	var out []seenCall
	for _, s := range u.calls() {
		if s.user != "" && !s.refused {
			out = append(out, s)
		}
	}
	return out
}

func (u *accountPeer) all() []seenCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenCall(nil), u.seen...)
}

// browser is a scripted browser signed in at the authorization server as
// account: it follows the authorization URL to the gateway's callback.
func browser(t *testing.T, account, issuer string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(issuer)
	jar.SetCookies(u, []*http.Cookie{{Name: "account", Value: account, Path: "/"}})
	return &http.Client{Jar: jar, Timeout: 30 * time.Second}
}

// signIn follows the authorization URL as account and returns the
// callback's page; it fails the test unless the callback says connected.
func signIn(t *testing.T, account, issuer, authURL string) {
	t.Helper()
	if !strings.HasPrefix(authURL, issuer+"/authorize?") {
		t.Fatalf("the authorization URL %q is not the authorization server's", authURL)
	}
	q, _ := url.Parse(authURL)
	for _, p := range []string{"state", "code_challenge", "redirect_uri", "resource"} {
		if q.Query().Get(p) == "" {
			t.Errorf("the authorization URL has no %s", p)
		}
	}
	if m := q.Query().Get("code_challenge_method"); m != "S256" {
		t.Errorf("code_challenge_method %q, want S256", m)
	}
	resp, err := browser(t, account, issuer).Get(authURL)
	if err != nil {
		t.Fatalf("following the authorization URL: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Connected") {
		t.Fatalf("the callback answered %s: %s", resp.Status, body)
	}
}

// callbackServer serves logins at /cb on a listener of its own.
func callbackServer(t *testing.T) (*upstream.Logins, string) {
	t.Helper()
	l := listen(t)
	redirect := "http://" + l.Addr().String() + "/cb"
	logins := upstream.NewLogins(&upstream.LoginsOptions{RedirectURL: redirect})
	srv := &http.Server{Handler: logins}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return logins, redirect
}

type perCallerRig struct {
	as     *callerAS
	peer   *accountPeer
	g      *gateway.Gateway
	logs   *syncBuffer
	tokens *upstream.MemoryTokens
}

func newPerCallerRig(t *testing.T, life time.Duration) *perCallerRig {
	t.Helper()
	logins, redirect := callbackServer(t)
	l := listen(t)
	a := startCallerAS(t, life, "http://"+l.Addr().String()+"/mcp", redirect)
	p := startAccountPeer(t, l, a.issuer(), a.verifyAccount)
	logs := &syncBuffer{}
	g, log := newGatewayFor(t, logs, "alice", "bob")
	tokens := &upstream.MemoryTokens{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: p.url(), OAuth: &upstream.OAuth{
		Mode: upstream.OAuthModePerCaller, ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{"tools"},
	}}, &upstream.Options{Registry: g, Logger: log, Tokens: tokens, Logins: logins})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { up.Close() })
	if up.Protocol() != upstream.Protocol20260728 {
		t.Fatalf("the upstream speaks %s", up.Protocol())
	}
	return &perCallerRig{as: a, peer: p, g: g, logs: logs, tokens: tokens}
}

func (r *perCallerRig) call(t *testing.T, caller string, client tool.Client) (*gateway.CallResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.g.Call(ctx, gateway.CallRequest{Caller: caller, Tool: "remote.whoami", Arguments: json.RawMessage(`{}`), Client: client})
}

// mustRun calls as caller and wants the upstream to answer as account.
func (r *perCallerRig) mustRun(t *testing.T, caller, account string) {
	t.Helper()
	res, err := r.call(t, caller, nil)
	if err != nil {
		t.Fatalf("%s: %v", caller, err)
	}
	if !strings.Contains(string(res.Result), "you are "+account) {
		t.Fatalf("%s's call ran as %s, want %s", caller, res.Result, account)
	}
}

// loginURL calls as caller, wants the call refused as not run with the
// authorization URL in its details, and returns the URL.
func (r *perCallerRig) loginURL(t *testing.T, caller string) string {
	t.Helper()
	before := len(r.peer.calls())
	_, err := r.call(t, caller, nil)
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		t.Fatalf("%s's call without a credential: %v, want a gateway error", caller, err)
	}
	u, _ := ge.Details["authorization_url"].(string)
	if ge.Class != tool.ClassExecutionFailure || ge.Details["status"] != "failed" || u == "" {
		t.Fatalf("%s's call without a credential: class %s, details %v: want execution_failure, failed, the URL", caller, ge.Class, ge.Details)
	}
	if strings.Contains(ge.Message, u) {
		t.Errorf("the message repeats the URL (the journal keeps messages): %s", ge.Message)
	}
	if n := len(r.peer.calls()); n != before {
		t.Errorf("the upstream saw %d tools/call for a call that was refused before it was sent", n-before)
	}
	return u
}

// TestFositePerCaller: two callers, two accounts. A caller without a
// credential is refused (not run) with the authorization URL; a scripted
// browser signs in at fosite, the gateway's callback redeems the code
// (PKCE); the retry runs with that caller's token. Each call reaches the
// upstream with its own caller's token, no caller's token is sent on a
// request that is not that caller's call, a token is refreshed after it
// expires, the audit says which credential each call used, and no token
// is in the log or the audit.
func TestFositePerCaller(t *testing.T) {
	r := newPerCallerRig(t, 3*time.Second)
	signIn(t, "acct-alice", r.as.issuer(), r.loginURL(t, "alice"))
	r.mustRun(t, "alice", "acct-alice")
	// The same URL until it is used: bob's is his own.
	bobURL := r.loginURL(t, "bob")
	if again := r.loginURL(t, "bob"); again != bobURL {
		t.Errorf("a retry before signing in got another URL")
	}
	signIn(t, "acct-bob", r.as.issuer(), bobURL)
	// A used URL is refused.
	resp, err := browser(t, "acct-bob", r.as.issuer()).Get(bobURL)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("the authorization URL worked twice")
		}
	}
	for _, c := range []string{"bob", "alice", "bob", "alice"} {
		r.mustRun(t, c, "acct-"+c)
	}
	// At once: 16 calls of both callers in flight, each its own.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		caller := []string{"alice", "bob"}[i%2]
		wg.Go(func() {
			res, err := r.call(t, caller, nil)
			if err == nil && !strings.Contains(string(res.Result), "you are acct-"+caller) {
				err = fmt.Errorf("%s's call ran as %s", caller, res.Result)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tokensOf := map[string]map[string]bool{}
	for _, s := range r.peer.calls() {
		if tokensOf[s.user] == nil {
			tokensOf[s.user] = map[string]bool{}
		}
		tokensOf[s.user][s.token] = true
	}
	for tok := range tokensOf["acct-alice"] {
		if tokensOf["acct-bob"][tok] {
			t.Errorf("a token was used for both accounts")
		}
	}
	if len(tokensOf) != 2 {
		t.Errorf("the calls ran as %d accounts, want 2: %v", len(tokensOf), keys(tokensOf))
	}
	for _, s := range r.peer.all() {
		if !s.call && s.user != "" && s.user != "client:"+clientID {
			t.Errorf("a request that is no caller's call carried %s's token", s.user)
		}
	}
	// Expiry: fosite's tokens live 3s; the next call refreshes alice's.
	st, err := r.tokens.Token(context.Background(), upstream.TokenKey{Server: "remote", Caller: "alice"})
	if err != nil || st.Mode != upstream.OAuthModePerCaller || st.Token.RefreshToken == "" {
		t.Fatalf("alice's stored token: %+v, %v", st, err)
	}
	time.Sleep(time.Until(st.Token.Expiry) + 100*time.Millisecond)
	r.mustRun(t, "alice", "acct-alice")
	calls := r.peer.calls()
	if last := calls[len(calls)-1]; last.token == st.Token.AccessToken {
		t.Errorf("the call after expiry carried the expired token")
	}
	_, grants, _ := r.as.snapshot()
	if !slices.ContainsFunc(grants, func(g string) bool { return strings.HasPrefix(g, "refresh_token ") }) {
		t.Errorf("no refresh grant was asked for: %v", grants)
	}
	for _, g := range grants {
		if !strings.HasSuffix(g, " "+r.peer.url()) {
			t.Errorf("a token request without resource=%s: %q", r.peer.url(), g)
		}
	}
	out := r.logs.String()
	for _, want := range []string{`"credential":"oauth_per_caller"`, `"credential_server":"remote"`, `"credential_caller":"alice"`, `"credential_caller":"bob"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the audit does not hold %s", want)
		}
	}
	issued, _, _ := r.as.snapshot()
	for _, tok := range append(issued, clientSecret) {
		if strings.Contains(out, tok) {
			t.Errorf("a token or the client secret is in the log or the audit")
		}
	}
}

// elicitingClient is a 2025-11-25 client behind a call (tool.Client, as
// the server's session client is): it answers a URL-mode elicitation by
// signing in with its browser and accepting.
type elicitingClient struct {
	t       *testing.T
	account string
	issuer  string
	asked   []json.RawMessage
}

func (c *elicitingClient) Progress(context.Context, tool.Progress) error { return nil }
func (c *elicitingClient) Log(context.Context, tool.LogMessage) error    { return nil }
func (c *elicitingClient) Request(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c.asked = append(c.asked, params)
	var p struct{ Mode, URL, ElicitationID string }
	if method != tool.RequestElicitation || json.Unmarshal(params, &p) != nil || p.Mode != "url" || p.ElicitationID == "" {
		return nil, fmt.Errorf("%w: unexpected %s %s", tool.ErrNoChannel, method, params)
	}
	signIn(c.t, c.account, c.issuer, p.URL)
	return json.RawMessage(`{"action":"accept"}`), nil
}

// deferringClient answers by calling again (2026-07-28).
type deferringClient struct{ elicitingClient }

func (deferringClient) DefersInput() bool { return true }

// Capabilities: it can show a URL-mode elicitation (a client that cannot
// gets the error with the URL instead).
func (deferringClient) Capabilities() tool.Capabilities {
	return tool.Capabilities{ElicitationURL: true}
}

// TestFositePerCallerElicitation: a client that takes a URL-mode
// elicitation during the call is asked, signs in, and the very call then
// runs with its new token.
func TestFositePerCallerElicitation(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	c := &elicitingClient{t: t, account: "acct-alice", issuer: r.as.issuer()}
	res, err := r.call(t, "alice", c)
	if err != nil {
		t.Fatalf("the call: %v", err)
	}
	if !strings.Contains(string(res.Result), "you are acct-alice") || len(c.asked) != 1 {
		t.Fatalf("ran as %s after %d elicitations, want acct-alice after 1", res.Result, len(c.asked))
	}
	if !strings.Contains(r.logs.String(), `"purpose":"upstream_login"`) {
		t.Errorf("the elicitation is not audited")
	}
}

// TestFositePerCallerDeferred: a client that answers by calling again
// gets an input_required answer (tool.InputRequiredError) with one
// URL-mode elicitation, and nothing was sent; once signed in, the retry
// carrying the gateway's own state runs as a new call.
func TestFositePerCallerDeferred(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	r.invokeDeferred(t, "remote.whoami", "you are acct-alice", func(string) {
		if n := len(r.peer.calls()); n != 0 {
			t.Fatalf("the upstream saw %d calls", n)
		}
	})
}

// invokeDeferred calls tool name as alice from a 2026-07-28 client that
// answers by calling again: the first call must answer input_required,
// not started, with one URL-mode elicitation, backplane_login, whose URL
// atLogin checks before alice signs in there; the retry, carrying the
// gateway's state, must run and answer text containing want.
func (r *perCallerRig) invokeDeferred(t *testing.T, name, want string, atLogin func(url string)) {
	t.Helper()
	tl, _, ok := r.g.Tool(name)
	if !ok {
		t.Fatalf("%s is not registered", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &deferringClient{elicitingClient{t: t}}
	_, err := tl.Backend.Invoke(ctx, &tool.Call{CallID: "c1", Tool: name, Caller: "alice", Arguments: json.RawMessage(`{}`), Client: c})
	var ire *tool.InputRequiredError
	if !errors.As(err, &ire) || !errors.Is(err, tool.ErrNotStarted) || len(ire.Requests) != 1 {
		t.Fatalf("Invoke: %v, want an input_required answer that did not start", err)
	}
	req := ire.Requests["backplane_login"]
	var p struct{ Mode, URL string }
	if req.Method != tool.RequestElicitation || json.Unmarshal(req.Params, &p) != nil || p.Mode != "url" {
		t.Fatalf("the input request: %v", ire.Requests)
	}
	atLogin(p.URL)
	signIn(t, "acct-alice", r.as.issuer(), p.URL)
	res, err := tl.Backend.Invoke(ctx, &tool.Call{CallID: "c2", Tool: name, Caller: "alice", Arguments: json.RawMessage(`{}`), Client: c,
		Input: &tool.InputAnswers{Responses: map[string]json.RawMessage{"backplane_login": json.RawMessage(`{"action":"accept"}`)}, State: ire.State}})
	if err != nil || !strings.Contains(string(res.Content), want) {
		t.Fatalf("the retry: %v %v", res, err)
	}
}

// TestFositePerCallerRefusesSessions: an upstream that speaks only
// 2025-11-25 (one session for every caller) is refused at Connect,
// saying why, with nothing registered.
func TestFositePerCallerRefusesSessions(t *testing.T) {
	logins, redirect := callbackServer(t)
	l := listen(t)
	a := startCallerAS(t, time.Hour, "http://"+l.Addr().String()+"/mcp", redirect)
	p := startAccountPeerAt(t, l, a.issuer(), a.verifyAccount, false, false)
	logs := &syncBuffer{}
	g, log := newGatewayFor(t, logs, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: p.url(), OAuth: &upstream.OAuth{
		Mode: upstream.OAuthModePerCaller, ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{"tools"},
	}}, &upstream.Options{Registry: g, Logger: log, Logins: logins})
	if err == nil || !strings.Contains(err.Error(), "needs MCP 2026-07-28") || !strings.Contains(err.Error(), "speaks 2025-11-25") {
		t.Fatalf("Connect: %v, want the revision refused", err)
	}
	if _, _, ok := g.Tool("remote.whoami"); ok {
		t.Errorf("the tool is registered")
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// newGatewayFor is newGateway with every one of callers allowed everything.
func newGatewayFor(t *testing.T, logs *syncBuffer, callers ...string) (*gateway.Gateway, *slog.Logger) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var rules []policy.Rule
	for _, c := range callers {
		rules = append(rules, policy.Rule{Caller: c, Allow: []string{"*"}})
	}
	pr, err := policy.NewRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return gateway.New(&gateway.Options{Store: st, Policy: pr, Logger: log, Approvals: gateway.ApprovalOptions{}, Timeout: 20 * time.Second}), log
}

// TestFositePerCallerCallbackRefusals: the callback refuses an unknown
// state, an error answer, an iss that is not the authorization server's
// and a code fosite does not redeem, each with a page saying why, and
// saves nothing; each flow it ends is used up (the next call gets a new
// URL).
func TestFositePerCallerCallbackRefusals(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	hc := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name  string
		query func(state string) url.Values
		want  string
	}{
		{"unknown state", func(string) url.Values { return url.Values{"state": {"not-a-state"}, "code": {"x"}} }, "expired or was already used"},
		{"error answer", func(s string) url.Values {
			return url.Values{"state": {s}, "error": {"access_denied"}, "error_description": {"the person said no"}}
		}, "access_denied (the person said no)"},
		{"another issuer", func(s string) url.Values {
			return url.Values{"state": {s}, "code": {"x"}, "iss": {"http://127.0.0.1:1/other"}}
		}, "iss does not match"},
		{"a code fosite does not know", func(s string) url.Values { return url.Values{"state": {s}, "code": {"forged"}} }, "did not give a token"},
		{"no code", func(s string) url.Values { return url.Values{"state": {s}} }, "no authorization code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			au, err := url.Parse(r.loginURL(t, "alice"))
			if err != nil {
				t.Fatal(err)
			}
			state, redirect := au.Query().Get("state"), au.Query().Get("redirect_uri")
			resp, err := hc.Get(redirect + "?" + tc.query(state).Encode())
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
				t.Errorf("the callback answered %s %q, want 400 saying %q", resp.Status, body, tc.want)
			}
			if _, err := r.tokens.Token(context.Background(), upstream.TokenKey{Server: "remote", Caller: "alice"}); !errors.Is(err, upstream.ErrNoToken) {
				t.Errorf("a token was saved: %v", err)
			}
			if tc.name != "unknown state" {
				if next, _ := url.Parse(r.loginURL(t, "alice")); next.Query().Get("state") == state {
					t.Errorf("the flow the callback ended is offered again")
				}
			}
		})
	}
}

// TestFositePerCallerRevoked: fosite revokes alice's access token; the
// upstream's 401 gets one refresh and one retry, and the call runs once
// with the new token. Then her refresh token is revoked too: the next
// call is refused before anything reaches the tool, and she is asked to
// connect again.
func TestFositePerCallerRevoked(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	signIn(t, "acct-alice", r.as.issuer(), r.loginURL(t, "alice"))
	r.mustRun(t, "alice", "acct-alice")
	ctx := context.Background()
	st, err := r.tokens.Token(ctx, upstream.TokenKey{Server: "remote", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_, ar, err := r.as.provider.IntrospectToken(ctx, st.Token.AccessToken, fosite.AccessToken, &fosite.DefaultSession{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.as.store.RevokeAccessToken(ctx, ar.GetID()); err != nil {
		t.Fatal(err)
	}
	r.mustRun(t, "alice", "acct-alice")
	calls := r.peer.runs()
	if n := len(calls); n != 2 {
		t.Fatalf("the tool ran %d times, want 2", n)
	}
	if calls[1].token == st.Token.AccessToken {
		t.Errorf("the second call ran with the revoked token")
	}
	seen := r.peer.all()
	if last := seen[len(seen)-2]; !last.call || last.token != st.Token.AccessToken || last.user != "" {
		t.Errorf("the request before the run was not the refused one with the revoked token")
	}
	// Both tokens revoked: refused, connect again.
	st, _ = r.tokens.Token(ctx, upstream.TokenKey{Server: "remote", Caller: "alice"})
	_, ar, err = r.as.provider.IntrospectToken(ctx, st.Token.AccessToken, fosite.AccessToken, &fosite.DefaultSession{})
	if err != nil {
		t.Fatal(err)
	}
	r.as.store.RevokeAccessToken(ctx, ar.GetID())
	_, rr, err := r.as.provider.IntrospectToken(ctx, st.Token.RefreshToken, fosite.RefreshToken, &fosite.DefaultSession{})
	if err != nil {
		t.Fatal(err)
	}
	r.as.store.RevokeRefreshToken(ctx, rr.GetID())
	_, err = r.call(t, "alice", nil)
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Details["status"] != "failed" {
		t.Fatalf("a call with every token revoked: %v, want failed (not run)", err)
	}
	if n := len(r.peer.runs()); n != 2 {
		t.Errorf("the tool ran %d times, want 2", n)
	}
	if u := r.loginURL(t, "alice"); u == "" {
		t.Errorf("alice is not asked to connect again")
	}
}

// TestFositePerCallerWithoutCallback: a process that serves no callback
// (backplane call) cannot complete a login: the call is refused, not
// run, saying serve is needed.
func TestFositePerCallerWithoutCallback(t *testing.T) {
	l := listen(t)
	a := startCallerAS(t, time.Hour, "http://"+l.Addr().String()+"/mcp", "http://127.0.0.1:1/cb")
	p := startAccountPeer(t, l, a.issuer(), a.verifyAccount)
	logs := &syncBuffer{}
	g, log := newGatewayFor(t, logs, "alice")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: p.url(), OAuth: &upstream.OAuth{
		Mode: upstream.OAuthModePerCaller, ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{"tools"},
	}}, &upstream.Options{Registry: g, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	_, err = g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "remote.whoami", Arguments: json.RawMessage(`{}`)})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Details["status"] != "failed" || !strings.Contains(ge.Message, "backplane serve's callback") {
		t.Fatalf("%v, want failed saying serve is needed", err)
	}
	if n := len(p.calls()); n != 0 {
		t.Errorf("the upstream saw %d calls", n)
	}
}

// TestFositePerCallerRegistered: no client_id configured: the gateway
// registers itself as a public client (RFC 7591) once, and the caller's
// sign-in, PKCE and refresh-free call go through with that client.
func TestFositePerCallerRegistered(t *testing.T) {
	logins, redirect := callbackServer(t)
	l := listen(t)
	a := startCallerAS(t, time.Hour, "http://"+l.Addr().String()+"/mcp", redirect)
	p := startAccountPeerAt(t, l, a.issuer(), a.verifyAccount, true, true)
	logs := &syncBuffer{}
	g, log := newGatewayFor(t, logs, "alice", "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: p.url(), OAuth: &upstream.OAuth{
		Mode: upstream.OAuthModePerCaller, Scopes: []string{"tools"},
	}}, &upstream.Options{Registry: g, Logger: log, Logins: logins})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer up.Close()
	r := &perCallerRig{as: a, peer: p, g: g, logs: logs}
	u := r.loginURL(t, "alice")
	q, _ := url.Parse(u)
	a.mu.Lock()
	registered := append([]string(nil), a.registered...)
	a.mu.Unlock()
	if len(registered) != 1 || q.Query().Get("client_id") != registered[0] {
		t.Fatalf("registered %v, the URL's client %q", registered, q.Query().Get("client_id"))
	}
	signIn(t, "acct-alice", a.issuer(), u)
	r.mustRun(t, "alice", "acct-alice")
	signIn(t, "acct-bob", a.issuer(), r.loginURL(t, "bob"))
	r.mustRun(t, "bob", "acct-bob")
	a.mu.Lock()
	n := len(a.registered)
	a.mu.Unlock()
	if n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
}

// decliningClient declines every elicitation.
type decliningClient struct{ elicitingClient }

func (c *decliningClient) Request(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c.asked = append(c.asked, params)
	return json.RawMessage(`{"action":"decline"}`), nil
}

// TestFositePerCallerDeclined: a person who declines the URL-mode
// elicitation gets the refusal with the URL; nothing was sent.
func TestFositePerCallerDeclined(t *testing.T) {
	r := newPerCallerRig(t, time.Hour)
	c := &decliningClient{}
	_, err := r.call(t, "alice", c)
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Details["status"] != "failed" || ge.Details["authorization_url"] == nil || len(c.asked) != 1 {
		t.Fatalf("%v after %d elicitations, want failed with the URL after 1", err, len(c.asked))
	}
	if n := len(r.peer.calls()); n != 0 {
		t.Errorf("the upstream saw %d calls", n)
	}
}
