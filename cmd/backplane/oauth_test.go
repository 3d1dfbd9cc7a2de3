package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/testkit"
)

const oauthIssuer = "https://issuer.test"

// jwtKey is a signing key generated in the test (package testkit).
type jwtKey struct{ testkit.SigningKey }

func newJWTKey(t *testing.T, kid string, ec bool) jwtKey {
	if ec {
		return jwtKey{testkit.NewECKey(t, kid)}
	}
	return jwtKey{testkit.NewRSAKey(t, kid)}
}

// sign returns a token for sub; edit changes the claims first.
func (k jwtKey) sign(t *testing.T, aud, sub string, edit func(b *jwt.Builder) *jwt.Builder) string {
	t.Helper()
	b := jwt.NewBuilder().Issuer(oauthIssuer).Subject(sub).Audience([]string{aud}).
		IssuedAt(time.Now()).Expiration(time.Now().Add(time.Hour))
	if edit != nil {
		b = edit(b)
	}
	return k.Sign(t, b)
}

func jwksOf(t *testing.T, keys ...jwtKey) []byte {
	t.Helper()
	ks := make([]testkit.SigningKey, len(keys))
	for i, k := range keys {
		ks[i] = k.SigningKey
	}
	return testkit.KeySet(t, ks...)
}

// freePort is a loopback port free a moment ago: the audience names the
// port before serve listens on it.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// connectWith connects the Go SDK client with token ("" for none).
func connectWith(ctx context.Context, base, token string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "oauth-test", Version: "v0"}, nil)
	hc := http.DefaultClient
	if token != "" {
		hc = &http.Client{Transport: tokenTransport(token)}
	}
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc}, sessionEra)
}

