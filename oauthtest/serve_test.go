package oauthtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/config"
)

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// TestServeLoginNoTokenLeaks: through assemble as serve runs it: `servers
// login` (LoginServer, against fosite, with the scripted browser) saves
// the consent sealed in the SQLite store; serve's upstream uses it, and
// refreshes it once it expires; the Connections page and its API list the
// connection; and no access or refresh token fosite issued during the run
// is in the audit log, the operational log, serve's log, /metrics or any
// console page.
func TestServeLoginNoTokenLeaks(t *testing.T) {
	l := listen(t)
	a := startCodeAS(t, 2*time.Second, "issuer")
	u := startUpstream(t, l, a.as)

	dir := t.TempDir()
	k := make([]byte, 32)
	rand.Read(k)
	if err := os.WriteFile(filepath.Join(dir, "secrets.key"), []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, config.DefaultFile)
	yaml := "store: state\n" +
		"secrets: {key_file: secrets.key}\n" +
		"policy:\n  - caller: alice\n    allow: [\"*\"]\n" +
		"operators:\n  - name: ops\n    token: ops-token-5e1a\n" +
		"serve:\n  http: 127.0.0.1:0\n  tokens: {\"alice-token-77c2\": alice}\n" +
		"servers:\n  - name: remote\n    url: " + u.url() + "\n" +
		"    auth: {oauth: {mode: service, grant: authorization_code, client_id: " + publicClient + ", scopes: [tools, offline_access]}}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	auditPath, opPath, servePath := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "op.log"), filepath.Join(dir, "serve.log")
	opFile, _ := os.Create(opPath)
	defer opFile.Close()
	serveFile, _ := os.Create(servePath)
	defer serveFile.Close()
	opLog := slog.New(slog.NewTextHandler(opFile, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// backplane servers login remote.
	rt, err := assemble.Open(ctx, cfg, &assemble.Options{NoUpstreams: true, AuditLog: auditPath, Log: opLog, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	browsed := make(chan error, 1)
	conn, err := rt.LoginServer(lctx, "remote", "ops", func(u string) { go browse(t, u, browsed) })
	cancel()
	if err != nil {
		t.Fatalf("LoginServer: %v", err)
	}
	if err := <-browsed; err != nil {
		t.Fatalf("the browser: %v", err)
	}
	if conn.Server != "remote" || conn.Mode != "service" || conn.Expiry.IsZero() {
		t.Errorf("the connection: %+v", conn)
	}
	rt.Close()

	// backplane serve.
	s, err := assemble.OpenServer(ctx, cfg, &assemble.ServeOptions{
		Open:   &assemble.Options{AuditLog: auditPath, Log: opLog, Stderr: io.Discard},
		Logger: slog.New(slog.NewTextHandler(serveFile, nil)), NoControlSocket: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.Run(rctx)

	c := sdk.NewClient(&sdk.Implementation{Name: "leak-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: s.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{"alice-token-77c2", http.DefaultTransport}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	callGreet := func() {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "remote.greet", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("remote.greet: %v %+v", err, res)
		}
	}
	callGreet()
	time.Sleep(2100 * time.Millisecond)
	callGreet()
	issued, _, _ := a.snapshot()
	seen := u.tokensSeen()
	if len(issued) != 2 || len(seen) != 2 || seen[0] != issued[0] || seen[1] != issued[1] {
		t.Fatalf("fosite issued %d tokens, the tool saw %d calls: want the login's token, then the refreshed one", len(issued), len(seen))
	}

	get := func(p string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL()+p, nil)
		req.Header.Set("Authorization", "Bearer ops-token-5e1a")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", p, res.StatusCode)
		}
		return string(b)
	}
	pages := map[string]string{}
	for _, p := range []string{"/metrics", "/ui/overview", "/ui/connections", "/ui/journal", "/ui/tools", "/ui/upstreams", "/ui/health",
		"/ui/budgets", "/ui/sessions", "/ui/approvals", "/ui/api/connections", "/ui/api/journal", "/ui/api/upstreams", "/ui/api/health"} {
		pages[p] = get(p)
	}
	// The Connect page (a login started from the console, never finished).
	creq, _ := http.NewRequest("POST", s.URL()+"/ui/connections/connect", strings.NewReader("server=remote"))
	creq.Header.Set("Authorization", "Bearer ops-token-5e1a")
	creq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cres, err := http.DefaultClient.Do(creq); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(cres.Body)
		cres.Body.Close()
		if cres.StatusCode != http.StatusOK || !strings.Contains(string(b), a.issuer()+"/authorize?") {
			t.Errorf("the Connect page: %d", cres.StatusCode)
		}
		pages["POST /ui/connections/connect"] = string(b)
	}
	var api struct {
		Connections []struct {
			Server, Caller, Mode string
			Scopes               []string
			Expiry               time.Time
		}
	}
	if err := json.Unmarshal([]byte(pages["/ui/api/connections"]), &api); err != nil || len(api.Connections) != 1 {
		t.Fatalf("the connections API: %v %s", err, pages["/ui/api/connections"])
	}
	if c := api.Connections[0]; c.Server != "remote" || c.Caller != "" || c.Mode != "service" || len(c.Scopes) != 2 || c.Expiry.IsZero() {
		t.Errorf("the connection listed: %+v", c)
	}
	if c := pages["/ui/connections"]; !strings.Contains(c, "remote") || !strings.Contains(c, "Revoke") {
		t.Errorf("the Connections page lacks the connection")
	}
	stop()
	s.Close()

	a.mu.Lock()
	secretsIssued := append(append([]string(nil), a.issued...), a.refreshed...)
	a.mu.Unlock()
	if len(secretsIssued) < 4 {
		t.Fatalf("fosite issued %d tokens in all, want 2 access and 2 refresh tokens", len(secretsIssued))
	}
	for _, f := range []string{auditPath, opPath, servePath} {
		b, _ := os.ReadFile(f)
		pages[f] = string(b)
	}
	audit := pages[auditPath]
	if !strings.Contains(audit, `"credential":"oauth_service"`) || !strings.Contains(audit, `"step":"login"`) {
		t.Errorf("the audit lacks the credential of the calls or the login:\n%s", audit)
	}
	for where, text := range pages {
		for _, tok := range secretsIssued {
			if strings.Contains(text, tok) {
				t.Errorf("a token fosite issued is in %s", where)
			}
		}
	}
}
