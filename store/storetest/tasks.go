package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// Tasks: one per approval request, moving only forward, each move made
// once whatever the concurrency (two replicas polling one task must not
// both claim it to run the call).

// task records a new waiting task for a fresh approval.
func (f *fixture) task(caller string) *store.Task {
	f.t.Helper()
	in := f.intent(caller, "write")
	a := f.approvalAt(in, f.base, f.base.Add(hour))
	tk := &store.Task{
		ID: fmt.Sprintf("task-%03d", f.n), Caller: caller, ApprovalID: a.ID, Tool: in.Tool,
		Arguments: []byte(`{"path":"x","content":"é"}`), ClientInfo: "client/1", ProtocolVersion: "2026-07-28",
		CreatedAt: f.base, UpdatedAt: f.base, ExpiresAt: f.base.Add(2 * hour),
	}
	if existing, err := f.s.CreateTask(f.ctx, tk); err != nil || existing != nil {
		f.t.Fatalf("CreateTask(%s) = %v, %v", tk.ID, existing, err)
	}
	return tk
}

func testTaskRoundTrip(f *fixture) {
	tk := f.task("alice")
	got, err := f.s.GetTask(f.ctx, tk.ID)
	if err != nil {
		f.t.Fatalf("GetTask: %v", err)
	}
	if got.ID != tk.ID || got.Caller != "alice" || got.ApprovalID != tk.ApprovalID || got.Tool != tk.Tool ||
		got.ClientInfo != "client/1" || got.ProtocolVersion != "2026-07-28" || got.Status != store.TaskWaiting ||
		got.RunBy != "" || len(got.Outcome) != 0 {
		f.t.Errorf("GetTask = %+v, want the task as created, waiting", got)
	}
	if !bytes.Equal(got.Arguments, tk.Arguments) {
		f.t.Errorf("Arguments = %q, want %q", got.Arguments, tk.Arguments)
	}
	if !got.CreatedAt.Equal(tk.CreatedAt) || !got.UpdatedAt.Equal(tk.UpdatedAt) || !got.ExpiresAt.Equal(tk.ExpiresAt) {
		f.t.Errorf("times = %v %v %v, want %v %v %v", got.CreatedAt, got.UpdatedAt, got.ExpiresAt, tk.CreatedAt, tk.UpdatedAt, tk.ExpiresAt)
	}
	if _, err := f.s.GetTask(f.ctx, "task-none"); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("GetTask(unknown) = %v, want ErrNotFound", err)
	}
}

func testTaskOnePerApproval(f *fixture) {
	tk := f.task("alice")
	again := *tk
	again.ID = "task-other"
	existing, err := f.s.CreateTask(f.ctx, &again)
	if !errors.Is(err, store.ErrDuplicateKey) || existing == nil || existing.ID != tk.ID {
		f.t.Fatalf("CreateTask(same approval) = %v, %v; want the first task and ErrDuplicateKey", existing, err)
	}
	if _, err := f.s.GetTask(f.ctx, "task-other"); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("the refused task was written: GetTask = %v", err)
	}
}

