package oauthtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The end-to-end test: the backplane binary, built from this repository,
// serves two callers (JWTs from their IdP, serve.oauth) in front of two
// Go SDK upstreams that require their tokens: "tracker" in mode
// per_caller behind fosite (the authorization code grant), "docs" in mode
// exchange behind zitadel/oidc (RFC 8693).

// buildBackplane builds cmd/backplane of the enclosing module.
func buildBackplane(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the backplane binary with")
	}
	bin := filepath.Join(t.TempDir(), "backplane")
	build := exec.Command("go", "build", "-o", bin, "./cmd/backplane")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) string {
	t.Helper()
	l := listen(t)
	addr := l.Addr().String()
	l.Close()
	return addr
}

// bearerTransport puts a caller's token on every request to the gateway.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connectGateway opens an MCP client session to the gateway as the
// holder of token; version "" is the SDK's newest (2026-07-28).
func connectGateway(t *testing.T, url, token, version string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, opts)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{token}}},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting to the gateway: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func wantRan(t *testing.T, res *sdk.CallToolResult, account string) {
	t.Helper()
	if res.IsError || !strings.Contains(resultText(res), "you are "+account) {
		t.Fatalf("the call answered %q (error %v), want it run as %s", resultText(res), res.IsError, account)
	}
}

