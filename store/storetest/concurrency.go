package storetest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// Many goroutines against one store. Each test asserts what holds under
// every interleaving: exact counts of winners, invariants between what was
// committed and the budget held.

// parallel runs fn(0..n-1) in n goroutines released together, and returns
// their errors by index.
func parallel(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// winners returns the indexes whose error is nil.
func winners(errs []error) []int {
	var out []int
	for i, err := range errs {
		if err == nil {
			out = append(out, i)
		}
	}
	return out
}

func testConcQuota(f *fixture) {
	t := f.t
	const n, quota = 64, 20
	reqs := make([]*store.CommitRequest, n)
	for i := range reqs {
		reqs[i] = req(f.intent("alice", "note"), res("caller", "alice", quota, 1))
	}
	errs := parallel(n, func(i int) error {
		existing, err := f.s.CommitIntent(f.ctx, reqs[i])
		if err == nil && existing != nil {
			return fmt.Errorf("success with an existing intent %s", existing.CallID)
		}
		return err
	})
	won := winners(errs)
	if len(won) != quota {
		t.Errorf("%d of %d commits succeeded against quota %d, want exactly %d", len(won), n, quota, quota)
	}
	committed := map[string]bool{}
	for i, err := range errs {
		if err == nil {
			committed[reqs[i].Intent.CallID] = true
			continue
		}
		// Each reservation is 1 and the quota is never exceeded, so a
		// refusal sees the quota full.
		wantBudgetError(t, "commit "+reqs[i].Intent.CallID, err,
			store.BudgetError{Scope: "caller", Key: "alice", Used: quota, Requested: 1, Quota: quota})
		f.absent(reqs[i].Intent.CallID)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: quota})
	list, err := f.s.ListIntents(f.ctx, store.IntentFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(won) {
		t.Errorf("%d intents in the journal, %d commits succeeded", len(list), len(won))
	}
	for _, in := range list {
		if !committed[in.CallID] || in.Status != store.StatusStarted {
			t.Errorf("journal holds %s (%s), not one of the successful commits", in.CallID, in.Status)
		}
	}
}

// Two scopes per commit (caller quota 6, four sessions of quota 2 each):
// under every interleaving exactly 6 commits succeed (fewer would leave a
// session with room, and its remaining commits would have fit), no session
// holds more than 2, and no refused commit leaves a partial reservation.
func testConcTwoScopes(f *fixture) {
	t := f.t
	const n, sessions, callerQuota, sessionQuota = 48, 4, 6, 2
	reqs := make([]*store.CommitRequest, n)
	for i := range reqs {
		in := f.intent("alice", "note")
		in.Session = fmt.Sprintf("s%d", i%sessions)
		reqs[i] = req(in, res("caller", "alice", callerQuota, 1), res("session", in.Session, sessionQuota, 1))
	}
	errs := parallel(n, func(i int) error {
		_, err := f.s.CommitIntent(f.ctx, reqs[i])
		return err
	})
	perSession := map[string]int64{}
	for i, err := range errs {
		if err == nil {
			perSession[reqs[i].Intent.Session]++
			continue
		}
		var be *store.BudgetError
		if !errors.As(err, &be) {
			t.Errorf("commit %d: %v, want a BudgetError", i, err)
			continue
		}
		if be.Used+be.Requested <= be.Quota {
			t.Errorf("commit %d refused although it fits: %v", i, be)
		}
		f.absent(reqs[i].Intent.CallID)
	}
	if got := len(winners(errs)); got != callerQuota {
		t.Errorf("%d commits succeeded, want exactly %d", got, callerQuota)
	}
	want := map[usageKey]int64{{"caller", "alice"}: int64(len(winners(errs)))}
	for s, c := range perSession {
		if c > sessionQuota {
			t.Errorf("session %s got %d commits, quota %d", s, c, sessionQuota)
		}
		want[usageKey{"session", s}] = c
	}
	f.wantUsage(want)
}

func testConcSameKey(f *fixture) {
	t := f.t
	const n = 16
	reqs := make([]*store.CommitRequest, n)
	for i := range reqs {
		in := f.intent("alice", "note")
		in.IdempotencyKey = "same"
		reqs[i] = req(in, res("caller", "alice", 100, 1))
	}
	existing := make([]*store.Intent, n)
	errs := parallel(n, func(i int) error {
		var err error
		existing[i], err = f.s.CommitIntent(f.ctx, reqs[i])
		return err
	})
	won := winners(errs)
	if len(won) != 1 {
		t.Fatalf("%d commits with one idempotency key succeeded, want exactly 1: %v", len(won), errs)
	}
	winner := reqs[won[0]].Intent
	for i, err := range errs {
		if i == won[0] {
			continue
		}
		wantErr(t, "concurrent commit with the same key", err, store.ErrDuplicateKey)
		if existing[i] == nil || existing[i].CallID != winner.CallID {
			t.Errorf("loser %d got existing %v, want the winner %s", i, existing[i], winner.CallID)
		}
		f.absent(reqs[i].Intent.CallID)
	}
	got, err := f.s.GetIntentByKey(f.ctx, "alice", "same")
	if err != nil {
		t.Fatal(err)
	}
	wantIntent(t, got, f.stored(winner))
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})
}

