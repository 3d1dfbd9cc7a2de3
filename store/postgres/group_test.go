package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

func groupReq(callID, key string, quota, amount int64) *store.CommitRequest {
	in := intent(callID, "alice")
	in.IdempotencyKey = key
	return &store.CommitRequest{Intent: in, Reservations: []budget.Reservation{
		{Scope: "caller", Key: "alice", Quota: quota, Amount: amount},
		{Scope: "session", Key: "s-" + callID, Quota: quota, Amount: amount},
	}}
}

// countRows counts the rows of table in schema.
func countRows(t *testing.T, schema, table string) int {
	t.Helper()
	var n int
	must(t, sqlConn(t, schema).QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// countReservations counts the reservations recorded in the intents' rows
// of schema (see schema version 10).
func countReservations(t *testing.T, schema string) int {
	t.Helper()
	var n int
	must(t, sqlConn(t, schema).QueryRow(context.Background(),
		`SELECT coalesce(sum(jsonb_array_length(reservations)), 0) FROM intents`).Scan(&n))
	return n
}

// A group commits all its intents with their reservations, summed per
// budget row, or nothing of them.
func TestCommitTogether(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	s := openStore(t, schema, nil)

	var group []*store.CommitRequest
	for i := range 5 {
		group = append(group, groupReq(fmt.Sprintf("g1-%d", i), "", 10, 2))
	}
	must(t, s.CommitTogether(group...))
	for _, r := range group {
		in, err := s.GetIntent(ctx, r.Intent.CallID)
		if err != nil || in.Status != store.StatusStarted || in.Incarnation != s.Incarnation() {
			t.Errorf("intent %s after the group: %+v, %v; want started by %s", r.Intent.CallID, in, err, s.Incarnation())
		}
	}
	wantUsed := map[string]int64{"alice": 10}
	for _, r := range group {
		wantUsed["s-"+r.Intent.CallID] = 2
	}
	usage, err := s.BudgetUsage(ctx)
	must(t, err)
	if len(usage) != len(wantUsed) {
		t.Errorf("usage %+v, want %v", usage, wantUsed)
	}
	for _, u := range usage {
		if u.Used != wantUsed[u.Key] || u.Quota != 10 {
			t.Errorf("usage of %s %s = %d of %d, want %d of 10", u.Scope, u.Key, u.Used, u.Quota, wantUsed[u.Key])
		}
	}
	if n := countReservations(t, schema); n != 10 {
		t.Errorf("%d reservations, want 10", n)
	}

	// The quota is full: a group of two that each alone would be refused,
	// and a group whose first intent would fit a fresh key but whose
	// second does not, write nothing.
	for _, g := range [][]*store.CommitRequest{
		{groupReq("g2-0", "", 10, 1), groupReq("g2-1", "", 10, 1)},
		{groupReq("g3-0", "", 11, 1), groupReq("g3-1", "", 11, 1)}, // a raised quota: 10 + 2 > 11
	} {
		err := s.CommitTogether(g...)
		if err == nil {
			t.Fatalf("a group over the quota committed")
		}
		for _, r := range g {
			if _, err := s.GetIntent(ctx, r.Intent.CallID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("intent %s of a refused group: %v, want ErrNotFound", r.Intent.CallID, err)
			}
		}
	}
	// An idempotency key taken inside the group refuses it all.
	err = s.CommitTogether(groupReq("g4-0", "k", 100, 0), groupReq("g4-1", "k", 100, 0))
	if err == nil {
		t.Fatal("a group with one idempotency key twice committed")
	}
	if n := countRows(t, schema, "intents"); n != 5 {
		t.Errorf("%d intents after the refused groups, want the first group's 5", n)
	}
	if n := countReservations(t, schema); n != 10 {
		t.Errorf("%d reservations after the refused groups, want 10", n)
	}
	usage, err = s.BudgetUsage(ctx)
	must(t, err)
	for _, u := range usage {
		if u.Used != wantUsed[u.Key] {
			t.Errorf("after the refused groups, usage of %s %s = %d, want %d", u.Scope, u.Key, u.Used, wantUsed[u.Key])
		}
	}
}

// Concurrent commits through CommitIntent, grouped or not, reserve exactly
// the quota; the refused ones get the BudgetError a single commit gives,
// and some of the successful ones shared a transaction.
func TestGroupedCommitsKeepTheQuota(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	s := openStore(t, schema, nil)
	const n, quota = 64, 20
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			in := intent(fmt.Sprintf("c-%02d", i), "alice")
			_, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: in,
				Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: quota, Amount: 1}}})
			errs <- err
		}()
	}
	close(start)
	won := 0
	for range n {
		err := <-errs
		var be *store.BudgetError
		switch {
		case err == nil:
			won++
		case errors.As(err, &be):
			if be.Used != quota || be.Requested != 1 || be.Quota != quota {
				t.Errorf("refusal %+v, want used %d + 1 > %d", be, quota, quota)
			}
		default:
			t.Errorf("commit: %v", err)
		}
	}
	if won != quota {
		t.Errorf("%d commits succeeded against quota %d", won, quota)
	}
	if n := countRows(t, schema, "intents"); n != quota {
		t.Errorf("%d intents, want %d", n, quota)
	}
	cs := s.CommitStats()
	if cs.Grouped+cs.Single != quota {
		t.Errorf("commit stats %+v count %d intents, want %d", cs, cs.Grouped+cs.Single, quota)
	}
	t.Logf("commit stats: %+v", cs)
}

