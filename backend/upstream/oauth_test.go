package upstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// testAS is the smallest authorization server the tests need, on
// 127.0.0.1: metadata (RFC 8414, or only OIDC discovery), and a token
// endpoint for the client credentials grant that issues random opaque
// tokens, remembers them, and can revoke them. It is written here, not
// taken from a library: see docs/upstream-auth.md.
type testAS struct {
	addr     string
	secret   string
	resource string        // the resource parameter a token request must carry
	life     time.Duration // the tokens' lifetime
	oidcOnly bool          // serve only /.well-known/openid-configuration

	mu        sync.Mutex
	issued    map[string]time.Time // token -> expiry
	revoked   map[string]bool
	revokeNew bool // every token refused, those issued later too
	down      bool // every token request refused (invalid_client)
	refused   int  // token requests refused
	requests  int  // token requests
}

func startAS(t *testing.T, secret string) *testAS {
	t.Helper()
	a := &testAS{secret: secret, life: time.Hour, issued: map[string]time.Time{}, revoked: map[string]bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.addr = l.Addr().String()
	mux := http.NewServeMux()
	meta := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": a.issuer(), "token_endpoint": a.tokenURL(),
			"grant_types_supported":                 []string{"client_credentials"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic"},
			// The SDK's metadata check requires PKCE to be advertised.
			"code_challenge_methods_supported": []string{"S256"},
		})
	}
	mux.HandleFunc("GET /.well-known/openid-configuration", meta)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		if a.oidcOnly {
			http.NotFound(w, r)
			return
		}
		meta(w, r)
	})
	mux.HandleFunc("POST /token", a.token)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *testAS) issuer() string   { return "http://" + a.addr }
func (a *testAS) tokenURL() string { return a.issuer() + "/token" }

func (a *testAS) token(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests++
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostFormValue("client_id"), r.PostFormValue("client_secret")
	}
	w.Header().Set("Content-Type", "application/json")
	if id != "backplane" || secret != a.secret || a.down {
		a.refused++
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
		return
	}
	if r.PostFormValue("grant_type") != "client_credentials" || r.PostFormValue("resource") != a.resource {
		a.refused++
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_target","error_description":"resource %q"}`, r.PostFormValue("resource"))
		return
	}
	b := make([]byte, 16)
	rand.Read(b)
	tok := "at-" + hex.EncodeToString(b)
	a.issued[tok] = time.Now().Add(a.life)
	json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(a.life / time.Second)})
}

// verify is the upstream's TokenVerifier: a token this server issued, not
// revoked.
func (a *testAS) verify(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.issued[tok]
	if !ok || a.revoked[tok] || a.revokeNew {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{Expiration: exp}, nil
}

func (a *testAS) tokens() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for t := range a.issued {
		out = append(out, t)
	}
	return out
}

func (a *testAS) revokeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for t := range a.issued {
		a.revoked[t] = true
	}
}

func (a *testAS) counts() (requests, refused, issued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests, a.refused, len(a.issued)
}

// oauthUpstream is a Go SDK server over streamable HTTP on 127.0.0.1,
// behind the SDK's auth.RequireBearerToken with the AS's tokens. prm says
// where its protected resource metadata is: "challenge" (a path only the
// 401's resource_metadata names), "fallback" (.well-known at the
// endpoint's path, the 401 naming none) or "" (none at all).
type oauthUpstream struct {
	addr   string
	calls  atomic.Int64
	unauth atomic.Int64 // requests answered 401
	posts  atomic.Int64 // tools/call requests received, refused or not
	mu     sync.Mutex
	seen   []string // the tokens the tool ran with
}

func startOAuthUpstream(t *testing.T, a *testAS, prm string) *oauthUpstream {
	t.Helper()
	h := &oauthUpstream{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = l.Addr().String()
	a.resource = h.url()
	s := sdk.NewServer(&sdk.Implementation{Name: "oauth-upstream", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "greet", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			h.calls.Add(1)
			h.mu.Lock()
			h.seen = append(h.seen, strings.TrimPrefix(req.Extra.Header.Get("Authorization"), "Bearer "))
			h.mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hello"}}}, nil
		})
	var opts auth.RequireBearerTokenOptions
	meta := &oauthex.ProtectedResourceMetadata{Resource: h.url(), AuthorizationServers: []string{a.issuer()}}
	mux := http.NewServeMux()
	switch prm {
	case "challenge":
		opts.ResourceMetadataURL = "http://" + h.addr + "/meta/prm"
		mux.Handle("GET /meta/prm", auth.ProtectedResourceMetadataHandler(meta))
	case "fallback":
		mux.Handle("GET /.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(meta))
	}
	mcpHandler := auth.RequireBearerToken(a.verify, &opts)(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), `"tools/call"`) {
				h.posts.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		mcpHandler.ServeHTTP(&statusSpy{ResponseWriter: w, on401: func() { h.unauth.Add(1) }}, r)
	}))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return h
}

func (h *oauthUpstream) url() string { return "http://" + h.addr + "/mcp" }

func (h *oauthUpstream) tokensSeen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

