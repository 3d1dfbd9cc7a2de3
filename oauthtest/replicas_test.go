package oauthtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ory/fosite"

	"github.com/agentbackplane/backplane/internal/testkit"
)

// newPGSchema returns the store URL of a schema of its own (the store
// creates it) and a connection into it; the schema is dropped, with
// everything in it, when the test ends. Called first, its cleanup runs
// last: after every serve using the schema is gone.
func newPGSchema(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	storeURL, schema := testkit.PostgresSchema(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Skipf("PostgreSQL at %s: %v", testkit.PostgresURLEnv, err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	return storeURL, c
}

// serveReplica is one `backplane serve` process of a replica test.
type serveReplica struct {
	addr, dir string
	log       syncBuffer
	stop      func() // stops it and waits for it to exit (once)
}

const perCallerReplicaConfig = `workspace: work
store: '%[1]s'
secrets: {key_file: secrets.key}
log: {file: audit.log}
sandbox: {enable: false}
serve:
  http: %[2]s
  tokens: {"alice-replica-token-4b1e": alice}
policy:
  - caller: alice
    allow: ["*"]
servers:
  - name: tracker
    url: %[3]s
    auth:
      oauth: {mode: per_caller, client_id: %[4]s, client_secret_file: tracker.secret, scopes: [tools]}
`

// startServeReplica starts bin serve in a folder of its own, on addr,
// over the store at storeURL, sealing with key; it stops when the test
// ends.
func startServeReplica(t *testing.T, bin, storeURL, addr, upstreamURL string, key []byte) *serveReplica {
	t.Helper()
	r := &serveReplica{addr: addr, dir: t.TempDir()}
	for name, data := range map[string][]byte{
		"secrets.key":    []byte(base64.StdEncoding.EncodeToString(key)),
		"tracker.secret": []byte(clientSecret + "\n"),
		"backplane.yaml": fmt.Appendf(nil, perCallerReplicaConfig, storeURL, addr, upstreamURL, clientID),
	} {
		if err := os.WriteFile(filepath.Join(r.dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(r.dir, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", filepath.Join(r.dir, "backplane.yaml"))
	cmd.Stdout, cmd.Stderr = &r.log, &r.log
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	var waited sync.WaitGroup
	waited.Add(1)
	go func() { cmd.Wait(); waited.Done() }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			waited.Wait()
			cancel()
		})
	}
	t.Cleanup(r.stop)
	waitHealthy(t, "http://"+addr+"/healthz", &r.log)
	return r
}

func (r *serveReplica) callback() string { return "http://" + r.addr + "/oauth/upstream/callback" }

// signInVia follows authURL as account at the authorization server, and
// sends its redirect to the gateway's callback at replica (as a load
// balancer in front of the replicas would route it), whatever replica the
// redirect names. It returns the callback URL it used, and wants the page
// to say connected.
func signInVia(t *testing.T, account, issuer, authURL string, replica *serveReplica) string {
	t.Helper()
	b := browser(t, account, issuer)
	b.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := b.Get(authURL)
	if err != nil {
		t.Fatalf("following the authorization URL: %v", err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil || !strings.HasSuffix(loc.Path, "/oauth/upstream/callback") {
		t.Fatalf("the authorization server answered %s, not a redirect to a callback (%v)", resp.Status, err)
	}
	loc.Host = replica.addr
	status, body := getPage(t, loc.String())
	if status != http.StatusOK || !strings.Contains(body, "Connected") {
		t.Fatalf("the callback at %s answered %d: %s", replica.addr, status, body)
	}
	return loc.String()
}

func getPage(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPerCallerLoginAcrossReplicas: two `backplane serve` replicas on one
// PostgreSQL schema, sealing with one key. alice's per_caller login begun
// at replica A (the refusal with the URL) is kept in the store, sealed:
// its row holds neither the state nor the code; the authorization
// server's redirect reaches replica B's callback, which completes it; the
// same redirect replayed at either replica is refused; alice's retry on A
// runs with her token. Then the other way round, with a scope step-up: a
// call on B of the tool that demands admin gives a URL asking for tools
// and admin, completed at A, and the retry on B runs with the new token.
// No token fosite issued, nor a state or a code, is in either replica's
// audit log or serve's log, nor in clear in the store's rows.
func TestPerCallerLoginAcrossReplicas(t *testing.T) {
	storeURL, db := newPGSchema(t)
	bin := buildBackplane(t)
	addrA, addrB := freePort(t), freePort(t)
	trackerL := listen(t)
	as := startCallerAS(t, time.Hour, "http://"+trackerL.Addr().String()+"/mcp", "http://"+addrA+"/oauth/upstream/callback")
	// Each replica's logins name its own callback (no serve.public_url
	// here): both are registered.
	as.store.Clients[clientID].(*fosite.DefaultClient).RedirectURIs = []string{
		"http://" + addrA + "/oauth/upstream/callback", "http://" + addrB + "/oauth/upstream/callback"}
	tracker := startAccountPeer(t, trackerL, as.issuer(), as.verifyAccount)
	key := make([]byte, 32)
	rand.Read(key)
	a := startServeReplica(t, bin, storeURL, addrA, tracker.url(), key)
	b := startServeReplica(t, bin, storeURL, addrB, tracker.url(), key)
	ctx := context.Background()

	onA := connectGateway(t, "http://"+addrA+"/mcp", "alice-replica-token-4b1e", "", nil)
	authURL := loginURLOf(t, callTool(t, onA, "tracker.whoami"))
	au, _ := url.Parse(authURL)
	state := au.Query().Get("state")
	if au.Query().Get("redirect_uri") != a.callback() {
		t.Fatalf("the login begun at A redirects to %s", au.Query().Get("redirect_uri"))
	}
	var rowKey, caller, server string
	var sealed []byte
	if err := db.QueryRow(ctx, `SELECT key, caller, server, sealed FROM pending_logins`).Scan(&rowKey, &caller, &server, &sealed); err != nil {
		t.Fatalf("the login in progress is not in the store: %v", err)
	}
	if caller != "alice" || server != "tracker" || rowKey == state || bytes.Contains(sealed, []byte(state)) || strings.Contains(rowKey, state) {
		t.Fatalf("the pending row (%s, %s) holds the state in clear, or names the wrong login", caller, server)
	}

	cb := signInVia(t, "acct-alice", as.issuer(), authURL, b)
	code, _ := url.Parse(cb)
	// serve's output reaches the buffer through a pipe: a moment later.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(b.log.String(), "upstream account connected"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("replica B's log does not say it connected the account")
			break
		}
	}
	for _, r := range []*serveReplica{a, b} {
		replay := strings.Replace(cb, b.addr, r.addr, 1)
		if status, body := getPage(t, replay); status != http.StatusBadRequest || !strings.Contains(body, "expired or was already used") {
			t.Errorf("the redirect replayed at %s: %d %s, want 400 saying it was used", r.addr, status, body)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pending_logins`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d logins left in progress after the callback (%v), want 0", n, err)
	}
	wantRan(t, callTool(t, onA, "tracker.whoami"), "acct-alice")
	if runs := tracker.runs(); len(runs) != 1 || runs[0].user != "acct-alice" {
		t.Fatalf("the upstream ran %d calls, want alice's retry", len(runs))
	}

	// The step-up, begun at B, completed at A.
	onB := connectGateway(t, "http://"+addrB+"/mcp", "alice-replica-token-4b1e", "", nil)
	wantRan(t, callTool(t, onB, "tracker.whoami"), "acct-alice") // B uses the token A's login saved
	upURL := loginURLOf(t, callTool(t, onB, "tracker.admin_note"))
	uu, _ := url.Parse(upURL)
	if got := uu.Query().Get("scope"); got != "tools admin" || uu.Query().Get("redirect_uri") != b.callback() {
		t.Fatalf("the step-up at B asks for scope %q, redirect %s", got, uu.Query().Get("redirect_uri"))
	}
	cb2 := signInVia(t, "acct-alice", as.issuer(), upURL, a)
	res := callTool(t, onB, "tracker.admin_note")
	if res.IsError || !strings.Contains(resultText(res), "noted by acct-alice with tools admin") {
		t.Fatalf("admin_note on B after the step-up at A: %q", resultText(res))
	}

	// Nothing secret in the logs, nor in clear in the store.
	as.mu.Lock()
	secrets := append([]string(nil), as.issued...)
	as.mu.Unlock()
	if len(secrets) < 4 {
		t.Fatalf("fosite issued %d tokens, want 2 access and 2 refresh tokens", len(secrets))
	}
	c2, _ := url.Parse(cb2)
	secrets = append(secrets, clientSecret, state, code.Query().Get("code"), uu.Query().Get("state"), c2.Query().Get("code"))
	texts := map[string]string{}
	for _, r := range []*serveReplica{a, b} {
		r.stop() // its logs complete
		audit, err := os.ReadFile(filepath.Join(r.dir, "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		texts[r.addr+" audit log"] = string(audit)
		texts[r.addr+" serve's log"] = r.log.String()
	}
	rows, err := db.Query(ctx, `SELECT sealed FROM upstream_credentials UNION ALL SELECT sealed FROM pending_logins`)
	if err != nil {
		t.Fatal(err)
	}
	var stored bytes.Buffer
	for rows.Next() {
		var s []byte
		rows.Scan(&s)
		stored.Write(s)
	}
	rows.Close()
	texts["the store's sealed columns"] = stored.String()
	for where, text := range texts {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("a token, the client secret, a state or a code is in %s", where)
			}
		}
	}
	if !strings.Contains(texts[a.addr+" audit log"], `"credential_caller":"alice"`) || !strings.Contains(texts[b.addr+" audit log"], `"credential":"oauth_per_caller"`) {
		t.Errorf("the audit logs do not say which credential the calls used")
	}
}
