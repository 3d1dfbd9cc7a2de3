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
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-1", At: at}); err != nil {
		f.t.Fatalf("claim: %v", err)
	}
	if err := f.s.UpdateTask(f.ctx, tk.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-2", At: at}); !errors.Is(err, store.ErrTaskMoved) {
		f.t.Errorf("second claim = %v, want ErrTaskMoved", err)
	}
	got, err := f.s.GetTask(f.ctx, tk.ID)
	if err != nil || got.Status != store.TaskRunning || got.RunBy != "inc-1" || !got.UpdatedAt.Equal(at) {
		f.t.Fatalf("after the claim: %+v, %v; want running by inc-1 at %v", got, err, at)
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
	if err := f.s.UpdateTask(f.ctx, tk2.ID, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskRunning, RunBy: "inc-1", At: at}); !errors.Is(err, store.ErrTaskMoved) {
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
				RunBy: fmt.Sprintf("inc-%d", i), At: f.base.Add(ms)})
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