func toolNames(t *testing.T, ctx context.Context, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// initialize posts an initialize request with token and returns the status
// and the WWW-Authenticate header.
func initialize(t *testing.T, base, token string) (int, string, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b.String()
}

// TestServeOAuth: `backplane serve` with serve.oauth, the issuer's keys at a
// URL on 127.0.0.1, and the Go SDK client with bearer JWTs.
func TestServeOAuth(t *testing.T) {
	rsaKey, ecKey := newJWTKey(t, "rsa-1", false), newJWTKey(t, "ec-1", true)
	ks := testkit.NewJWKSServer(t, jwksOf(t, rsaKey, ecKey))
	addr := freePort(t)
	base := "http://" + addr
	aud := base + "/mcp"
	g := newGWDir(t, fmt.Sprintf(`policy:
  - caller: alice
    allow: ["*"]
  - caller: carol
    allow: [read]
serve:
  tokens: {"alice-token": alice}
  oauth:
    issuer: %s
    audience: %s
    jwks_url: %s
`, oauthIssuer, aud, ks.URL))
	p := startServe(t, g, "--http", addr)
	if p.base != base {
		t.Fatalf("serve listens at %s, not %s", p.base, base)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The metadata document, without a token, at RFC 9728's path for the
	// resource and at the bare well-known path.
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		code, body := httpGet(t, base+path, "")
		var doc map[string]any
		if code != http.StatusOK || json.Unmarshal([]byte(body), &doc) != nil || doc["resource"] != aud {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if as, _ := doc["authorization_servers"].([]any); len(as) != 1 || as[0] != oauthIssuer {
			t.Errorf("authorization_servers %v", doc["authorization_servers"])
		}
	}

	// Accepted: RSA and EC keys; the caller is the sub (carol sees her
	// one tool, alice all).
	for _, k := range []jwtKey{rsaKey, ecKey} {
		cs, err := connectWith(ctx, base, k.sign(t, aud, "carol", nil))
		if err != nil {
			t.Fatalf("connect with a %s JWT: %v\n%s", k.Alg, err, p.log())
		}
		if got := toolNames(t, ctx, cs); !slices.Equal(got, []string{"read"}) {
			t.Errorf("carol's tools: %v", got)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "nothing-here.txt"}})
		if err != nil || res == nil {
			t.Fatalf("carol's call: %v", err)
		}
		cs.Close()
	}
	cs, err := connectWith(ctx, base, rsaKey.sign(t, aud, "alice", nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(t, ctx, cs); len(got) < 2 {
		t.Errorf("alice's tools by JWT: %v", got)
	}
	cs.Close()
	// The journal records the call as carol's: the caller came from the claim.
	var callers []string
	for _, e := range g.journal(t) {
		callers = append(callers, e["caller"].(string))
	}
	if !slices.Equal(callers, []string{"carol", "carol"}) {
		t.Errorf("journal callers %v, want carol's two reads", callers)
	}

	// Static tokens still work.
	cs, err = connectWith(ctx, base, "alice-token")
	if err != nil {
		t.Fatalf("static token: %v", err)
	}
	cs.Close()

	// Key rotation: a new kid appears at the URL and is accepted at once.
	rotated := newJWTKey(t, "rsa-2", false)
	ks.Set(jwksOf(t, rsaKey, ecKey, rotated))
	before := ks.Hits()
	cs, err = connectWith(ctx, base, rotated.sign(t, aud, "carol", nil))
	if err != nil {
		t.Fatalf("rotated key: %v\n%s", err, p.log())
	}
	cs.Close()
	if ks.Hits() != before+1 {
		t.Errorf("the key set was read %d times for the new kid, want once", ks.Hits()-before)
	}

	// Refused, each with 401 and the challenge naming the metadata.
	stranger := newJWTKey(t, "nobody", false)
	forger := newJWTKey(t, "rsa-1", false) // a known kid, another key
	enc := base64.RawURLEncoding.EncodeToString
	none := enc([]byte(`{"alg":"none","kid":"rsa-1","typ":"JWT"}`)) + "." +
		enc(fmt.Appendf(nil, `{"iss":%q,"sub":"alice","aud":%q,"exp":%d}`, oauthIssuer, aud, time.Now().Add(time.Hour).Unix())) + "."
	wantChallenge := fmt.Sprintf(`resource_metadata="%s/.well-known/oauth-protected-resource/mcp"`, base)
	for _, tc := range []struct{ name, token, why string }{
		{"wrong audience", rsaKey.sign(t, "http://127.0.0.1:1/mcp", "alice", nil), "(aud)"},
		{"wrong issuer", rsaKey.sign(t, aud, "alice", func(b *jwt.Builder) *jwt.Builder { return b.Issuer("https://evil.test") }), "(iss)"},
		{"expired", rsaKey.sign(t, aud, "alice", func(b *jwt.Builder) *jwt.Builder {
			return b.IssuedAt(time.Now().Add(-2 * time.Hour)).Expiration(time.Now().Add(-time.Hour))
		}), "expired"},
		{"not yet valid", rsaKey.sign(t, aud, "alice", func(b *jwt.Builder) *jwt.Builder { return b.NotBefore(time.Now().Add(time.Hour)) }), "(nbf)"},
		{"unknown key", stranger.sign(t, aud, "alice", nil), "not in the issuer's key set"},
		{"bad signature", forger.sign(t, aud, "alice", nil), "bad signature"},
		{"alg none", none, `"none" is not accepted`},
		{"no token", "", "bearer token is required"},
	} {
		code, challenge, body := initialize(t, base, tc.token)
		if code != http.StatusUnauthorized || !strings.Contains(challenge, wantChallenge) || !strings.Contains(body, tc.why) {
			t.Errorf("%s: %d, WWW-Authenticate %q, body %q; want 401 naming the metadata, saying %q", tc.name, code, challenge, body, tc.why)
		}
		if tc.token != "" && !strings.Contains(challenge, `error="invalid_token"`) {
			t.Errorf("%s: challenge %q without invalid_token", tc.name, challenge)
		}
	}
	// The SDK client refuses to go on with one of them, too.
	if cs, err := connectWith(ctx, base, stranger.sign(t, aud, "alice", nil)); err == nil {
		cs.Close()
		t.Error("the Go SDK client connected with an unknown key's token")
	}

	// The official TypeScript SDK client: a JWT accepted, and refused for a
	// wrong audience, an expired token and an unknown key.
	if _, _, err := tsClientAvailable(); err != nil {
		t.Logf("TypeScript client part skipped: %v", err)
		return
	}
	rep, stderr := runTSClient(t, g, `{"calls":[{"name":"read","arguments":{"path":"nothing-here.txt"}}]}`,
		"--http", aud, "--token", ecKey.sign(t, aud, "carol", nil))
	if rep.ConnectError != nil {
		t.Fatalf("TypeScript client with a JWT: %+v\n%s\n%s", rep.ConnectError, stderr, p.log())
	}
	checkCatalog(t, rep, []string{"read"})
	expired := rsaKey.sign(t, aud, "carol", func(b *jwt.Builder) *jwt.Builder {
		return b.IssuedAt(time.Now().Add(-2 * time.Hour)).Expiration(time.Now().Add(-time.Hour))
	})
	for name, tok := range map[string]string{
		"wrong audience": rsaKey.sign(t, "https://elsewhere.example/mcp", "carol", nil),
		"expired":        expired,
		"unknown key":    stranger.sign(t, aud, "carol", nil),
	} {
		rep, _ := runTSClient(t, g, `{"calls":[]}`, "--http", aud, "--token", tok)
		if rep.ConnectError == nil || rep.ConnectError.Code != float64(401) {
			t.Errorf("TypeScript client, %s: %+v, want a connect error with code 401", name, rep.ConnectError)
		}
	}
}

// tsClientAvailable says whether tsClient would run rather than skip.
func tsClientAvailable() (string, string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "", err
	}
	sdk := filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", "@modelcontextprotocol", "sdk", "package.json")
	if _, err := os.Stat(sdk); err != nil {
		return "", "", fmt.Errorf("@modelcontextprotocol/sdk is not installed in testdata/mcp-peers (npm ci there): %w", err)
	}
	return node, sdk, nil
}

// TestServeAnonymousCaller: a request without a token is the anonymous
// caller's on a loopback listener; a bad token is still refused; and a
// listener that is not loopback is refused at load.
func TestServeAnonymousCaller(t *testing.T) {
	g := newGWDir(t, `policy:
  - caller: guest
    allow: [read]
serve:
  anonymous_caller: guest
`)
	p := startServe(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := connectWith(ctx, p.base, "")
	if err != nil {
		t.Fatalf("anonymous connect: %v\n%s", err, p.log())
	}
	if got := toolNames(t, ctx, cs); !slices.Equal(got, []string{"read"}) {
		t.Errorf("guest's tools: %v", got)
	}
	cs.Close()
	if code, _, _ := initialize(t, p.base, "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("a bad token with an anonymous caller: %d, want 401", code)
	}

	remote := newGWDir(t, "serve:\n  http: 0.0.0.0:8787\n  allow_remote: true\n  anonymous_caller: guest\n")
	r := remote.run(t, "", "serve")
	if r.code == 0 || !strings.Contains(r.stderr, "backplane.yaml:4") || !strings.Contains(r.stderr, "not loopback") {
		t.Errorf("anonymous caller on 0.0.0.0: exit %d\n%s", r.code, r.stderr)
	}
	flag := newGWDir(t, "serve:\n  allow_remote: true\n  anonymous_caller: guest\n")
	r = flag.run(t, "", "serve", "--http", "0.0.0.0:0")
	if r.code == 0 || !strings.Contains(r.stderr, "anonymous_caller") || !strings.Contains(r.stderr, "not loopback") {
		t.Errorf("anonymous caller with --http 0.0.0.0:0: exit %d\n%s", r.code, r.stderr)
	}
}
