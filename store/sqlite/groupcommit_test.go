package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

var quietOpts = &Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

func openDir(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, quietOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checkUsageDerived asserts that budget_usage, which budget checks read,
// equals the sum of the reservations not released, per (scope, key).
func checkUsageDerived(t *testing.T, s *Store) {
	t.Helper()
	q := func(query string) map[string]int64 {
		rows, err := s.rdb.QueryContext(context.Background(), query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var scope, key string
			var n int64
			if err := rows.Scan(&scope, &key, &n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				out[scope+"/"+key] = n
			}
		}
		return out
	}
	// The reservations held: those of the intents not released, of their
	// usage row's generation (any, where the row is missing: a mismatch).
	held := q(`WITH r AS (SELECT json_extract(j.value, '$[0]') AS scope, json_extract(j.value, '$[1]') AS key,
			json_extract(j.value, '$[3]') AS amount, json_extract(j.value, '$[4]') AS per,
			json_extract(j.value, '$[5]') AS window_start, json_extract(j.value, '$[6]') AS gen
		FROM intents LEFT JOIN settlements s ON s.seq = intents.seq, json_each(intents.reservations) AS j
		WHERE coalesce(s.status, 'started') NOT IN ('failed', 'not_executed'))
		SELECT scope, key, SUM(amount) FROM r WHERE gen = coalesce((SELECT u.gen FROM budget_usage u
			WHERE u.scope = r.scope AND u.key = r.key AND u.per = r.per AND u.window_start = r.window_start), gen)
		GROUP BY scope, key`)
	usage := q(`SELECT scope, key, SUM(used) FROM budget_usage GROUP BY scope, key`)
	if fmt.Sprint(held) != fmt.Sprint(usage) {
		t.Errorf("budget_usage %v differs from the reservations held %v", usage, held)
	}
}

type batchLog struct {
	mu    sync.Mutex
	sizes []int
	mixed int // batches where some requests failed and some committed
}

func (b *batchLog) record(size, failed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, size)
	if failed > 0 && failed < size {
		b.mixed++
	}
}

func (b *batchLog) total() (tx, reqs int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.sizes {
		reqs += n
	}
	return len(b.sizes), reqs
}

func intentReq(id, caller string, rs ...budget.Reservation) *store.CommitRequest {
	return &store.CommitRequest{
		Intent: store.Intent{
			CallID: id, Caller: caller, Tool: "note", DefinitionHash: "sha256:def",
			Arguments: []byte(`{"text":"hello"}`), ArgsDigest: "sha256:" + id, CreatedAt: time.Now(),
		},
		Reservations: rs,
	}
}

// TestGroupCommit commits from 64 goroutines at once, half within a quota
// that runs out, half always over theirs: far fewer transactions than
// commits, every caller its own right answer, failed requests undone alone
// inside batches that commit the others, and every success visible to
// another connection (so committed) the moment its call returns.
func TestGroupCommit(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	other := openDir(t, dir) // reads through its own connections
	var log batchLog
	s.onBatch = log.record
	before := s.Stats()

	const goroutines, each, quota = 64, 4, 100
	type outcome struct {
		id  string
		err error
	}
	results := make([][]outcome, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				id := fmt.Sprintf("call-%02d-%d", g, i)
				var r *store.CommitRequest
				if g%2 == 0 {
					r = intentReq(id, "alice", budget.Reservation{Scope: "caller", Key: "alice", Quota: quota, Amount: 1})
				} else {
					r = intentReq(id, "bob", budget.Reservation{Scope: "caller", Key: "bob", Quota: 1, Amount: 2})
				}
				existing, err := s.CommitIntent(context.Background(), r)
				if existing != nil {
					t.Errorf("%s: existing intent %s returned", id, existing.CallID)
				}
				if err == nil {
					if _, gerr := other.GetIntent(context.Background(), id); gerr != nil {
						t.Errorf("%s: CommitIntent returned, but another connection cannot read it: %v", id, gerr)
					}
				}
				results[g] = append(results[g], outcome{id, err})
			}
		})
	}
	close(start)
	wg.Wait()

	aliceOK := 0
	for g, rs := range results {
		for _, o := range rs {
			var be *store.BudgetError
			switch {
			case g%2 == 0 && o.err == nil:
				aliceOK++
			case g%2 == 0 && errors.As(o.err, &be):
				if *be != (store.BudgetError{Scope: "caller", Key: "alice", Used: quota, Requested: 1, Quota: quota}) {
					t.Errorf("%s: %+v", o.id, *be)
				}
			case g%2 == 1 && errors.As(o.err, &be):
				if *be != (store.BudgetError{Scope: "caller", Key: "bob", Used: 0, Requested: 2, Quota: 1}) {
					t.Errorf("%s: %+v", o.id, *be)
				}
			default:
				t.Errorf("%s (goroutine %d): unexpected result %v", o.id, g, o.err)
			}
			if o.err != nil {
				if _, err := other.GetIntent(context.Background(), o.id); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("%s failed with %v but its intent reads back: %v", o.id, o.err, err)
				}
			}
		}
	}
	if aliceOK != quota {
		t.Errorf("%d of alice's %d commits succeeded, want exactly the quota %d", aliceOK, goroutines/2*each, quota)
	}
	usage, err := other.BudgetUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range usage {
		want := map[string]int64{"alice": quota, "bob": 0}[u.Key]
		if u.Used != want {
			t.Errorf("usage %s %s = %d, want %d", u.Scope, u.Key, u.Used, want)
		}
	}

	commits := goroutines * each
	after := s.Stats()
	tx, reqs := log.total()
	t.Logf("%d commits in %d transactions (batch sizes %v), %d mixed", commits, tx, log.sizes, log.mixed)
	if got := after.Requests - before.Requests; got != int64(commits) || reqs != commits {
		t.Errorf("Stats counts %d requests, batches %d; want %d", got, reqs, commits)
	}
	if got := after.Transactions - before.Transactions; got != int64(tx) {
		t.Errorf("Stats counts %d transactions, the batch hook saw %d", got, tx)
	}
	if tx > commits/4 {
		t.Errorf("%d transactions for %d concurrent commits: not grouped", tx, commits)
	}
	if log.mixed == 0 {
		t.Errorf("no transaction held both failed and committed requests (sizes %v)", log.sizes)
	}
	checkUsageDerived(t, s)
}

