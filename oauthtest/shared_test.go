package oauthtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/testkit"
	"github.com/agentbackplane/backplane/store/postgres"
)

// replicaStore is the URL of a fresh PostgreSQL schema, migrated, dropped
// when the test ends; the test skips without BACKPLANE_TEST_POSTGRES_URL.
func replicaStore(t *testing.T) string {
	t.Helper()
	storeURL, _ := testkit.PostgresSchema(t)
	ctx := context.Background()
	// Migrated once here, so that the replicas' concurrent starts only
	// find the schema.
	st, err := postgres.Open(ctx, storeURL, &postgres.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	return storeURL
}

// replicaConfig writes a configuration whose store is storeURL, with a
// secrets key, alice allowed everything, and one server remote at
// upstreamURL authenticated by oauth (the YAML of auth.oauth's value).
func replicaConfig(t *testing.T, storeURL, upstreamURL, oauth string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	k := make([]byte, 32)
	rand.Read(k)
	if err := os.WriteFile(filepath.Join(dir, "secrets.key"), []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.secret"), []byte(clientSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, config.DefaultFile)
	yaml := "store: '" + storeURL + "'\n" +
		"secrets: {key_file: secrets.key}\n" +
		"policy:\n  - caller: alice\n    allow: [\"*\"]\n" +
		"operators:\n  - name: ops\n    token: ops-token-5e1a\n" +
		"serve:\n  http: 127.0.0.1:0\n  tokens: {\"alice-token-77c2\": alice}\n" +
		"servers:\n  - name: remote\n    url: " + upstreamURL + "\n    required: true\n" +
		"    auth: {oauth: " + oauth + "}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// openReplicas assembles n gateways from cfg at once, each with its own
// connections to the store (as n processes would have), closed at the
// end. Their logs go to logs.
func openReplicas(t *testing.T, cfg *config.Config, n int, logs *syncBuffer) []*assemble.Runtime {
	t.Helper()
	rts := make([]*assemble.Runtime, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			rts[i], errs[i] = assemble.Open(ctx, cfg, &assemble.Options{Log: log, AuditLog: filepath.Join(t.TempDir(), "audit.jsonl"), Stderr: io.Discard})
		})
	}
	wg.Wait()
	for i, rt := range rts {
		if rt != nil {
			t.Cleanup(func() { rt.Close() })
		}
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
	}
	return rts
}

// callAll makes perReplica concurrent calls of remote.greet on every
// replica at once; each must run.
func callAll(t *testing.T, rts []*assemble.Runtime, perReplica int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(rts)*perReplica)
	for _, rt := range rts {
		for range perReplica {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := rt.Gateway.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "remote.greet", Arguments: json.RawMessage(`{}`)})
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("remote.greet: %v", err)
		}
	}
}

// forget makes fosite forget an access token (its session), as a server
// that revoked it would: the next request carrying it is answered 401.
func forget(t *testing.T, a *as, tok string) {
	t.Helper()
	if err := a.store.DeleteAccessTokenSession(context.Background(), tok[strings.LastIndex(tok, ".")+1:]); err != nil {
		t.Fatalf("forgetting the token at fosite: %v", err)
	}
}

// allSeen checks that the tool's runs from index from on all carried tok.
func allSeen(t *testing.T, u *peer, from int, tok, when string) int {
	t.Helper()
	seen := u.tokensSeen()
	if len(seen) <= from {
		t.Fatalf("%s: the tool ran %d times, want more than %d", when, len(seen), from)
	}
	for i, s := range seen[from:] {
		if s != tok {
			t.Errorf("%s: run %d carried another token than the one fosite issued last", when, from+i)
		}
	}
	return len(seen)
}