// loginURLOf reads the authorization URL of a refused call: its
// structured error's details, also shown in its text.
func loginURLOf(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	var ge struct {
		Class   string         `json:"class"`
		Details map[string]any `json:"details"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !res.IsError || json.Unmarshal(raw, &ge) != nil {
		t.Fatalf("want a refusal, got %q", resultText(res))
	}
	u, _ := ge.Details["authorization_url"].(string)
	if u == "" || ge.Details["status"] != "failed" || !strings.Contains(resultText(res), u) {
		t.Fatalf("the refusal %s %v carries no authorization URL (or was not settled not run)", ge.Class, ge.Details)
	}
	return u
}

// TestEndToEnd: through the built binary. per_caller: alice (a
// 2026-07-28 client) is refused with the URL, signs in with a scripted
// browser, and her retry runs as her account; bob (a 2025-11-25 client
// declaring URL elicitation) is asked during his call, signs in, and the
// call runs as his; carol (2025-11-25, no elicitation) gets the URL in
// the error, signs in, and her retry runs; each call carries its own caller's token, one
// refreshed after it expires. exchange: each caller's JWT is exchanged
// for its linked account. The audit says which credential each call
// used; no token issued during the run is in the audit log, serve's log,
// /metrics or a tool's environment.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBackplane(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	gw := freePort(t)
	gwURL := "http://" + gw + "/mcp"

	// per_caller: fosite, its tokens living 3s.
	trackerL := listen(t)
	fosite := startCallerAS(t, 3*time.Second, "http://"+trackerL.Addr().String()+"/mcp", "http://"+gw+"/oauth/upstream/callback")
	tracker := startAccountPeer(t, trackerL, fosite.issuer(), fosite.verifyAccount)
	// exchange: zitadel, trusting the callers' IdP.
	idp := newCallerIdP(t)
	z := startZitadelFor(t, idp, gwURL)
	docsL := listen(t)
	docs := startExchangePeer(t, docsL, z)

	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("keys.json", idp.jwks(t))
	write("tracker.secret", []byte(clientSecret+"\n"))
	write("docs.secret", []byte(exchangeClientSecret+"\n"))
	const opToken = "e2e-operator-token-3c1d"
	envOut := filepath.Join(work, "tool-env.txt")
	cfg := fmt.Sprintf(`workspace: work
store: state/backplane.db
log: {file: audit.log}
sandbox: {enable: false}
serve:
  http: %[1]s
  oauth:
    issuer: %[2]s
    audience: %[3]s
    jwks_file: keys.json
operators:
  - name: ops
    token: %[4]s
policy:
  - caller: alice
    allow: ["*"]
  - caller: bob
    allow: ["*"]
  - caller: carol
    allow: ["*"]
tools:
  - name: printenv
    command: [sh, -c, 'cat >/dev/null; env > "$ENV_OUT"; echo "{\"ok\":true}"']
    env: [ENV_OUT]
    input_schema: {type: object}
    safety: {read_only: true, idempotent: true}
servers:
  - name: tracker
    url: %[5]s
    auth:
      oauth: {mode: per_caller, client_id: %[6]s, client_secret_file: tracker.secret, scopes: [tools]}
  - name: docs
    url: %[7]s
    auth:
      oauth: {mode: exchange, client_id: %[6]s, client_secret_file: docs.secret, scopes: [openid], audience: %[8]s}
`, gw, callersIssuer, gwURL, opToken, tracker.url(), clientID, docs.url(), rsClientID)
	cfgPath := write("backplane.yaml", []byte(cfg))

	var serveLog syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "ENV_OUT="+envOut)
	cmd.Stdout, cmd.Stderr = &serveLog, &serveLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waited sync.WaitGroup
	waited.Add(1)
	go func() { cmd.Wait(); waited.Done() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		waited.Wait()
	})
	waitHealthy(t, "http://"+gw+"/healthz", &serveLog)

	jwtAlice := idp.mint(t, "alice", gwURL, time.Hour)
	jwtBob := idp.mint(t, "bob", gwURL, time.Hour)

	// alice, at 2026-07-28: refused with the URL, nothing sent upstream.
	alice := connectGateway(t, gwURL, jwtAlice, "", nil)
	u := loginURLOf(t, callTool(t, alice, "tracker.whoami"))
	if n := len(tracker.calls()); n != 0 {
		t.Fatalf("the upstream saw %d calls before alice signed in", n)
	}
	signIn(t, "acct-alice", fosite.issuer(), u)
	wantRan(t, callTool(t, alice, "tracker.whoami"), "acct-alice")

	// bob, at 2025-11-25 with URL elicitation: asked during the call.
	var asked int
	bob := connectGateway(t, gwURL, jwtBob, "2025-11-25", &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked++
			if req.Params.Mode != "url" {
				return &sdk.ElicitResult{Action: "decline"}, nil
			}
			signIn(t, "acct-bob", fosite.issuer(), req.Params.URL)
			return &sdk.ElicitResult{Action: "accept"}, nil
		},
	})
	wantRan(t, callTool(t, bob, "tracker.whoami"), "acct-bob")
	if asked != 1 {
		t.Errorf("bob was asked %d times, want once", asked)
	}
	// carol, at 2025-11-25 without URL elicitation: the error with the
	// URL; she signs in; her retry runs.
	jwtCarol := idp.mint(t, "carol", gwURL, time.Hour)
	carol := connectGateway(t, gwURL, jwtCarol, "2025-11-25", nil)
	signIn(t, "acct-carol", fosite.issuer(), loginURLOf(t, callTool(t, carol, "tracker.whoami")))
	wantRan(t, callTool(t, carol, "tracker.whoami"), "acct-carol")
	for _, c := range []struct {
		cs      *sdk.ClientSession
		account string
	}{{alice, "acct-alice"}, {bob, "acct-bob"}, {alice, "acct-alice"}} {
		wantRan(t, callTool(t, c.cs, "tracker.whoami"), c.account)
	}
	// Refresh after expiry (fosite's 3s).
	before := tracker.calls()
	time.Sleep(3100 * time.Millisecond)
	wantRan(t, callTool(t, alice, "tracker.whoami"), "acct-alice")
	after := tracker.calls()
	if last := after[len(after)-1]; last.token == before[len(before)-1].token || last.token == before[0].token {
		t.Errorf("the call after expiry carried an expired token")
	}
	byToken := map[string]string{}
	for _, s := range tracker.all() {
		if prev, ok := byToken[s.token]; ok && prev != s.user {
			t.Errorf("one token carried two accounts")
		}
		byToken[s.token] = s.user
		if !s.call && s.user != "" && s.user != "client:"+clientID {
			t.Errorf("a request that is no call of %s carried that caller's token", s.user)
		}
	}
	// exchange.
	wantRan(t, callTool(t, alice, "docs.whoami"), "id1")
	wantRan(t, callTool(t, bob, "docs.whoami"), "id2")
	// A tool's environment.
	if res := callTool(t, alice, "printenv"); res.IsError {
		t.Fatalf("printenv: %s", resultText(res))
	}
	env, err := os.ReadFile(envOut)
	if err != nil || !strings.Contains(string(env), "ENV_OUT=") {
		t.Fatalf("the tool's environment: %v %q", err, env)
	}
	metrics := get(t, "http://"+gw+"/metrics", opToken)
	if !strings.Contains(metrics, "backplane_") {
		t.Fatalf("/metrics: %.200s", metrics)
	}

	cmd.Process.Signal(os.Interrupt)
	waited.Wait()
	audit, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"credential":"oauth_per_caller","credential_server":"tracker","credential_caller":"alice"`,
		`"credential":"oauth_per_caller","credential_server":"tracker","credential_caller":"bob"`,
		`"credential":"oauth_exchange","credential_server":"docs","credential_caller":"alice"`,
	} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("the audit log does not hold %s", want)
		}
	}
	fIssued, _, _ := fosite.snapshot()
	_, zIssued := z.snapshot()
	secrets := append(append(fIssued, zIssued...), jwtAlice, jwtBob, jwtCarol, clientSecret, exchangeClientSecret)
	if len(fIssued) < 4 || len(zIssued) < 2 {
		t.Fatalf("fosite issued %d tokens, zitadel %d: the run did not go as planned", len(fIssued), len(zIssued))
	}
	for name, text := range map[string]string{"audit log": string(audit), "serve's log": serveLog.String(), "/metrics": metrics, "the tool's environment": string(env)} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("a token or a client secret is in %s", name)
			}
		}
	}
}

func waitHealthy(t *testing.T, url string, log *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("serve is not healthy after 60s:\n%s", log.String())
}

func get(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	io.Copy(&b, resp.Body)
	return b.String()
}
