package oauthtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/client/rs"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
)

// Exchange mode is tested against zitadel/oidc's OpenID provider (package
// op), which implements RFC 8693: fosite v0.49.0, the last release, has
// no token exchange (it came with fosite's move into ory/hydra).

const (
	exchangeClientSecret = "zitadel-client-secret-5e1f"
	rsClientID           = "upstream-rs" // the upstream's own client: the audience of exchanged tokens
	rsClientSecret       = "zitadel-rs-secret-77a0"
	callersIssuer        = "http://callers-idp.test" // the gateway's callers' IdP (serve.oauth); never resolved
	callersAudience      = "http://127.0.0.1:8787/mcp"
)

// callerIdP mints the callers' JWT access tokens (what serve.oauth
// verifies) with a key of its own.
type callerIdP struct {
	key *rsa.PrivateKey
	kid string
}

func newCallerIdP(t *testing.T) *callerIdP {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &callerIdP{key: k, kid: "callers-1"}
}

func (c *callerIdP) mint(t *testing.T, sub, aud string, life time.Duration) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: c.key}, (&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", c.kid))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := josejwt.Signed(sig).Claims(josejwt.Claims{
		Issuer: callersIssuer, Subject: sub, Audience: josejwt.Audience{aud},
		IssuedAt: josejwt.NewNumericDate(now), NotBefore: josejwt.NewNumericDate(now.Add(-time.Second)), Expiry: josejwt.NewNumericDate(now.Add(life)),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// jwks is the public key set, as serve.oauth's jwks_file holds it.
func (c *callerIdP) jwks(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &c.key.PublicKey, KeyID: c.kid, Algorithm: "RS256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exchangeStorage is zitadel's example storage with the upstream's
// exchange policy: a caller's token from the callers' IdP (verified with
// its key) is exchanged for the account linked to it, for any audience
// the client asks; accounts are linked by subject.
type exchangeStorage struct {
	*storage.Storage
	idp      *callerIdP
	audience string            // the gateway's: what the callers' tokens are for
	accounts map[string]string // the callers' subjects → the upstream's user ids
}

// VerifyExchangeSubjectToken implements op.TokenExchangeTokensVerifierStorage.
func (s *exchangeStorage) VerifyExchangeSubjectToken(_ context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	if tokenType != oidc.AccessTokenType {
		return "", "", nil, fmt.Errorf("subject token type %s", tokenType)
	}
	parsed, err := josejwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return "", "", nil, err
	}
	var claims josejwt.Claims
	if err := parsed.Claims(&s.idp.key.PublicKey, &claims); err != nil {
		return "", "", nil, err
	}
	if err := claims.ValidateWithLeeway(josejwt.Expected{Issuer: callersIssuer, AnyAudience: josejwt.Audience{s.audience}, Time: time.Now()}, 0); err != nil {
		return "", "", nil, err
	}
	user, ok := s.accounts[claims.Subject]
	if !ok {
		return "", "", nil, errors.New("no account is linked to " + claims.Subject)
	}
	return claims.ID, user, map[string]any{"caller": claims.Subject}, nil
}

// VerifyExchangeActorToken implements op.TokenExchangeTokensVerifierStorage.
func (s *exchangeStorage) VerifyExchangeActorToken(context.Context, string, oidc.TokenType) (string, string, map[string]any, error) {
	return "", "", nil, errors.New("no actor tokens")
}

// ValidateTokenExchangeRequest implements op.TokenExchangeStorage: an
// access token is issued (the example's own policy asks for an
// impersonation right no plain exchange has).
func (s *exchangeStorage) ValidateTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) error {
	if req.GetRequestedTokenType() != oidc.AccessTokenType {
		return errors.New("only access tokens are issued")
	}
	req.SetCurrentScopes(req.GetScopes())
	return nil
}

// zitadelAS is zitadel/oidc's provider on 127.0.0.1; it records every
// token request's grant type and every access token it issues.
type zitadelAS struct {
	addr string
	mu   sync.Mutex
	// grants are the token requests' grant_type, resource and audience.
	grants []string
	issued []string
}

func (z *zitadelAS) issuer() string { return "http://" + z.addr }

func startZitadel(t *testing.T, idp *callerIdP) *zitadelAS {
	return startZitadelFor(t, idp, callersAudience)
}