// TestSharedServiceTokenReplicas: three gateways on one PostgreSQL store,
// the client credentials grant against fosite. Started together and then
// called together (three calls each), they make one token request in
// all; fosite forgets that token and the next calls, all refused with a
// 401, make one more; once that one expires, one more again. Every call
// runs, with the token fosite issued last; no token is in the logs.
func TestSharedServiceTokenReplicas(t *testing.T) {
	storeURL := replicaStore(t)
	l := listen(t)
	const life = 10 * time.Second
	a := startAS(t, life, "http://"+l.Addr().String()+"/mcp")
	u := startUpstream(t, l, a)
	cfg := replicaConfig(t, storeURL, u.url(),
		"{mode: service, client_id: "+clientID+", client_secret_file: client.secret, scopes: [tools]}")
	logs := &syncBuffer{}

	rts := openReplicas(t, cfg, 3, logs)
	callAll(t, rts, 3)
	issued, resources, refused := a.snapshot()
	if len(resources) != 1 || len(issued) != 1 || refused != 0 {
		t.Fatalf("three replicas started and called together: %d token requests (%d issued, %d refused), want 1", len(resources), len(issued), refused)
	}
	n := allSeen(t, u, 0, issued[0], "first calls")

	// Refused with a 401 on every replica: one new token for all.
	forget(t, a, issued[0])
	callAll(t, rts, 3)
	issued, resources, _ = a.snapshot()
	if len(resources) != 2 || len(issued) != 2 {
		t.Fatalf("after a 401 on every replica: %d token requests in all, want 2", len(resources))
	}
	n = allSeen(t, u, n, issued[1], "after the 401")
	if row, err := rts[0].Store.GetCredential(context.Background(), "remote", ""); err != nil || row.Mode != "service" || row.Expiry.IsZero() {
		t.Fatalf("the store's row: %+v %v", row, err)
	}

	// Expired: one refresh (a new grant) for all.
	time.Sleep(life + 200*time.Millisecond)
	callAll(t, rts, 3)
	issued, resources, _ = a.snapshot()
	if len(resources) != 3 || len(issued) != 3 {
		t.Fatalf("after the token expired: %d token requests in all, want 3", len(resources))
	}
	allSeen(t, u, n, issued[2], "after expiry")

	out := logs.String()
	for _, tok := range append(issued, clientSecret) {
		if strings.Contains(out, tok) {
			t.Errorf("a token or the client secret is in a replica's log")
		}
	}
}

// TestSharedLoginReplicas: `servers login` saves the consent in the
// PostgreSQL store; three gateways started together use it (no token
// request), refresh it once between them when fosite forgets the access
// token (a 401 on each), and once more when the new one expires: one
// refresh_token grant each time, the rotated refresh token saved for all.
func TestSharedLoginReplicas(t *testing.T) {
	storeURL := replicaStore(t)
	l := listen(t)
	const life = 10 * time.Second
	a := startCodeAS(t, life, "issuer")
	u := startUpstream(t, l, a.as)
	cfg := replicaConfig(t, storeURL, u.url(),
		"{mode: service, grant: authorization_code, client_id: "+publicClient+", scopes: [tools, offline_access]}")
	logs := &syncBuffer{}
	ctx := context.Background()

	// backplane servers login remote.
	lrt, err := assemble.Open(ctx, cfg, &assemble.Options{NoUpstreams: true, Log: slog.New(slog.NewJSONHandler(logs, nil)),
		AuditLog: filepath.Join(t.TempDir(), "audit.jsonl"), Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	browsed := make(chan error, 1)
	_, err = lrt.LoginServer(lctx, "remote", "ops", func(u string) { go browse(t, u, browsed) })
	cancel()
	lrt.Close()
	if err != nil {
		t.Fatalf("LoginServer: %v", err)
	}
	if err := <-browsed; err != nil {
		t.Fatalf("the browser: %v", err)
	}
	grants := func() []string {
		a.amu.Lock()
		defer a.amu.Unlock()
		return append([]string(nil), a.grants...)
	}

	rts := openReplicas(t, cfg, 3, logs)
	callAll(t, rts, 3)
	issued, _, _ := a.snapshot()
	if g := grants(); len(g) != 1 || len(issued) != 1 {
		t.Fatalf("three replicas on the login's token: token requests %q, want the login's code exchange only", g)
	}
	n := allSeen(t, u, 0, issued[0], "first calls")

	forget(t, a.as, issued[0])
	callAll(t, rts, 3)
	issued, _, _ = a.snapshot()
	if g := grants(); len(g) != 2 || g[1] != "refresh_token" || len(issued) != 2 {
		t.Fatalf("after a 401 on every replica: token requests %q, want one refresh", g)
	}
	n = allSeen(t, u, n, issued[1], "after the 401")

	time.Sleep(life + 200*time.Millisecond)
	callAll(t, rts, 3)
	issued, _, refused := a.snapshot()
	if g := grants(); len(g) != 3 || g[2] != "refresh_token" || len(issued) != 3 || refused != 0 {
		t.Fatalf("after the token expired: token requests %q (%d refused), want one more refresh", g, refused)
	}
	allSeen(t, u, n, issued[2], "after expiry")

	tokens := rts[0].Tokens
	saved, err := tokens.Token(ctx, upstream.TokenKey{Server: "remote"})
	if err != nil || saved.Token.AccessToken != issued[2] {
		t.Fatalf("the store after the refreshes: %v; want the last token", err)
	}
	a.mu.Lock()
	secretsIssued := append(append([]string(nil), a.issued...), a.refreshed...)
	a.mu.Unlock()
	out := logs.String()
	for _, tok := range secretsIssued {
		if strings.Contains(out, tok) {
			t.Errorf("a token is in a replica's log")
		}
	}
}
