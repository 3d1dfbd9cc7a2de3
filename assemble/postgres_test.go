package assemble

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/testkit"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
)

// A postgres:// store in the file opens the PostgreSQL store, in the
// schema the URL's search_path names, and the gateway journals there.
func TestOpenPostgresStore(t *testing.T) {
	ctx := context.Background()
	u, schema := testkit.PostgresSchema(t)

	dir := t.TempDir()
	src := "store: '" + u + "'\n" +
		"policy:\n  - caller: alice\n    allow: [echo]\n" +
		"budgets:\n  - scope: caller\n    quota: 1\n" +
		"tools:\n  - name: echo\n    command: [cat]\n    input_schema: {type: object}\n"
	path := filepath.Join(dir, "bp.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != u {
		t.Errorf("Store = %q, want the URL as written", c.Store)
	}
	rt, err := Open(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ps, ok := rt.Store.(*postgres.Store)
	if !ok {
		t.Fatalf("store is %T, want *postgres.Store", rt.Store)
	}
	if ps.Schema() != schema {
		t.Errorf("store schema %q, want %q", ps.Schema(), schema)
	}
	res, err := call(rt, "alice", "echo", `{"a":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Result) != `{"a":1}` {
		t.Errorf("result %s", res.Result)
	}
	// The journal and the budget are in the database, where another
	// replica sees them.
	other, err := postgres.Open(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	in, err := other.GetIntent(ctx, res.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != store.StatusSucceeded || in.Incarnation != ps.Incarnation() {
		t.Errorf("journal entry seen by another replica: %+v", in)
	}
	usage, err := other.BudgetUsage(ctx)
	if err != nil || len(usage) != 1 || usage[0].Used != 1 {
		t.Errorf("budget seen by another replica: %v, %v; want alice 1", usage, err)
	}
}

// A PostgreSQL store that cannot be opened is an error naming the file and
// the URL without its password. (No database needed: nothing listens on
// port 1.)
func TestOpenPostgresErrorHidesPassword(t *testing.T) {
	c, err := config.Parse([]byte("store: postgres://user:hunter2@127.0.0.1:1/bp?connect_timeout=5\n"), "/x/bp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, nil)
	if err == nil {
		rt.Close()
		t.Fatal("opened a store nothing serves")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q shows the password", err)
	}
	if !strings.HasPrefix(err.Error(), "/x/bp.yaml: store postgres://user:xxxxx@127.0.0.1:1/bp") {
		t.Errorf("error %q does not name the file and the redacted URL", err)
	}
}

// A store read from store_env is named by its source in the error, not
// by its URL, and its password is never shown (the driver's own message
// may name the user, database and host it tried: not secrets, and what
// one needs to fix the connection).
func TestOpenPostgresFromEnvErrorNamesTheSource(t *testing.T) {
	t.Setenv("BP_TEST_STORE_URL", "postgres://someuser:hunter2@127.0.0.1:1/bp?connect_timeout=5")
	c, err := config.Parse([]byte("store_env: BP_TEST_STORE_URL\n"), "/x/bp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, nil)
	if err == nil {
		rt.Close()
		t.Fatal("opened a store nothing serves")
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "postgres://") {
		t.Errorf("error %q shows the URL or its password", err)
	}
	if !strings.HasPrefix(err.Error(), "/x/bp.yaml: store (store_env BP_TEST_STORE_URL): ") {
		t.Errorf("error %q does not name the file and where the store came from", err)
	}
}

// The section reaches the store: the incarnation's lease in the database
// is lease_ttl long, and it is renewed every renew_every.
func TestPostgresSectionOpensStoreWithLease(t *testing.T) {
	ctx := context.Background()
	u, schema := testkit.PostgresSchema(t)

	// A lease of an hour renewed every second: the default renewal (every
	// 20 minutes) would not move it during the test.
	path := filepath.Join(t.TempDir(), "bp.yaml")
	src := "store: '" + u + "'\npostgres: {lease_ttl: 1h, renew_every: 1s, max_conns: 2}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ps, ok := rt.Store.(*postgres.Store)
	if !ok {
		t.Fatalf("store is %T, want *postgres.Store", rt.Store)
	}

	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	lease := func() (ahead time.Duration, expires time.Time) {
		t.Helper()
		var us int64
		err := conn.QueryRow(ctx, `SELECT (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1e6)::bigint, lease_expires_at
			FROM `+pgx.Identifier{schema, "incarnations"}.Sanitize()+` WHERE id = $1 AND state = 'alive'`, ps.Incarnation()).Scan(&us, &expires)
		if err != nil {
			t.Fatalf("the incarnation's lease: %v", err)
		}
		return time.Duration(us) * time.Microsecond, expires
	}
	ahead, first := lease()
	if ahead < 59*time.Minute || ahead > time.Hour {
		t.Errorf("the lease runs %s ahead, want lease_ttl 1h (the default is 15s)", ahead)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(300 * time.Millisecond)
		if _, e := lease(); e.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was not renewed within 5s with renew_every 1s")
		}
	}
}