type statusSpy struct {
	http.ResponseWriter
	on401 func()
}

func (s *statusSpy) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		s.on401()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusSpy) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

const clientSecret = "client-secret-5c1d"

// noSecretsLogged fails when the operational log or the audit (both in
// e.logs) holds any token the AS issued, or the client secret.
func noSecretsLogged(t *testing.T, e *env, a *testAS) {
	t.Helper()
	logs := e.logs.String()
	toks := a.tokens()
	if len(toks) == 0 {
		t.Fatal("no token was issued: the check below would prove nothing")
	}
	for _, tok := range append(toks, clientSecret) {
		if strings.Contains(logs, tok) {
			t.Errorf("a token or the secret is in the log or the audit: %s", tok)
		}
	}
}

// auditHasCredential: the audit of the call to remote.greet records the
// credential's mode and server.
func auditHasCredential(t *testing.T, e *env) {
	t.Helper()
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"call"`) && strings.Contains(line, `"tool":"remote.greet"`) {
			if !strings.Contains(line, `"credential":"oauth_service"`) || !strings.Contains(line, `"credential_server":"remote"`) {
				t.Errorf("the call's audit does not record the credential: %s", line)
			}
			return
		}
	}
	t.Errorf("no audit event for remote.greet in:\n%s", e.logs.String())
}

func oauthServer(h *oauthUpstream, secret, tokenURL string) Server {
	return Server{Name: "remote", URL: h.url(), OAuth: &OAuth{ClientID: "backplane", ClientSecret: secret, TokenURL: tokenURL}}
}

// TestOAuthDiscovery: with no token_url, the first request's 401 leads to
// the token endpoint: through the challenge's resource_metadata, through
// the .well-known fallback at the endpoint's path, and with the
// authorization server's metadata only at OIDC discovery. The call then
// reaches the upstream with the issued token, requested for the
// upstream's URL (resource, which the AS checks).
func TestOAuthDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name, prm string
		oidcOnly  bool
	}{
		{"challenge", "challenge", false},
		{"fallback", "fallback", false},
		{"oidc", "fallback", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAS(t, clientSecret)
			a.oidcOnly = tc.oidcOnly
			h := startOAuthUpstream(t, a, tc.prm)
			e := newEnv(t)
			e.connect(t, oauthServer(h, clientSecret, ""), nil)
			e.mustCall(t, "remote.greet", `{}`)
			toks := a.tokens()
			if len(toks) != 1 {
				t.Fatalf("%d tokens issued, want 1", len(toks))
			}
			if seen := h.tokensSeen(); len(seen) != 1 || seen[0] != toks[0] {
				t.Errorf("the tool ran with %q, want the issued token", seen)
			}
			if h.unauth.Load() != 1 {
				t.Errorf("%d requests refused with 401, want 1 (the first, which discovery starts from)", h.unauth.Load())
			}
			auditHasCredential(t, e)
			noSecretsLogged(t, e, a)
		})
	}
}

// TestOAuthNoMetadata: no protected resource metadata anywhere and no
// token_url: Connect fails naming the server and saying to set token_url.
func TestOAuthNoMetadata(t *testing.T) {
	a := startAS(t, clientSecret)
	h := startOAuthUpstream(t, a, "")
	e := newEnv(t)
	_, err := e.tryConnect(oauthServer(h, clientSecret, ""), nil)
	if err == nil || !strings.Contains(err.Error(), "upstream remote") || !strings.Contains(err.Error(), "set token_url") {
		t.Fatalf("Connect: %v, want an error naming the server and token_url", err)
	}
	if _, _, n := a.counts(); n != 0 {
		t.Errorf("%d tokens issued without a token endpoint found", n)
	}
}

// TestOAuthExpiry: with token_url (no discovery, so no 401 at all), a
// token is used until shortly before it expires, then a new one is
// fetched before any request is refused.
func TestOAuthExpiry(t *testing.T) {
	a := startAS(t, clientSecret)
	a.life = 2 * time.Second // replaced after 1s: half its life, under tokenEarly
	h := startOAuthUpstream(t, a, "")
	e := newEnv(t)
	e.connect(t, oauthServer(h, clientSecret, a.tokenURL()), nil)
	e.mustCall(t, "remote.greet", `{}`)
	e.mustCall(t, "remote.greet", `{}`)
	if _, _, n := a.counts(); n != 1 {
		t.Fatalf("%d tokens issued before expiry, want 1 (cached)", n)
	}
	time.Sleep(1100 * time.Millisecond)
	e.mustCall(t, "remote.greet", `{}`)
	seen := h.tokensSeen()
	if _, _, n := a.counts(); n != 2 || len(seen) != 3 || seen[2] == seen[0] {
		t.Errorf("after the first token's early replacement: %d tokens issued, the tool saw %d calls (%v), want 2 tokens and a new one on the third call", n, len(seen), seen[2] != seen[0])
	}
	if h.unauth.Load() != 0 {
		t.Errorf("%d requests refused with 401, want none: the token is replaced before it expires", h.unauth.Load())
	}
	noSecretsLogged(t, e, a)
}

// TestOAuthRefreshOn401: a token the upstream stops accepting (revoked)
// costs one 401, one new token and one retry: the call runs once. When
// every token is refused the call fails after that one retry, never run,
// and no further token is fetched for it.
func TestOAuthRefreshOn401(t *testing.T) {
	a := startAS(t, clientSecret)
	h := startOAuthUpstream(t, a, "challenge")
	e := newEnv(t)
	e.connect(t, oauthServer(h, clientSecret, ""), nil)
	e.mustCall(t, "remote.greet", `{}`)
	_, _, before := a.counts()
	unauthBefore, postsBefore := h.unauth.Load(), h.posts.Load()
	a.revokeAll()
	e.mustCall(t, "remote.greet", `{}`)
	if _, _, n := a.counts(); n != before+1 {
		t.Errorf("%d tokens issued after the revocation, want %d", n, before+1)
	}
	if got := h.unauth.Load() - unauthBefore; got != 1 {
		t.Errorf("%d requests refused after the revocation, want 1", got)
	}
	if got := h.posts.Load() - postsBefore; got != 2 {
		t.Errorf("the call was sent %d times, want 2 (refused, then the retry)", got)
	}
	if c := h.calls.Load(); c != 2 {
		t.Errorf("the tool ran %d times, want 2", c)
	}
	if seen := h.tokensSeen(); seen[1] == seen[0] {
		t.Error("the retry carried the revoked token")
	}

	// Every token refused: a token the verifier does not know.
	refuseAll(a)
	postsBefore = h.posts.Load()
	_, ge := e.call(t, "remote.greet", `{}`)
	if ge == nil {
		t.Fatal("the call succeeded with every token refused")
	}
	t.Logf("the refused call: %v %+v", ge, ge.Details)
	if got := h.posts.Load() - postsBefore; got != 2 {
		t.Errorf("the refused call was sent %d times, want 2 (one retry, no more)", got)
	}
	if c := h.calls.Load(); c != 2 {
		t.Errorf("the tool ran %d times, want still 2", c)
	}
	if d := ge.Details["status"]; d != "failed" {
		t.Errorf("a call refused with 401 is settled %v (%+v), want failed: it never ran", d, ge)
	}
	noSecretsLogged(t, e, a)
}

// TestOAuthRefreshRefused: a call whose token is refused (401) and whose
// new token the AS then refuses fails naming the server and the token
// endpoint's reason, settled not started (it never ran), not uncertain.
func TestOAuthRefreshRefused(t *testing.T) {
	a := startAS(t, clientSecret)
	h := startOAuthUpstream(t, a, "challenge")
	e := newEnv(t)
	e.connect(t, oauthServer(h, clientSecret, ""), nil)
	e.mustCall(t, "remote.greet", `{}`)
	a.revokeAll()
	a.mu.Lock()
	a.down = true
	a.mu.Unlock()
	_, ge := e.call(t, "remote.greet", `{}`)
	if ge == nil {
		t.Fatal("the call succeeded with its token revoked and no new one")
	}
	if d := ge.Details["status"]; d != "failed" || !strings.Contains(ge.Error(), "upstream remote: oauth:") || !strings.Contains(ge.Error(), "invalid_client") {
		t.Errorf("the call: %v (status %v), want failed (not started), naming the server and invalid_client", ge, d)
	}
	if c := h.calls.Load(); c != 1 {
		t.Errorf("the tool ran %d times, want 1 (the first call)", c)
	}
	noSecretsLogged(t, e, a)
}

// refuseAll makes the AS's verifier refuse every token, those to come
// included.
func refuseAll(a *testAS) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for t := range a.issued {
		a.revoked[t] = true
	}
	a.revokeNew = true
}

// TestOAuthWrongSecret: a client secret the AS refuses fails Connect with
// an error naming the server and the token endpoint's reason, never the
// secret; no request reached the upstream's MCP server with a token, and
// no tool ran.
func TestOAuthWrongSecret(t *testing.T) {
	a := startAS(t, clientSecret)
	h := startOAuthUpstream(t, a, "challenge")
	e := newEnv(t)
	_, err := e.tryConnect(oauthServer(h, "wrong-secret-3e9a", ""), nil)
	if err == nil {
		t.Fatal("Connect succeeded with a wrong client secret")
	}
	msg := err.Error()
	if !strings.Contains(msg, "upstream remote") || !strings.Contains(msg, "invalid_client") {
		t.Errorf("Connect: %v, want the server named and invalid_client", err)
	}
	if strings.Contains(msg, "wrong-secret-3e9a") || strings.Contains(e.logs.String(), "wrong-secret-3e9a") {
		t.Errorf("the secret is in the error or the log: %v", err)
	}
	if req, refused, n := a.counts(); n != 0 || refused != 1 || req != 1 {
		t.Errorf("token requests %d, refused %d, issued %d: want one request, refused", req, refused, n)
	}
	if h.calls.Load() != 0 {
		t.Errorf("the tool ran %d times", h.calls.Load())
	}
	if len(h.tokensSeen()) != 0 {
		t.Error("a request reached the upstream's server with a token")
	}
}
