package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// A database made by the version before budget windows and incremental
// vacuum (schema 2, auto_vacuum off) opens: its budget usage is carried
// over with the quota of its latest reservation, and the file is switched
// to incremental vacuum by a one-time VACUUM.
func TestUpgradeFromSchema2(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, DBFile)+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	saved := migrations
	migrations = saved[:2]
	err = migrate(ctx, c, slog.New(slog.DiscardHandler))
	migrations = saved
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO incarnations (id, pid, state, started_at) VALUES ('old', 1, 'closed', 1)`,
		`INSERT INTO intents (call_id, caller, tool, definition_hash, args_digest, incarnation, status, created_at)
			VALUES ('c1', 'alice', 'note', 'h', 'd', 'old', 'succeeded', 1), ('c2', 'alice', 'note', 'h', 'd', 'old', 'succeeded', 2)`,
		`INSERT INTO reservations (call_id, scope, key, quota, amount) VALUES ('c1', 'caller', 'alice', 5, 2), ('c2', 'caller', 'alice', 7, 1)`,
		`INSERT INTO budget_usage (scope, key, used) VALUES ('caller', 'alice', 3)`,
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var mode int
	if err := c.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 0 {
		t.Fatalf("the old database's auto_vacuum = %d, %v; want 0 (the test needs an old-style file)", mode, err)
	}
	c.Close()
	db.Close()

	s := openDir(t, dir)
	us, err := s.BudgetUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Used != 3 || us[0].Quota != 7 || !us[0].Window.IsZero() {
		t.Errorf("usage after the upgrade = %+v, want caller alice used 3 of quota 7, no window", us)
	}
	if err := s.wc.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 2 {
		t.Errorf("auto_vacuum after the upgrade = %d, %v; want 2 (incremental)", mode, err)
	}
	// The carried-over usage is still enforced.
	_, err = s.CommitIntent(ctx, &store.CommitRequest{
		Intent:       store.Intent{CallID: "c3", Caller: "alice", Tool: "note", ArgsDigest: "d", CreatedAt: time.Now()},
		Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 7, Amount: 5}},
	})
	var be *store.BudgetError
	if !errors.As(err, &be) || be.Used != 3 {
		t.Errorf("a reservation over the carried-over usage: %v, want a BudgetError with used 3", err)
	}
}

// oldDatabase makes dir's database at schema version v, as the release
// with that schema did, holding what the statements qs write.
func oldDatabase(t *testing.T, dir string, v int, qs ...string) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(dir, DBFile)+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	saved := migrations
	migrations = saved[:v]
	err = migrate(ctx, c, slog.New(slog.DiscardHandler))
	migrations = saved
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// A database of schema 4 (reservations in a table of their own) opens with
// the reservations moved into their intents' rows: a reservation still held
// is given back by its release, one an operator's reset released before the
// upgrade gives nothing back, and Prune counts the reservations of the
// intents it deletes.
func TestUpgradeFromSchema4(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	oldDatabase(t, dir, 4,
		`INSERT INTO incarnations (id, pid, state, started_at) VALUES ('old', 1, 'closed', 1)`,
		// held: 2 and 3 of alice's budget (two reservations of c1, one of
		// them in an hourly window), 4 of c2's; c3's reservation was reset
		// by an operator; c4 failed, its reservation released.
		`INSERT INTO intents (call_id, caller, tool, definition_hash, args_digest, incarnation, status, created_at, settled_at) VALUES
			('c1', 'alice', 'note', 'h', 'd', 'old', 'uncertain', 1, 2),
			('c2', 'alice', 'note', 'h', 'd', 'old', 'uncertain', 1, 2),
			('c3', 'alice', 'note', 'h', 'd', 'old', 'uncertain', 1, 2),
			('c4', 'alice', 'note', 'h', 'd', 'old', 'failed', 1, 2)`,
		`INSERT INTO reservations (call_id, scope, key, quota, amount, per, window_start, released) VALUES
			('c1', 'caller', 'alice', 100, 2, 0, 0, 0), ('c1', 'tool', 'note', 50, 3, 3600, 7200, 0),
			('c2', 'caller', 'alice', 100, 4, 0, 0, 0),
			('c3', 'caller', 'alice', 100, 5, 0, 0, 1),
			('c4', 'caller', 'alice', 100, 6, 0, 0, 1)`,
		`INSERT INTO budget_usage (scope, key, per, window_start, quota, used) VALUES
			('caller', 'alice', 0, 0, 100, 6), ('tool', 'note', 3600, 7200, 50, 3)`,
	)
	s := openDir(t, dir)
	usage := func() string {
		t.Helper()
		us, err := s.BudgetUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, u := range us {
			out = append(out, fmt.Sprintf("%s/%s=%d", u.Scope, u.Key, u.Used))
		}
		return strings.Join(out, " ")
	}
	if got, want := usage(), "caller/alice=6 tool/note=3"; got != want {
		t.Fatalf("usage after the upgrade = %s, want %s", got, want)
	}
	var tables int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'reservations'`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("the reservations table is still there (%d, %v)", tables, err)
	}
	at := time.Unix(10, 0)
	if err := s.ResolveIntent(ctx, "c1", false, "op", at); err != nil {
		t.Fatal(err)
	}
	if got, want := usage(), "caller/alice=4 tool/note=0"; got != want {
		t.Errorf("usage after c1 was found not executed = %s, want %s (both its reservations given back)", got, want)
	}
	if err := s.ResolveIntent(ctx, "c3", false, "op", at); err != nil {
		t.Fatal(err)
	}
	if got, want := usage(), "caller/alice=4 tool/note=0"; got != want {
		t.Errorf("usage after c3 (reset before the upgrade) was found not executed = %s, want %s (nothing given back)", got, want)
	}
	if err := s.ResolveIntent(ctx, "c2", false, "op", at); err != nil {
		t.Fatal(err)
	}
	if got, want := usage(), "caller/alice=0 tool/note=0"; got != want {
		t.Errorf("usage after c2 was found not executed = %s, want %s", got, want)
	}
	r, err := s.Prune(ctx, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	if r.Intents != 4 || r.Reservations != 5 {
		t.Errorf("Prune = %+v, want 4 intents and their 5 reservations", r)
	}
}