// A group settlement settles the started intents of this incarnation and
// leaves out the others, which Settle then refuses one by one.
func TestSettleTogether(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	s := openStore(t, schema, nil)
	for _, id := range []string{"a", "b", "c"} {
		_, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: intent(id, "alice")})
		must(t, err)
	}
	must(t, s.Settle(ctx, "c", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}))
	at := time.Now()
	settled, err := s.SettleTogether(store.Settlement{Status: store.StatusSucceeded, Result: []byte(`{"ok":true}`), At: at}, "a", "b", "c", "missing")
	must(t, err)
	if !settled["a"] || !settled["b"] || settled["c"] || settled["missing"] || len(settled) != 2 {
		t.Errorf("settled %v, want a and b only", settled)
	}
	for _, id := range []string{"a", "b"} {
		in, err := s.GetIntent(ctx, id)
		must(t, err)
		if in.Status != store.StatusSucceeded || string(in.Result) != `{"ok":true}` || !in.SettledAt.Equal(at.Truncate(time.Microsecond)) {
			t.Errorf("intent %s after the group settlement: %s %s at %v", id, in.Status, in.Result, in.SettledAt)
		}
	}
	err = s.Settle(ctx, "a", store.Settlement{Status: store.StatusSucceeded, At: time.Now()})
	if !errors.Is(err, store.ErrNotStarted) {
		t.Errorf("settling a settled intent: %v, want ErrNotStarted", err)
	}
}

// Intents commit with synchronous_commit on and settlements (alone or in
// a group) with it off: triggers installed by the test record the setting
// in force in each transaction that writes an intent or a settlement. A
// settlement is a settlement row: the intent's row is never updated.
func TestSettlementsCommitAsynchronously(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	s := openStore(t, schema, nil)
	c := sqlConn(t, schema)
	for _, q := range []string{
		`CREATE TABLE commit_modes (call_id text, op text, mode text)`,
		`CREATE FUNCTION record_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO commit_modes VALUES (NEW.call_id, TG_OP, current_setting('synchronous_commit'));
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER record_commit_mode AFTER INSERT OR UPDATE ON intents FOR EACH ROW EXECUTE FUNCTION record_commit_mode()`,
		`CREATE FUNCTION record_settle_mode() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO commit_modes VALUES ((SELECT call_id FROM intents WHERE seq = NEW.seq), 'SETTLE', current_setting('synchronous_commit'));
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER record_settle_mode AFTER INSERT OR UPDATE ON settlements FOR EACH ROW EXECUTE FUNCTION record_settle_mode()`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, id := range []string{"alone", "failed", "g1", "g2"} {
		_, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: intent(id, "alice"),
			Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 10, Amount: 1}}})
		must(t, err)
	}
	must(t, s.Settle(ctx, "alone", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}))
	must(t, s.Settle(ctx, "failed", store.Settlement{Status: store.StatusFailed, ErrorClass: "backend_unavailable", At: time.Now()}))
	settled, err := s.SettleTogether(store.Settlement{Status: store.StatusSucceeded, At: time.Now()}, "g1", "g2")
	must(t, err)
	if len(settled) != 2 {
		t.Fatalf("settled %v, want g1 and g2", settled)
	}
	rows, err := c.Query(ctx, `SELECT call_id, op, mode FROM commit_modes ORDER BY call_id, op`)
	must(t, err)
	got := map[string]string{}
	for rows.Next() {
		var id, op, mode string
		must(t, rows.Scan(&id, &op, &mode))
		got[id+" "+op] = mode
	}
	must(t, rows.Err())
	for _, id := range []string{"alone", "failed", "g1", "g2"} {
		if got[id+" INSERT"] != "on" {
			t.Errorf("intent %s was committed with synchronous_commit %q, want on", id, got[id+" INSERT"])
		}
		if got[id+" SETTLE"] != "off" {
			t.Errorf("the settlement of %s was committed with synchronous_commit %q, want off", id, got[id+" SETTLE"])
		}
	}
	if len(got) != 8 {
		t.Errorf("recorded %v, want one intent insert and one settlement insert per intent (no update of an intent)", got)
	}
}
