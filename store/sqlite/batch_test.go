package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// oneBatch runs the writes of fns from concurrent goroutines so that the
// writer takes them all in one round: it holds the writer busy with a
// blocked write until every one of them is queued, then lets it go. It
// returns each write's error, in the order of fns.
func oneBatch(t *testing.T, s *Store, fns []func() error) []error {
	t.Helper()
	s.queueAlways = true // the writer, not a caller, holds the transaction
	release := make(chan struct{})
	blocked := make(chan struct{})
	var hold sync.WaitGroup
	hold.Go(func() {
		if err := s.write(context.Background(), func(w *wtx) error {
			close(blocked)
			<-release
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
	<-blocked
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(s.queue) < len(fns) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d writes queued", len(s.queue), len(fns))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	hold.Wait()
	wg.Wait()
	return errs
}

// TestBatchBudgetExact queues, for one transaction, more commits than a
// quota allows (some reserving twice from one budget), a repeated
// idempotency key and a commit naming an approval that does not exist: the
// budget checked in memory for the whole batch admits exactly the quota,
// each refusal says what the database holds, and budget_usage still equals
// the reservations held.
func TestBatchBudgetExact(t *testing.T) {
	s := openDir(t, t.TempDir())
	var log batchLog
	s.onBatch = log.record
	const quota = 10
	res := func(amount int64) budget.Reservation {
		return budget.Reservation{Scope: "caller", Key: "alice", Quota: quota, Amount: amount}
	}
	var fns []func() error
	var existing [2]*store.Intent
	for i := range 12 {
		rs := []budget.Reservation{res(1)}
		if i%3 == 0 {
			rs = append(rs, res(1)) // two reservations of one budget in one request
		}
		fns = append(fns, func() error {
			_, err := s.CommitIntent(context.Background(), intentReq(fmt.Sprintf("c%02d", i), "alice", rs...))
			return err
		})
	}
	for i := range 2 {
		fns = append(fns, func() error {
			r := intentReq(fmt.Sprintf("k%d", i), "bob", budget.Reservation{Scope: "caller", Key: "bob", Quota: 5, Amount: 1})
			r.Intent.IdempotencyKey = "same"
			var err error
			existing[i], err = s.CommitIntent(context.Background(), r)
			return err
		})
	}
	fns = append(fns, func() error {
		r := intentReq("appr", "carol", budget.Reservation{Scope: "caller", Key: "carol", Quota: 5, Amount: 1})
		r.ApprovalID = "no-such-approval"
		_, err := s.CommitIntent(context.Background(), r)
		return err
	})
	errs := oneBatch(t, s, fns)

	aliceUnits := int64(0)
	for i, err := range errs[:12] {
		var be *store.BudgetError
		switch {
		case err == nil:
			aliceUnits += map[bool]int64{true: 2, false: 1}[i%3 == 0]
		case errors.As(err, &be):
			if be.Used+be.Requested <= be.Quota || be.Used > quota {
				t.Errorf("c%02d refused with %+v: it fits", i, *be)
			}
			if _, gerr := s.GetIntent(context.Background(), fmt.Sprintf("c%02d", i)); !errors.Is(gerr, store.ErrNotFound) {
				t.Errorf("c%02d refused but its intent reads back: %v", i, gerr)
			}
		default:
			t.Errorf("c%02d: %v", i, err)
		}
	}
	// 12 requests of 16 units in all: the quota is reached, never passed
	// (the requests of one unit fill what two would not).
	if aliceUnits != quota {
		t.Errorf("alice reserved %d units in one batch, want the quota %d", aliceUnits, quota)
	}
	won, lost := 0, 1
	if errs[12] != nil {
		won, lost = 1, 0
	}
	if errs[12+won] != nil || !errors.Is(errs[12+lost], store.ErrDuplicateKey) {
		t.Errorf("repeated idempotency key: errors %v, %v; want one success and one ErrDuplicateKey", errs[12], errs[13])
	} else if existing[lost] == nil || existing[lost].CallID != fmt.Sprintf("k%d", won) {
		t.Errorf("the duplicate's existing intent is %+v, want k%d", existing[lost], won)
	}
	if !errors.Is(errs[14], store.ErrApprovalUnavailable) {
		t.Errorf("commit with an unknown approval: %v, want ErrApprovalUnavailable", errs[14])
	}
	usage, err := s.BudgetUsage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"alice": quota, "bob": 1}
	for _, u := range usage {
		if u.Used != want[u.Key] || u.Quota != map[string]int64{"alice": quota, "bob": 5}[u.Key] {
			t.Errorf("usage %+v, want used %d", u, want[u.Key])
		}
		delete(want, u.Key)
	}
	if len(want) != 0 {
		t.Errorf("no usage for %v (usage %+v)", want, usage)
	}
	checkUsageDerived(t, s)
	tx, reqs := log.total()
	if reqs != len(fns)+1 || tx > 2 {
		t.Errorf("%d requests in %d transactions (sizes %v), want the %d commits in one after the blocking write's", reqs, tx, log.sizes, len(fns))
	}
}

// TestBatchSettleGroup settles intents in one transaction: valid ones (one
// UPDATE for them all), then mixed with a repeated call id, an unknown one
// and one already settled, each of which must get its own answer while the
// others settle.
func TestBatchSettleGroup(t *testing.T) {
	s := openDir(t, t.TempDir())
	ctx := context.Background()
	const n = 20
	for i := range n {
		if _, err := s.CommitIntent(ctx, intentReq(fmt.Sprintf("c%02d", i), "alice")); err != nil {
			t.Fatal(err)
		}
	}
	var log batchLog
	s.onBatch = log.record
	settle := func(id string, st store.Status) func() error {
		return func() error {
			return s.Settle(ctx, id, store.Settlement{Status: st, Result: []byte(`{"id":"` + id + `"}`), ErrorClass: string(st), At: time.Now()})
		}
	}
	var fns []func() error
	for i := range 10 {
		st := store.StatusSucceeded
		if i%2 == 1 {
			st = store.StatusUncertain
		}
		fns = append(fns, settle(fmt.Sprintf("c%02d", i), st))
	}
	for i, err := range oneBatch(t, s, fns) {
		if err != nil {
			t.Errorf("settle c%02d: %v", i, err)
		}
	}
	if _, reqs := log.total(); reqs != len(fns)+1 {
		t.Errorf("batch sizes %v, want the %d settlements in one transaction", log.sizes, len(fns))
	}

	fns = fns[:0]
	for i := 10; i < n; i++ {
		fns = append(fns, settle(fmt.Sprintf("c%02d", i), store.StatusSucceeded))
	}
	fns = append(fns, settle("c15", store.StatusSucceeded), settle("nope", store.StatusSucceeded), settle("c03", store.StatusSucceeded))
	errs := oneBatch(t, s, fns)
	twice := 0
	for i, err := range errs[:10] {
		if err != nil && !(i == 5 && errors.Is(err, store.ErrNotStarted)) {
			t.Errorf("settle c%02d: %v", 10+i, err)
		}
		if err != nil {
			twice++
		}
	}
	if errs[10] != nil {
		twice++
		if !errors.Is(errs[10], store.ErrNotStarted) {
			t.Errorf("second settlement of c15: %v, want ErrNotStarted", errs[10])
		}
	}
	if twice != 1 {
		t.Errorf("c15 settled twice in one batch: %d refusals (%v, %v), want exactly 1", twice, errs[5], errs[10])
	}
	if !errors.Is(errs[11], store.ErrNotFound) {
		t.Errorf("settle of an unknown call: %v, want ErrNotFound", errs[11])
	}
	if !errors.Is(errs[12], store.ErrNotStarted) {
		t.Errorf("settle of a settled call: %v, want ErrNotStarted", errs[12])
	}
	for i := range n {
		id := fmt.Sprintf("c%02d", i)
		in, err := s.GetIntent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := store.StatusSucceeded
		if i < 10 && i%2 == 1 {
			want = store.StatusUncertain
		}
		if in.Status != want || string(in.Result) != `{"id":"`+id+`"}` || in.ErrorClass != string(want) || in.SettledAt.IsZero() {
			t.Errorf("%s: status %s result %s class %q settled %v; want %s with its own result", id, in.Status, in.Result, in.ErrorClass, in.SettledAt, want)
		}
	}
}

// The reservations column is JSON that SQLite reads back: scopes and keys
// of any characters come back as they were.
func TestReservationsEncoding(t *testing.T) {
	s := openDir(t, t.TempDir())
	keys := []string{"alice", `a"b\c`, "é\n\x01<&>", ""}
	var rs []budget.Reservation
	for _, k := range keys {
		rs = append(rs, budget.Reservation{Scope: "caller", Key: k, Quota: 10, Amount: 1})
	}
	if _, err := s.CommitIntent(context.Background(), intentReq("c1", "alice", rs...)); err != nil {
		t.Fatal(err)
	}
	rows, err := s.rdb.Query(`SELECT json_extract(j.value, '$[1]') FROM intents, json_each(intents.reservations) AS j ORDER BY j.key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", keys) {
		t.Errorf("keys read back %q, want %q", got, keys)
	}
}

// TestBatchBudgetsReadTogether commits, in one transaction, intents of
// several budgets, two with usage rows already (read by one statement,
// prefetch) and one without: each is checked against what the database
// holds, so alice's quota admits one more unit and not two.
func TestBatchBudgetsReadTogether(t *testing.T) {
	s := openDir(t, t.TempDir())
	ctx := context.Background()
	res := func(who string, quota int64) budget.Reservation {
		return budget.Reservation{Scope: "caller", Key: who, Quota: quota, Amount: 1}
	}
	for i := range 3 {
		if _, err := s.CommitIntent(ctx, intentReq(fmt.Sprint("a-before-", i), "alice", res("alice", 4))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CommitIntent(ctx, intentReq("c-before", "carol", res("carol", 9))); err != nil {
		t.Fatal(err)
	}
	var fns []func() error
	for i, who := range []string{"alice", "bob", "alice", "carol", "bob"} {
		quota := map[string]int64{"alice": 4, "bob": 9, "carol": 9}[who]
		fns = append(fns, func() error {
			_, err := s.CommitIntent(ctx, intentReq(fmt.Sprint("batch-", i), who, res(who, quota)))
			return err
		})
	}
	errs := oneBatch(t, s, fns)
	// The two alice commits queue in whatever order their goroutines ran:
	// one is admitted and the other refused at 4 used, either way round.
	admitted, refused := errs[0], errs[2]
	if admitted != nil {
		admitted, refused = refused, admitted
	}
	var be *store.BudgetError
	if admitted != nil || !errors.As(refused, &be) || be.Used != 4 {
		t.Errorf("alice's commits: %v, %v; want one admitted and the other refused at 4 used", errs[0], errs[2])
	}
	for _, i := range []int{1, 3, 4} {
		if errs[i] != nil {
			t.Errorf("batch-%d: %v", i, errs[i])
		}
	}
	usage, err := s.BudgetUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"alice": 4, "bob": 2, "carol": 2}
	for _, u := range usage {
		if u.Used != want[u.Key] {
			t.Errorf("usage %+v, want used %d", u, want[u.Key])
		}
		delete(want, u.Key)
	}
	if len(want) != 0 {
		t.Errorf("no usage for %v", want)
	}
	checkUsageDerived(t, s)
}
