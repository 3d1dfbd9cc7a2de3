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
		Reservations: []store.Reservation{{Scope: "caller", Key: "alice", Quota: 7, Amount: 5}},
	})
	var be *store.BudgetError
	if !errors.As(err, &be) || be.Used != 3 {
		t.Errorf("a reservation over the carried-over usage: %v, want a BudgetError with used 3", err)
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
			Reservations: []store.Reservation{{Scope: "caller", Key: "alice", Quota: 1e9, Amount: 1, Window: store.WindowAt(time.Hour, base)}},
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