func testConcApprovalOnce(f *fixture) {
	t := f.t
	const n = 16
	in := f.intent("alice", "danger")
	a := f.approved(in)
	reqs := make([]*store.CommitRequest, n)
	for i := range reqs {
		c := in
		c.CallID = fmt.Sprintf("%s-%02d", in.CallID, i)
		reqs[i] = &store.CommitRequest{Intent: c, ApprovalID: a.ID, Reservations: []budget.Reservation{res("caller", "alice", 100, 1)}}
	}
	errs := parallel(n, func(i int) error {
		_, err := f.s.CommitIntent(f.ctx, reqs[i])
		return err
	})
	won := winners(errs)
	if len(won) != 1 {
		t.Fatalf("%d commits consumed one approval, want exactly 1: %v", len(won), errs)
	}
	for i, err := range errs {
		if i != won[0] {
			wantErr(t, "concurrent use of a consumed approval", err, store.ErrApprovalUnavailable)
			f.absent(reqs[i].Intent.CallID)
		}
	}
	if got := f.getApproval(a.ID); got.ConsumedBy != reqs[won[0]].Intent.CallID {
		t.Errorf("ConsumedBy = %q, want the winner %s", got.ConsumedBy, reqs[won[0]].Intent.CallID)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})
}

func testConcDecideOnce(f *fixture) {
	t := f.t
	const n = 16
	a := f.approval(f.intent("alice", "danger"))
	decisions := make([]store.ApprovalDecision, n)
	for i := range decisions {
		decisions[i] = store.ApprovalDecision{Approve: i%2 == 0, By: fmt.Sprintf("reviewer-%02d", i), At: f.base.Add(ms)}
	}
	errs := parallel(n, func(i int) error { return f.s.DecideApproval(f.ctx, a.ID, decisions[i]) })
	won := winners(errs)
	if len(won) != 1 {
		t.Fatalf("%d decisions on one request succeeded, want exactly 1: %v", len(won), errs)
	}
	for i, err := range errs {
		if i != won[0] {
			wantErr(t, "concurrent second decision", err, store.ErrAlreadyDecided)
		}
	}
	d := decisions[won[0]]
	want := store.ApprovalDenied
	if d.Approve {
		want = store.ApprovalApproved
	}
	if got := f.getApproval(a.ID); got.Status != want || got.DecidedBy != d.By {
		t.Errorf("approval %s by %q, want the winner's: %s by %q", got.Status, got.DecidedBy, want, d.By)
	}
}

func testConcSettleOnce(f *fixture) {
	t := f.t
	const n = 15
	statuses := []store.Status{store.StatusSucceeded, store.StatusFailed, store.StatusUncertain}
	in := f.commitNew("alice", "note", res("caller", "alice", 100, 1))
	errs := parallel(n, func(i int) error {
		return f.s.Settle(f.ctx, in.CallID, store.Settlement{Status: statuses[i%3], ErrorClass: fmt.Sprint(i), At: f.base.Add(ms)})
	})
	won := winners(errs)
	if len(won) != 1 {
		t.Fatalf("%d settlements of one intent succeeded, want exactly 1: %v", len(won), errs)
	}
	for i, err := range errs {
		if i != won[0] {
			wantErr(t, "concurrent second settlement", err, store.ErrNotStarted)
		}
	}
	got := f.get(in.CallID)
	if want := statuses[won[0]%3]; got.Status != want || got.ErrorClass != fmt.Sprint(won[0]) {
		t.Errorf("intent %s (%s), want the winner's %s (%d)", got.Status, got.ErrorClass, want, won[0])
	}
	held := int64(1)
	if store.Released(got.Status) {
		held = 0
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: held})
}