func testTaskMoves(f *fixture) {
	tk := f.task("alice")
	at := f.base.Add(5 * ms)
	// A move from a status the task is not in, or one the contract does
	// not allow, changes nothing.
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskRunning, To: store.TaskCompleted, Outcome: []byte(`{}`), At: at}); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("running->completed of a waiting task = %v, want ErrTaskMoved", err)
	}
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskCompleted, Outcome: []byte(`{}`), At: at}); !errors.Is(err, store.ErrTaskMove) {
		f.t.Errorf("waiting->completed = %v, want ErrTaskMove", err)
	}
	if err := f.s.UpdateTask(f.ctx, "task-none", store.TaskUpdate{From: store.TaskWaiting, To: store.TaskCancelled, At: at}); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("update of an unknown task = %v, want ErrNotFound", err)
	}
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-1", LeaseUntil: at.Add(time.Minute), At: at}); err != nil {
		f.t.Fatalf("claim: %v", err)
	}
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-2", LeaseUntil: at.Add(time.Minute), At: at}); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("second claim = %v, want ErrTaskMoved", err)
	}
	got, err := f.s.GetTask(f.ctx, tk.ID)
	if err != nil || got.Status != store.TaskRunning || got.RunBy != "inc-1" || !got.UpdatedAt.Equal(at) || !got.LeaseUntil.Equal(at.Add(time.Minute)) {
		f.t.Fatalf("after the claim: %+v, %v; want running by inc-1 at %v, its lease a minute on", got, err, at)
	}
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-2", At: at}); !errors.Is(err, store.ErrTaskMove) {
		f.t.Errorf("a claim without a lease = %v, want ErrTaskMove", err)
	}
	outcome := []byte(`{"content":[{"type":"text","text":"é"}]}`)
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskRunning, To: store.TaskCompleted, Outcome: outcome, At: at.Add(ms)}); err != nil {
		f.t.Fatalf("complete: %v", err)
	}
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskRunning, To: store.TaskFailed, Outcome: []byte(`{"code":1}`), At: at.Add(2 * ms)}); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("second end = %v, want ErrTaskMoved", err)
	}
	got, err = f.s.GetTask(f.ctx, tk.ID)
	if err != nil || got.Status != store.TaskCompleted || !bytes.Equal(got.Outcome, outcome) || got.RunBy != "inc-1" {
		f.t.Errorf("after the end: %+v, %v; want completed with its outcome", got, err)
	}
	outcome[0] = 'x' // the store keeps its own copy
	if got, _ := f.s.GetTask(f.ctx, tk.ID); got != nil && got.Outcome[0] != '{' {
		f.t.Errorf("the stored outcome changed with the caller's slice")
	}

	// Cancelled while waiting: nothing more can happen to it.
	tk2 := f.task("bob")
	if err := f.s.UpdateTask(f.ctx, tk2.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskCancelled, At: at}); err != nil {
		f.t.Fatalf("cancel: %v", err)
	}
	if err := f.s.UpdateTask(f.ctx, tk2.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-1", LeaseUntil: at.Add(time.Minute), At: at}); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("claim after cancel = %v, want ErrTaskMoved", err)
	}
	if got, err := f.s.GetTask(f.ctx, tk2.ID); err != nil || got.Status != store.TaskCancelled || got.RunBy != "" {
		f.t.Errorf("cancelled task = %+v, %v", got, err)
	}
}

// testConcTaskClaimedOnce races claims of one task: exactly one wins.
func testConcTaskClaimedOnce(f *fixture) {
	tk := f.task("alice")
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning,
				RunBy: fmt.Sprintf("inc-%d", i), LeaseUntil: f.base.Add(time.Minute), At: f.base.Add(ms)})
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			f.t.Errorf("claims %d and %d both won", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, store.ErrTaskMoved):
			f.t.Errorf("claim %d: %v, want nil or ErrTaskMoved", i, err)
		}
	}
	if won < 0 {
		f.t.Fatal("no claim won")
	}
	if got, err := f.s.GetTask(f.ctx, tk.ID); err != nil || got.RunBy != fmt.Sprintf("inc-%d", won) {
		f.t.Errorf("task = %+v, %v; want run by the winner inc-%d", got, err, won)
	}
}

// testTaskPrune: Prune deletes the tasks whose ExpiresAt is before its
// cut, and only those.
func testTaskPrune(f *fixture) {
	old := f.task("alice") // expires at base+2h
	f.task("alice")        // the same
	r, err := f.s.Prune(f.ctx, f.base.Add(time.Hour))
	if err != nil || r.Tasks != 0 {
		f.t.Fatalf("Prune before expiry = %+v, %v: want no task pruned", r, err)
	}
	r, err = f.s.Prune(f.ctx, f.base.Add(3*time.Hour))
	if err != nil || r.Tasks != 2 {
		f.t.Fatalf("Prune after expiry = %+v, %v: want both tasks pruned", r, err)
	}
	if _, err := f.s.GetTask(f.ctx, old.ID); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("a pruned task is still there: %v", err)
	}
}

