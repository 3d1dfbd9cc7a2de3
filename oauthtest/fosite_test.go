package oauthtest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/storage"
	"golang.org/x/crypto/bcrypt"
)

const (
	clientID     = "backplane"
	clientSecret = "fosite-client-secret-81d2"
)

// as is fosite on 127.0.0.1: the client credentials grant, HMAC access
// tokens, introspection for the upstream's verifier. Its metadata (RFC
// 8414) is written here: fosite serves no metadata endpoint.
type as struct {
	addr     string
	provider fosite.OAuth2Provider
	store    *storage.MemoryStore

	mu        sync.Mutex
	issued    []string // every access token fosite issued
	refreshed []string // every refresh token fosite issued
	resources []string // the resource parameter of each token request
	refused   int
}

func startAS(t *testing.T, life time.Duration, audience string) *as {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(clientSecret), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	a := &as{store: storage.NewMemoryStore()}
	a.store.Clients[clientID] = &fosite.DefaultClient{
		ID: clientID, Secret: hash, GrantTypes: []string{"client_credentials"},
		Scopes: []string{"tools"}, Audience: []string{audience},
	}
	cfg := &fosite.Config{AccessTokenLifespan: life, GlobalSecret: []byte("a-global-secret-of-32-bytes-long")}
	a.provider = compose.Compose(cfg, a.store, compose.NewOAuth2HMACStrategy(cfg),
		compose.OAuth2ClientCredentialsGrantFactory, compose.OAuth2TokenIntrospectionFactory)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a.addr = l.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": a.issuer(), "token_endpoint": a.issuer() + "/token",
			"grant_types_supported":                 []string{"client_credentials"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
			"code_challenge_methods_supported":      []string{"S256"}, // the SDK's metadata check wants it
		})
	})
	mux.HandleFunc("POST /token", a.token)
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *as) issuer() string { return "http://" + a.addr }

func (a *as) token(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if err := r.ParseForm(); err == nil {
		a.mu.Lock()
		a.resources = append(a.resources, r.PostForm.Get("resource"))
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
	for _, s := range ar.GetRequestedScopes() {
		ar.GrantScope(s)
	}
	resp, err := a.provider.NewAccessResponse(ctx, ar)
	if err != nil {
		a.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	a.mu.Lock()
	a.issued = append(a.issued, resp.GetAccessToken())
	if rt, ok := resp.GetExtra("refresh_token").(string); ok && rt != "" {
		a.refreshed = append(a.refreshed, rt)
	}
	a.mu.Unlock()
	a.provider.WriteAccessResponse(ctx, w, ar, resp)
}

// verify is the upstream's TokenVerifier: fosite's introspection.
func (a *as) verify(ctx context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
	_, ar, err := a.provider.IntrospectToken(ctx, tok, fosite.AccessToken, &fosite.DefaultSession{})
	if err != nil {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{Scopes: ar.GetGrantedScopes(), Expiration: ar.GetSession().GetExpiresAt(fosite.AccessToken), UserID: ar.GetClient().GetID()}, nil
}

func (a *as) snapshot() (issued, resources []string, refused int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.issued...), append([]string(nil), a.resources...), a.refused
}

// peer is a Go SDK server over streamable HTTP on 127.0.0.1 behind
// auth.RequireBearerToken with fosite's introspection, its protected
// resource metadata named by its 401's resource_metadata.
type peer struct {
	addr string
	mu   sync.Mutex
	seen []string // the token each tool call ran with
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func startUpstream(t *testing.T, l net.Listener, a *as) *peer {
	t.Helper()
	u := &peer{addr: l.Addr().String()}
	s := sdk.NewServer(&sdk.Implementation{Name: "fosite-upstream", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "greet", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			u.mu.Lock()
			u.seen = append(u.seen, strings.TrimPrefix(req.Extra.Header.Get("Authorization"), "Bearer "))
			u.mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hello"}}}, nil
		})
	mux := http.NewServeMux()
	mux.Handle("GET /meta/prm", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: u.url(), AuthorizationServers: []string{a.issuer()}, ScopesSupported: []string{"tools"},
	}))
	mux.Handle("/mcp", auth.RequireBearerToken(a.verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: "http://" + u.addr + "/meta/prm", Scopes: []string{"tools"},
	})(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return u
}

func (u *peer) url() string { return "http://" + u.addr + "/mcp" }

func (u *peer) tokensSeen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

// syncBuffer collects the operational log and the audit.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newGateway is a gateway whose audit and whose upstream's operational
// log both go to logs; alice may call everything.
func newGateway(t *testing.T, logs *syncBuffer) (*gateway.Gateway, *slog.Logger) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return gateway.New(&gateway.Options{Store: st, Policy: rules, Logger: log, Approvals: gateway.ApprovalOptions{}, Timeout: 20 * time.Second}), log
}

func connect(t *testing.T, g *gateway.Gateway, log *slog.Logger, u *peer, secret string) (*upstream.Upstream, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	up, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: u.url(), OAuth: &upstream.OAuth{
		ClientID: clientID, ClientSecret: secret, Scopes: []string{"tools"},
	}}, &upstream.Options{Registry: g, Logger: log})
	if err == nil {
		t.Cleanup(func() { up.Close() })
	}
	return up, err
}