func startZitadelFor(t *testing.T, idp *callerIdP, audience string) *zitadelAS {
	t.Helper()
	l := listen(t)
	z := &zitadelAS{addr: l.Addr().String()}
	st := &exchangeStorage{
		Storage: storage.NewStorageWithClients(storage.NewUserStore(z.issuer()), map[string]*storage.Client{
			clientID:   storage.WebClient(clientID, exchangeClientSecret),
			rsClientID: storage.WebClient(rsClientID, rsClientSecret),
		}),
		idp: idp, audience: audience, accounts: map[string]string{"alice": "id1", "bob": "id2"},
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey: sha256.Sum256([]byte("zitadel test key")), CodeMethodS256: true,
		AuthMethodPost: true, GrantTypeRefreshToken: true,
	}, st, op.StaticIssuer(z.issuer()), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/oauth/token" {
			provider.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err := r.ParseForm(); err == nil {
			z.mu.Lock()
			z.grants = append(z.grants, strings.Join([]string{r.PostForm.Get("grant_type"), r.PostForm.Get("resource"), r.PostForm.Get("audience")}, " "))
			z.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.Form, r.PostForm = nil, nil
		rec := &recorder{ResponseWriter: w}
		provider.ServeHTTP(rec, r)
		var tr struct {
			AccessToken  string `json:"access_token"`
			RefreshToken string `json:"refresh_token"`
		}
		if json.Unmarshal(rec.body.Bytes(), &tr) == nil && tr.AccessToken != "" {
			z.mu.Lock()
			z.issued = append(z.issued, tr.AccessToken)
			if tr.RefreshToken != "" {
				z.issued = append(z.issued, tr.RefreshToken)
			}
			z.mu.Unlock()
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return z
}

func (z *zitadelAS) snapshot() (grants, issued []string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]string(nil), z.grants...), append([]string(nil), z.issued...)
}

type recorder struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// startExchangePeer is an upstream whose tools/call need a token the
// upstream's own client (upstream-rs) can introspect at zitadel: one
// exchanged for it. Its catalog is open (the gateway's client has no
// client credentials grant at zitadel); its protected resource metadata
// is at the .well-known location.
func startExchangePeer(t *testing.T, l net.Listener, z *zitadelAS) *accountPeer {
	t.Helper()
	var (
		once sync.Once
		res  rs.ResourceServer
		rerr error
	)
	verify := func(ctx context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		once.Do(func() { res, rerr = rs.NewResourceServerClientCredentials(ctx, z.issuer(), rsClientID, rsClientSecret) })
		if rerr != nil {
			return nil, rerr
		}
		ir, err := rs.Introspect[*oidc.IntrospectionResponse](ctx, res, tok)
		if err != nil || !ir.Active {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: ir.Subject, Scopes: ir.Scope, Expiration: ir.Expiration.AsTime()}, nil
	}
	u := &accountPeer{addr: l.Addr().String()}
	s := sdk.NewServer(&sdk.Implementation{Name: "exchange-upstream", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "whoami", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "you are " + req.Extra.TokenInfo.UserID}}}, nil
		})
	mux := http.NewServeMux()
	mux.Handle("GET /.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: u.url(), AuthorizationServers: []string{z.issuer()},
	}))
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Stateless: true})
	protected := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: "http://" + u.addr + "/.well-known/oauth-protected-resource/mcp",
	})(handler)
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		rec := seenCall{token: tok, call: r.Header.Get("Mcp-Method") == "tools/call"}
		if tok != "" {
			if ti, err := verify(r.Context(), tok, r); err == nil {
				rec.user = ti.UserID
			}
		}
		u.mu.Lock()
		u.seen = append(u.seen, rec)
		u.mu.Unlock()
		if rec.call || r.Method == http.MethodGet {
			protected.ServeHTTP(w, r)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return u
}