// Pruning a large journal gives its pages back: the database shrinks to
// about what it held before the calls, and no free page is left behind.
func TestPruneReclaimsSpace(t *testing.T) {
	ctx := context.Background()
	s := openDir(t, t.TempDir())
	pages := func() (total, free int64) {
		t.Helper()
		if err := s.wc.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&total); err != nil {
			t.Fatal(err)
		}
		if err := s.wc.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
			t.Fatal(err)
		}
		return total, free
	}
	empty, _ := pages()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	args := []byte(`{"text":"` + strings.Repeat("x", 4000) + `"}`)
	const n = 600
	for i := range n {
		id := fmt.Sprintf("c%04d", i)
		_, err := s.CommitIntent(ctx, &store.CommitRequest{
			Intent:       store.Intent{CallID: id, Caller: "alice", Tool: "note", Arguments: args, ArgsDigest: "d", CreatedAt: base.Add(time.Duration(i) * time.Second)},
			Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 1e9, Amount: 1, Window: budget.WindowAt(time.Hour, base)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Settle(ctx, id, store.Settlement{Status: store.StatusSucceeded, Result: args, At: base.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	full, _ := pages()
	if full < empty+n { // two 4 KB blobs per call
		t.Fatalf("%d pages after %d calls (%d empty): the test writes too little to measure", full, n, empty)
	}
	r, err := s.Prune(ctx, base.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r.Intents != n || r.Reservations != n || r.Windows != 1 {
		t.Errorf("Prune = %+v, want %d intents, %d reservations, 1 window", r, n, n)
	}
	after, free := pages()
	t.Logf("pages: empty %d, after %d calls %d, after prune %d (free %d)", empty, n, full, after, free)
	if free != 0 {
		t.Errorf("%d free pages left after Prune, want 0 (incremental vacuum)", free)
	}
	if after > empty+8 {
		t.Errorf("%d pages after pruning everything, want about the empty database's %d", after, empty)
	}
}

// A database of schema 6 (settlements written into the intents' rows)
// opens with the journal append-only (version 7): each settled intent keeps
// its status, result and error as a settlement row, a started intent of a
// dead incarnation is recovered as uncertain, the idempotency key still
// finds its intent, the lists by status see the old rows, and the upgraded
// store settles, resolves and prunes them as it does new ones.
func TestUpgradeFromSchema6(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	oldDatabase(t, dir, 6,
		`INSERT INTO incarnations (id, pid, state, started_at) VALUES ('old', 1, 'alive', 1)`,
		`INSERT INTO intents (call_id, caller, tool, definition_hash, args_digest, idempotency_key, incarnation, status,
				result, error_class, error_message, created_at, settled_at, reservations) VALUES
			('ok', 'alice', 'note', 'h', 'd', 'k1', 'old', 'succeeded', x'7b7d', '', '', 1, 2, NULL),
			('bad', 'alice', 'note', 'h', 'd', NULL, 'old', 'failed', NULL, 'backend', 'it broke', 1, 2, NULL),
			('odd', 'alice', 'note', 'h', 'd', NULL, 'old', 'uncertain', NULL, 'unknown_outcome', 'lost', 1, 2,
				'[["caller","alice",10,4,0,0,0]]'),
			('run', 'alice', 'note', 'h', 'd', NULL, 'old', 'started', NULL, '', '', 1, NULL,
				'[["caller","alice",10,3,0,0,0]]')`,
		`INSERT INTO budget_usage (scope, key, per, window_start, quota, used, gen) VALUES ('caller', 'alice', 0, 0, 10, 7, 0)`,
	)
	s := openDir(t, dir) // migrates, then recovers 'old' (no lock file: gone)
	want := map[string]struct {
		status store.Status
		result string
		class  string
	}{
		"ok":  {store.StatusSucceeded, "{}", ""},
		"bad": {store.StatusFailed, "", "backend"},
		"odd": {store.StatusUncertain, "", "unknown_outcome"},
		"run": {store.StatusUncertain, "", "unknown_outcome"},
	}
	for id, w := range want {
		in, err := s.GetIntent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.Status != w.status || string(in.Result) != w.result || in.ErrorClass != w.class || in.CreatedAt.UnixNano() != 1 {
			t.Errorf("%s after the upgrade: %+v, want %s, result %q, class %q", id, in, w.status, w.result, w.class)
		}
	}
	if in, err := s.GetIntentByKey(ctx, "alice", "k1"); err != nil || in.CallID != "ok" {
		t.Errorf("GetIntentByKey(k1) = %+v, %v; want ok", in, err)
	}
	for st, n := range map[store.Status]int{store.StatusUncertain: 2, store.StatusFailed: 1, store.StatusSucceeded: 1, store.StatusStarted: 0} {
		l, err := s.ListIntents(ctx, store.IntentFilter{Status: st})
		if err != nil || len(l) != n {
			t.Errorf("ListIntents(%s) = %d intents, %v; want %d", st, len(l), err, n)
		}
	}
	var cols int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('intents') WHERE name IN ('status', 'result', 'settled_at')`).Scan(&cols); err != nil || cols != 0 {
		t.Errorf("the intents table still has %d settlement columns (%v)", cols, err)
	}
	// Both uncertain ones resolved as not executed give their budget back.
	at := time.Unix(10, 0)
	for _, id := range []string{"odd", "run"} {
		if err := s.ResolveIntent(ctx, id, false, "op", at); err != nil {
			t.Fatal(err)
		}
	}
	us, err := s.BudgetUsage(ctx)
	if err != nil || len(us) != 1 || us[0].Used != 0 {
		t.Errorf("usage after both were found not executed: %+v, %v; want 0", us, err)
	}
	// A new intent commits, settles and is pruned with the old ones.
	if _, err := s.CommitIntent(ctx, intentReq("new", "alice")); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, "new", store.Settlement{Status: store.StatusSucceeded, At: time.Unix(20, 0)}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Prune(ctx, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r.Intents != 5 {
		t.Errorf("Prune = %+v, want all 5 intents", r)
	}
	var left int
	if err := s.rdb.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM intents) + (SELECT count(*) FROM settlements) + (SELECT count(*) FROM open_intents)`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows left after pruning everything (%v)", left, err)
	}
}