func call(t *testing.T, g *gateway.Gateway) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "remote.greet", Arguments: json.RawMessage(`{}`)}); err != nil {
		t.Fatalf("remote.greet: %v", err)
	}
}

// TestFositeServiceMode: discovery from the upstream's 401, a token from
// fosite's client credentials grant requested for the upstream's URL, the
// call run with it, a new one after the first expires, and no token in the
// log or the audit.
func TestFositeServiceMode(t *testing.T) {
	l := listen(t)
	a := startAS(t, 2*time.Second, "http://"+l.Addr().String()+"/mcp")
	u := startUpstream(t, l, a)
	logs := &syncBuffer{}
	g, log := newGateway(t, logs)
	if _, err := connect(t, g, log, u, clientSecret); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	call(t, g)
	issued, resources, _ := a.snapshot()
	if len(issued) != 1 {
		t.Fatalf("fosite issued %d tokens, want 1", len(issued))
	}
	if seen := u.tokensSeen(); len(seen) != 1 || seen[0] != issued[0] {
		t.Errorf("the tool ran with %q, want fosite's token", seen)
	}
	if len(resources) != 1 || resources[0] != u.url() {
		t.Errorf("token requests' resource %q, want [%s]", resources, u.url())
	}
	// fosite's tokens live 2s: the next call after that carries a new one.
	time.Sleep(2100 * time.Millisecond)
	call(t, g)
	issued, _, _ = a.snapshot()
	seen := u.tokensSeen()
	if len(issued) != 2 || len(seen) != 2 || seen[1] != issued[1] {
		t.Errorf("after expiry: %d tokens issued, the tool saw %d calls: want a second token on the second call", len(issued), len(seen))
	}
	out := logs.String()
	if !strings.Contains(out, `"credential":"oauth_service"`) {
		t.Errorf("the audit does not record the credential mode:\n%s", out)
	}
	for _, tok := range append(issued, clientSecret) {
		if strings.Contains(out, tok) {
			t.Errorf("a token or the client secret is in the log or the audit: %s", tok)
		}
	}
}

// TestFositeWrongSecret: fosite refuses the secret; Connect fails naming
// the server and fosite's invalid_client, never quoting the secret, and no
// tool runs.
func TestFositeWrongSecret(t *testing.T) {
	l := listen(t)
	a := startAS(t, time.Hour, "http://"+l.Addr().String()+"/mcp")
	u := startUpstream(t, l, a)
	logs := &syncBuffer{}
	g, log := newGateway(t, logs)
	_, err := connect(t, g, log, u, "wrong-secret-0b7c")
	// The SDK's transport keeps only the message of the RoundTripper's
	// error, not its type: the message must say it all.
	if err == nil || !strings.Contains(err.Error(), "upstream remote: oauth:") || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("Connect: %v, want the server named and invalid_client", err)
	}
	if strings.Contains(err.Error(), "wrong-secret-0b7c") || strings.Contains(logs.String(), "wrong-secret-0b7c") {
		t.Errorf("the secret is in the error or the log: %v", err)
	}
	if issued, _, refused := a.snapshot(); len(issued) != 0 || refused != 1 {
		t.Errorf("fosite issued %d tokens and refused %d requests, want 0 and 1", len(issued), refused)
	}
	if seen := u.tokensSeen(); len(seen) != 0 {
		t.Errorf("the tool ran %d times", len(seen))
	}
}