// testTaskLease: a running task's claim is its runner's while its lease
// runs: renewed by it, taken over by another runner only once it lapsed
// (of several, one), ended only by the runner that holds it.
func testTaskLease(f *fixture) {
	tk := f.task("alice")
	at := f.base.Add(5 * ms)
	lease := at.Add(time.Minute)
	claim := store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-1", LeaseUntil: lease, At: at}
	if err := f.s.UpdateTask(f.ctx, tk.ID, claim); err != nil {
		f.t.Fatalf("claim: %v", err)
	}
	move := func(u store.TaskUpdate) error { return f.s.UpdateTask(f.ctx, tk.ID, u) }
	running := func(by, holder string, until, at time.Time) store.TaskUpdate {
		return store.TaskUpdate{From: store.TaskRunning, To: store.TaskRunning, RunBy: by, Holder: holder, LeaseUntil: until, At: at}
	}
	if err := move(running("inc-2", "inc-1", at.Add(2*time.Minute), at.Add(time.Second))); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("a take-over before the lease lapsed = %v, want ErrTaskMoved", err)
	}
	if err := move(running("inc-2", "inc-9", at.Add(2*time.Minute), lease.Add(time.Second))); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("a take-over from a runner that does not hold it = %v, want ErrTaskMoved", err)
	}
	// Renewed by its runner, at any time before or after its lease.
	renewed := at.Add(3 * time.Minute)
	if err := move(running("inc-1", "inc-1", renewed, lease.Add(time.Second))); err != nil {
		f.t.Fatalf("renew: %v", err)
	}
	if err := move(running("inc-2", "inc-1", renewed.Add(time.Minute), lease.Add(2*time.Second))); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("a take-over of a renewed lease = %v, want ErrTaskMoved", err)
	}
	if due, err := f.s.DueTasks(f.ctx, renewed.Add(-time.Second), 0); err != nil || len(due) != 0 {
		f.t.Errorf("DueTasks before the lease lapsed = %v, %v; want none", due, err)
	}
	due, err := f.s.DueTasks(f.ctx, renewed, 0)
	if err != nil || len(due) != 1 || due[0].ID != tk.ID || due[0].RunBy != "inc-1" || !due[0].LeaseUntil.Equal(renewed) {
		f.t.Fatalf("DueTasks once the lease lapsed = %+v, %v; want the task run by inc-1", due, err)
	}
	// Lapsed: of several runners taking over at once, one wins.
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = move(running(fmt.Sprintf("inc-%d", 10+i), "inc-1", renewed.Add(time.Hour), renewed.Add(time.Second)))
		})
	}
	wg.Wait()
	won := ""
	for i, err := range errs {
		switch {
		case err == nil && won != "":
			f.t.Errorf("take-overs %s and inc-%d both won", won, 10+i)
		case err == nil:
			won = fmt.Sprintf("inc-%d", 10+i)
		case !errors.Is(err, store.ErrTaskMoved):
			f.t.Errorf("take-over %d: %v, want nil or ErrTaskMoved", i, err)
		}
	}
	if won == "" {
		f.t.Fatal("no take-over won")
	}
	// The runner that lost it cannot end it; the one that holds it can.
	end := store.TaskUpdate{From: store.TaskRunning, To: store.TaskCompleted, Outcome: []byte(`{"late":true}`), Holder: "inc-1", At: renewed.Add(2 * time.Second)}
	if err := move(end); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("the end by the runner that lost the claim = %v, want ErrTaskMoved", err)
	}
	end.Holder, end.Outcome = won, []byte(`{"ok":true}`)
	if err := move(end); err != nil {
		f.t.Fatalf("the end by %s: %v", won, err)
	}
	got, err := f.s.GetTask(f.ctx, tk.ID)
	if err != nil || got.Status != store.TaskCompleted || got.RunBy != won || string(got.Outcome) != `{"ok":true}` {
		f.t.Errorf("after the end: %+v, %v; want completed by %s with its outcome", got, err, won)
	}
}

// testTaskDue: DueTasks lists the waiting tasks whose request is decided,
// expired or gone, and the running ones whose lease lapsed, oldest first;
// not the pending, the ended, nor those past their own expiry.
func testTaskDue(f *fixture) {
	at := f.base.Add(time.Second)
	pending := f.task("alice")
	decided := f.task("alice")
	f.decide(decided.ApprovalID, false)
	running := f.task("alice")
	f.decide(running.ApprovalID, true)
	if err := f.s.UpdateTask(f.ctx, running.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-1", LeaseUntil: at.Add(time.Minute), At: at}); err != nil {
		f.t.Fatal(err)
	}
	ended := f.task("alice")
	if err := f.s.UpdateTask(f.ctx, ended.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskCancelled, At: at}); err != nil {
		f.t.Fatal(err)
	}
	ids := func(now time.Time, limit int) []string {
		f.t.Helper()
		due, err := f.s.DueTasks(f.ctx, now, limit)
		if err != nil {
			f.t.Fatalf("DueTasks: %v", err)
		}
		var out []string
		for _, t := range due {
			out = append(out, t.ID)
		}
		return out
	}
	want := func(what string, got []string, want ...string) {
		f.t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			f.t.Errorf("DueTasks %s = %v, want %v", what, got, want)
		}
	}
	want("with one request decided", ids(at, 0), decided.ID)
	want("once a lease lapsed", ids(at.Add(time.Minute), 0), decided.ID, running.ID)
	want("limited to one", ids(at.Add(time.Minute), 1), decided.ID)
	// The pending request expires (an hour on): its task is due too.
	want("once the pending request expired", ids(f.base.Add(hour), 0), pending.ID, decided.ID, running.ID)
	// Past the tasks' own expiry (two hours on): none.
	want("past the tasks' expiry", ids(f.base.Add(2*hour), 0))
}