// TestGroupCommitSettle settles 64 intents at once, succeeded and failed
// mixed: they share transactions, none of them synced (a settlement does
// not wait for the disk, so it has little time to wait for others: the
// sharing is less than for intents), and exactly the failed ones release
// their budget.
func TestGroupCommitSettle(t *testing.T) {
	s := openDir(t, t.TempDir())
	const n = 64
	for i := range n {
		if _, err := s.CommitIntent(context.Background(),
			intentReq(fmt.Sprintf("c%02d", i), "alice", budget.Reservation{Scope: "caller", Key: "alice", Quota: n, Amount: 1})); err != nil {
			t.Fatal(err)
		}
	}
	var log batchLog
	s.onBatch = log.record
	synced := s.Stats().Synced
	// The writer is held inside a transaction of its own until every
	// settlement is queued: whether they share a transaction must not
	// depend on how a loaded machine schedules 64 goroutines (under load
	// each could reach the queue only after the last one's commit).
	s.queueAlways = true // the writer, not a caller, holds the transaction
	inside, held := make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.write1(context.Background(), func(*wtx) error {
			close(inside)
			for deadline := time.Now().Add(30 * time.Second); len(s.queue) < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					return fmt.Errorf("%d of %d settlements queued after 30s", len(s.queue), n)
				}
			}
			return nil
		})
	}()
	<-inside
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			st := store.StatusSucceeded
			if i%4 == 0 {
				st = store.StatusFailed
			}
			if err := s.Settle(context.Background(), fmt.Sprintf("c%02d", i), store.Settlement{Status: st, At: time.Now()}); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// The holder's own transaction is one request, synced.
	tx, reqs := log.total()
	tx, reqs = tx-1, reqs-1
	t.Logf("%d settlements in %d transactions", reqs, tx)
	if reqs != n || tx >= n {
		t.Errorf("%d settlements in %d transactions: not grouped", reqs, tx)
	}
	if got := s.Stats().Synced - synced; got != 1 {
		t.Errorf("%d of the settlements' transactions were synced, want none", got-1)
	}
	usage, err := s.BudgetUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 || usage[0].Used != n-n/4 {
		t.Errorf("usage %+v, want alice %d (the failed quarter released)", usage, n-n/4)
	}
	checkUsageDerived(t, s)
}

// TestSingleCallerCommitsAtOnce: a caller alone gets one transaction per
// call; nothing waits for a batch to fill.
func TestSingleCallerCommitsAtOnce(t *testing.T) {
	s := openDir(t, t.TempDir())
	for i := range 20 {
		before := s.Stats().Transactions
		t0 := time.Now()
		if _, err := s.CommitIntent(context.Background(), intentReq(fmt.Sprintf("c%d", i), "alice")); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("a lone commit took %v", d)
		}
		if got := s.Stats().Transactions - before; got != 1 {
			t.Errorf("commit %d: %d transactions, want 1", i, got)
		}
	}
}