func testConcResolveOnce(f *fixture) {
	t := f.t
	const n = 16
	in := f.uncertain("alice", "note", res("caller", "alice", 100, 1))
	errs := parallel(n, func(i int) error {
		return f.s.ResolveIntent(f.ctx, in.CallID, i%2 == 0, fmt.Sprintf("operator-%02d", i), f.base.Add(hour))
	})
	won := winners(errs)
	if len(won) != 1 {
		t.Fatalf("%d resolutions of one intent succeeded, want exactly 1: %v", len(won), errs)
	}
	for i, err := range errs {
		if i != won[0] {
			wantErr(t, "concurrent second resolution", err, store.ErrNotUncertain)
		}
	}
	got := f.get(in.CallID)
	want, held := store.StatusExecuted, int64(1)
	if won[0]%2 != 0 {
		want, held = store.StatusNotExecuted, 0
	}
	if got.Status != want || got.ResolvedBy != fmt.Sprintf("operator-%02d", won[0]) {
		t.Errorf("intent %s by %q, want the winner's %s by operator-%02d", got.Status, got.ResolvedBy, want, won[0])
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: held})
}

// Releases racing reservations lose no update: whatever the interleaving,
// the budget held equals the started intents' reservations, within quota.
func testConcReleaseWhileReserving(f *fixture) {
	t := f.t
	const quota, fresh = 5, 20
	var held []string
	for range quota {
		held = append(held, f.commitNew("alice", "note", res("caller", "alice", quota, 1)).CallID)
	}
	reqs := make([]*store.CommitRequest, fresh)
	for i := range reqs {
		reqs[i] = req(f.intent("alice", "note"), res("caller", "alice", quota, 1))
	}
	errs := parallel(quota+fresh, func(i int) error {
		if i < quota {
			return f.s.Settle(f.ctx, held[i], store.Settlement{Status: store.StatusFailed, At: f.base.Add(ms)})
		}
		_, err := f.s.CommitIntent(f.ctx, reqs[i-quota])
		return err
	})
	var committed int64
	for i, err := range errs {
		switch {
		case i < quota && err != nil:
			t.Errorf("Settle(%s, failed): %v", held[i], err)
		case i >= quota && err == nil:
			committed++
		case i >= quota:
			wantBudgetError(t, "commit while releasing", err,
				store.BudgetError{Scope: "caller", Key: "alice", Used: quota, Requested: 1, Quota: quota})
			f.absent(reqs[i-quota].Intent.CallID)
		}
	}
	if committed > quota {
		t.Errorf("%d commits succeeded with at most %d released", committed, quota)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: committed})
	started, err := f.s.ListIntents(f.ctx, store.IntentFilter{Status: store.StatusStarted})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(started)) != committed {
		t.Errorf("%d started intents, %d commits succeeded", len(started), committed)
	}
}

// testConcApprovalOpenedOnce: many identical calls opening their approval
// request at once (replicas, or a hook beside serve) open exactly one, and
// every one of them gets it back; the cap holds under the same race.
func testConcApprovalOpenedOnce(f *fixture) {
	t := f.t
	const n = 16
	in := f.intent("alice", "danger")
	type opened struct {
		got     *store.Approval
		created bool
	}
	out := make([]opened, n)
	errs := parallel(n, func(i int) error {
		got, created, err := f.s.OpenApproval(f.ctx, f.newApproval(in, fmt.Sprintf("apr-race-%02d", i)), 0)
		out[i] = opened{got, created}
		return err
	})
	var created []int
	for i, err := range errs {
		if err != nil {
			t.Fatalf("OpenApproval %d: %v", i, err)
		}
		if out[i].created {
			created = append(created, i)
		}
	}
	if len(created) != 1 {
		t.Fatalf("%d of %d identical calls opened a request, want exactly 1", len(created), n)
	}
	want := out[created[0]].got.ID
	for i := range out {
		if out[i].got.ID != want {
			t.Errorf("call %d got request %s, want the one opened, %s", i, out[i].got.ID, want)
		}
	}
	// Different calls of one caller racing past a cap of 3: exactly 3.
	calls := make([]*store.Approval, n)
	for i := range calls {
		calls[i] = f.newApproval(f.intent("bob", "danger"), fmt.Sprintf("apr-cap-%02d", i))
	}
	errs = parallel(n, func(i int) error {
		_, _, err := f.s.OpenApproval(f.ctx, calls[i], 3)
		return err
	})
	if won := winners(errs); len(won) != 3 {
		t.Errorf("%d requests opened under a cap of 3", len(won))
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, store.ErrTooManyPending) {
			t.Errorf("a request refused at the cap: %v, want ErrTooManyPending", err)
		}
	}
}