// TestZitadelExchange: each caller's JWT is exchanged at zitadel (RFC
// 8693, resource the upstream's URL, audience its client) for a token of
// the account linked to it; each call reaches the upstream with its own
// caller's token; the exchanged token is kept until it expires (a second
// call exchanges nothing; one marked expired is exchanged again); a
// caller without a JWT is refused, not run; no token is in the log.
func TestZitadelExchange(t *testing.T) {
	idp := newCallerIdP(t)
	z := startZitadel(t, idp)
	l := listen(t)
	p := startExchangePeer(t, l, z)
	logs := &syncBuffer{}
	g, log := newGatewayFor(t, logs, "alice", "bob", "carol")
	tokens := &upstream.MemoryTokens{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	up, err := upstream.Connect(ctx, upstream.Server{Name: "remote", URL: p.url(), OAuth: &upstream.OAuth{
		Mode: upstream.OAuthModeExchange, ClientID: clientID, ClientSecret: exchangeClientSecret,
		// zitadel's example storage puts the subject in an introspection
		// only for a token with the openid scope.
		Scopes:    []string{"openid"},
		PerCaller: upstream.CallerOAuth{Audience: rsClientID},
	}}, &upstream.Options{Registry: g, Logger: log, Tokens: tokens})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { up.Close() })
	jwts := map[string]string{"alice": idp.mint(t, "alice", callersAudience, time.Hour), "bob": idp.mint(t, "bob", callersAudience, time.Hour)}
	run := func(caller, want string) {
		t.Helper()
		res, err := g.Call(ctx, gateway.CallRequest{Caller: caller, Tool: "remote.whoami", Arguments: json.RawMessage(`{}`), CallerToken: jwts[caller]})
		if err != nil {
			t.Fatalf("%s: %v", caller, err)
		}
		if !strings.Contains(string(res.Result), "you are "+want) {
			t.Fatalf("%s's call ran as %s, want %s", caller, res.Result, want)
		}
	}
	run("alice", "id1")
	run("bob", "id2")
	run("alice", "id1")
	grants, _ := z.snapshot()
	exchanges := 0
	for _, gr := range grants {
		if gr == "urn:ietf:params:oauth:grant-type:token-exchange "+p.url()+" "+rsClientID {
			exchanges++
		}
	}
	if exchanges != 2 || len(grants) != 2 {
		t.Errorf("token requests %q: want one exchange per caller, resource the upstream's URL, audience its client", grants)
	}
	calls := p.calls()
	if len(calls) != 3 || calls[0].token != calls[2].token || calls[0].token == calls[1].token {
		t.Errorf("the calls' tokens: alice's twice, bob's his own: %+v", calls)
	}
	for _, c := range calls {
		if c.token == jwts["alice"] || c.token == jwts["bob"] {
			t.Errorf("a caller's own JWT reached the upstream")
		}
	}
	// Expired: exchanged again.
	key := upstream.TokenKey{Server: "remote", Caller: "alice"}
	st, err := tokens.Token(ctx, key)
	if err != nil || st.Mode != upstream.OAuthModeExchange {
		t.Fatalf("alice's stored token: %+v %v", st, err)
	}
	st.Token.Expiry = time.Now().Add(-time.Second)
	if err := tokens.SaveToken(ctx, key, st); err != nil {
		t.Fatal(err)
	}
	run("alice", "id1")
	if grants, _ := z.snapshot(); len(grants) != 3 {
		t.Errorf("after expiry: %d token requests, want 3", len(grants))
	}
	// No JWT (carol authenticated otherwise) and nothing exchanged for
	// her yet: refused before anything is sent. (A caller's token kept
	// from an earlier exchange stays hers until it expires.)
	before := len(p.calls())
	_, err = g.Call(ctx, gateway.CallRequest{Caller: "carol", Tool: "remote.whoami", Arguments: json.RawMessage(`{}`)})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Details["status"] != "failed" || !strings.Contains(ge.Message, "needs the caller's own JWT") {
		t.Errorf("a call without a JWT: %v, want failed (not run), saying why", err)
	}
	if len(p.calls()) != before {
		t.Errorf("a call without a JWT reached the upstream")
	}
	// A JWT zitadel will not exchange (no account is linked to carol):
	// its refusal named, not run.
	jwts["carol"] = idp.mint(t, "carol", callersAudience, time.Hour)
	_, err = g.Call(ctx, gateway.CallRequest{Caller: "carol", Tool: "remote.whoami", Arguments: json.RawMessage(`{}`), CallerToken: jwts["carol"]})
	if !errors.As(err, &ge) || ge.Details["status"] != "failed" || !strings.Contains(ge.Message, "token exchange") || !strings.Contains(ge.Message, "invalid_request") {
		t.Errorf("a JWT the authorization server refuses to exchange: %v, want failed naming its refusal", err)
	}
	if len(p.calls()) != before {
		t.Errorf("a refused exchange's call reached the upstream")
	}
	out := logs.String()
	if !strings.Contains(out, `"credential":"oauth_exchange"`) || !strings.Contains(out, `"credential_caller":"bob"`) {
		t.Errorf("the audit does not record the exchange credential")
	}
	_, issued := z.snapshot()
	for _, tok := range append(append(issued, jwts["alice"], jwts["bob"], jwts["carol"]), exchangeClientSecret) {
		if strings.Contains(out, tok) {
			t.Errorf("a token or the client secret is in the log or the audit")
		}
	}
}