// TestSchemaPragmas checks on a live connection what durability rests on.
func TestSchemaPragmas(t *testing.T) {
	s := openDir(t, t.TempDir())
	for _, c := range []struct {
		pragma string
		want   string
	}{{"journal_mode", "wal"}, {"synchronous", "1"}, {"foreign_keys", "1"}, {"user_version", fmt.Sprint(SchemaVersion)}, {"busy_timeout", "5000"}} {
		var got string
		if err := s.wc.QueryRowContext(context.Background(), "PRAGMA "+c.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("PRAGMA %s = %s, want %s", c.pragma, got, c.want)
		}
	}
	// The read pool cannot write: every write goes through the writer.
	if _, err := s.rdb.ExecContext(context.Background(), `DELETE FROM intents`); err == nil {
		t.Error("a read connection could write")
	}
}

// TestQueryPlans: the queries an operator runs against a long journal
// (recovery at every Open, listing by a rare status) use an index instead of
// scanning every intent.
func TestQueryPlans(t *testing.T) {
	s := openDir(t, t.TempDir())
	plan := func(q string, args ...any) string {
		rows, err := s.rdb.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		return fmt.Sprint(lines)
	}
	for _, c := range []struct {
		name, index string
		q           string
		args        []any
	}{
		// Recovery and "list started" read the calls in flight, not the
		// journal.
		{"recover", "SCAN open_intents", recoverQuery, []any{"x"}},
		{"list uncertain", "settlements_rare", "", nil},
		{"list failed by caller", "settlements_rare", "", nil},
		{"list started", "SCAN o", "", nil},
		// A group of settlements finds each open row by its seq.
		{"settle group", "USING INTEGER PRIMARY KEY (rowid=?)", closeOpenQuery(3), make([]any, 4)},
	} {
		q, args := c.q, c.args
		switch c.name {
		case "list uncertain":
			q, args = listQuery(store.IntentFilter{Status: store.StatusUncertain}, 0, 100)
		case "list failed by caller":
			q, args = listQuery(store.IntentFilter{Status: store.StatusFailed, Caller: "alice"}, 0, 100)
		case "list started":
			q, args = listQuery(store.IntentFilter{Status: store.StatusStarted}, 0, 100)
		}
		if p := plan(q, args...); !strings.Contains(p, c.index) {
			t.Errorf("%s: plan %s does not use %s", c.name, p, c.index)
		}
	}
}

// TestSettleIsNotSynced: a call costs one synced commit, its intent's; the
// settlement is committed (visible at once to readers, and to another
// process) without a sync of its own, then synced by the writer when
// nothing else syncs it.
func TestSettleIsNotSynced(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	res := budget.Reservation{Scope: "caller", Key: "alice", Quota: 10, Amount: 1}
	for i, st := range []store.Status{store.StatusSucceeded, store.StatusFailed} {
		id := fmt.Sprint("c", i)
		before := s.Stats()
		if _, err := s.CommitIntent(ctx, intentReq(id, "alice", res)); err != nil {
			t.Fatal(err)
		}
		mid := s.Stats()
		if err := s.Settle(ctx, id, store.Settlement{Status: st, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		after := s.Stats()
		if got := mid.Synced - before.Synced; got != 1 {
			t.Errorf("commit %s: %d synced transactions, want 1", id, got)
		}
		if got, synced := after.Transactions-mid.Transactions, after.Synced-mid.Synced; got != 1 || synced != 0 {
			t.Errorf("settle %s (%s): %d transactions, %d synced; want 1, none synced", id, st, got, synced)
		}
		// Visible to the read pool and to another process at once.
		in, err := s.GetIntent(ctx, id)
		if err != nil || in.Status != st {
			t.Fatalf("GetIntent(%s) = %+v, %v; want %s", id, in, err, st)
		}
		other := openDir(t, dir)
		if in, err := other.GetIntent(ctx, id); err != nil || in.Status != st {
			t.Fatalf("another store: GetIntent(%s) = %+v, %v; want %s", id, in, err, st)
		}
		if err := other.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The failed settlement gave its budget back.
	usage, err := s.BudgetUsage(ctx)
	if err != nil || len(usage) != 1 || usage[0].Used != 1 {
		t.Errorf("usage %+v, %v; want alice 1", usage, err)
	}
	// With nothing else written, the writer syncs the WAL itself.
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().WALSyncs == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := s.Stats(); st.WALSyncs == 0 {
		t.Errorf("stats %+v: the settlements were never synced", st)
	}
}
