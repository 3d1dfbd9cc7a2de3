package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// taskGateway is a gateway on memstore with a settable clock where
// alice's danger needs an operator's approval; runs counts its runs.
func taskGateway(t *testing.T) (g *gateway.Gateway, clock *atomic.Int64, runs *atomic.Int64) {
	t.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}, Approve: []string{"danger"}}, {Caller: "bob", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	clock, runs = new(atomic.Int64), new(atomic.Int64)
	clock.Store(time.Now().UnixNano())
	g = gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	err = g.Register(context.Background(), tool.Tool{Name: "danger", InputSchema: json.RawMessage(`{"type":"object"}`),
		Backend: tool.BackendFunc(func(context.Context, *tool.Call) (*tool.Result, error) {
			runs.Add(1)
			return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	return g, clock, runs
}

// openTask makes alice's call, which needs an approval, and its task.
func openTask(t *testing.T, g *gateway.Gateway) (*store.Task, gateway.CallRequest) {
	t.Helper()
	cr := gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"n":1}`), ClientInfo: "c/1", ProtocolVersion: "2026-07-28"}
	_, err := g.Call(context.Background(), cr)
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Class != tool.ClassApprovalRequired {
		t.Fatalf("call = %v, want approval_required", err)
	}
	tk, err := g.OpenTask(context.Background(), cr, ge.Details["approval_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return tk, cr
}

func TestTaskClaimedAndRunOnce(t *testing.T) {
	g, _, runs := taskGateway(t)
	ctx := context.Background()
	tk, cr := openTask(t, g)
	if again, err := g.OpenTask(ctx, cr, tk.ApprovalID); err != nil || again.ID != tk.ID {
		t.Errorf("a second OpenTask of the request = %v, %v: want the same task", again, err)
	}
	v, err := g.GetTask(ctx, "alice", tk.ID)
	if err != nil || v.Task.Status != store.TaskWaiting || v.Approval.Status != store.ApprovalPending || len(v.Hints) == 0 {
		t.Fatalf("GetTask = %+v, %v: want waiting on a pending request, with hints", v, err)
	}
	if _, err := g.GetTask(ctx, "bob", tk.ID); !errors.Is(err, gateway.ErrActionNotFound) {
		t.Errorf("bob's GetTask = %v, want not found", err)
	}
	if won, err := g.ClaimTask(ctx, v, "r1"); won || err != nil {
		t.Errorf("claim of a pending task = %v, %v: want no claim", won, err)
	}
	if _, err := g.DecideApproval(ctx, tk.ApprovalID, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	// Many pollers, one claim.
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			v, err := g.GetTask(ctx, "alice", tk.ID)
			if err != nil {
				t.Error(err)
				return
			}
			if won, err := g.ClaimTask(ctx, v, "r"); err != nil {
				t.Error(err)
			} else if won {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claims won, want 1", wins.Load())
	}
	res, err := g.RunTask(ctx, tk, gateway.CallRequest{})
	if err != nil || res.IsError || runs.Load() != 1 {
		t.Fatalf("RunTask = %+v, %v (runs %d): want one run", res, err, runs.Load())
	}
	// The request is used: running it again never runs the call; the
	// answer is the first call's outcome, the journal's (a second runner
	// is one that took the claim of a runner taken for gone, which may
	// have run it), not a refusal that reads as "it did not run".
	_, err = g.RunTask(ctx, tk, gateway.CallRequest{})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Class != tool.ClassUnknownOutcome || ge.CallID != res.CallID || runs.Load() != 1 {
		t.Errorf("second RunTask = %v (runs %d): want unknown_outcome naming call %s, no run", err, runs.Load(), res.CallID)
	}
	if err := g.EndTask(ctx, tk.ID, "r", false, []byte(`{"content":[]}`)); err != nil {
		t.Fatal(err)
	}
	if v, _ := g.GetTask(ctx, "alice", tk.ID); v.Task.Status != store.TaskCompleted || v.Orphaned != nil {
		t.Errorf("after EndTask: %+v", v.Task)
	}
}

// TestTaskOrphaned: a task whose runner settled the call and then died
// (no answer recorded) is reported orphaned once the settlement is old,
// with the journal's call; before that it is running.
func TestTaskOrphaned(t *testing.T) {
	g, clock, runs := taskGateway(t)
	ctx := context.Background()
	tk, _ := openTask(t, g)
	if _, err := g.DecideApproval(ctx, tk.ApprovalID, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	v, _ := g.GetTask(ctx, "alice", tk.ID)
	if won, err := g.ClaimTask(ctx, v, "r-dead"); !won || err != nil {
		t.Fatalf("claim = %v, %v", won, err)
	}
	res, err := g.RunTask(ctx, tk, gateway.CallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := g.GetTask(ctx, "alice", tk.ID); v.Orphaned != nil {
		t.Errorf("orphaned at once: %v", v.Orphaned)
	}
	clock.Add(int64(31 * time.Second))
	v, err = g.GetTask(ctx, "alice", tk.ID)
	if err != nil || v.Orphaned == nil || v.Orphaned.Class != tool.ClassUnknownOutcome || v.Orphaned.CallID != res.CallID {
		t.Fatalf("GetTask after 31s = %+v, %v: want orphaned, naming call %s", v, err, res.CallID)
	}
	if runs.Load() != 1 {
		t.Errorf("runs %d", runs.Load())
	}
}

func TestTaskCancelWithdraws(t *testing.T) {
	g, _, runs := taskGateway(t)
	ctx := context.Background()
	tk, _ := openTask(t, g)
	if ok, err := g.CancelTask(ctx, "bob", tk.ID); ok || !errors.Is(err, gateway.ErrActionNotFound) {
		t.Errorf("bob's cancel = %v, %v: want not found", ok, err)
	}
	if ok, err := g.CancelTask(ctx, "alice", tk.ID); !ok || err != nil {
		t.Fatalf("cancel = %v, %v", ok, err)
	}
	a, err := g.GetApproval(ctx, tk.ApprovalID)
	if err != nil || a.Status != store.ApprovalDenied || a.DecidedBy != "alice" {
		t.Errorf("approval after cancel: %+v, %v: want denied by alice", a, err)
	}
	v, _ := g.GetTask(ctx, "alice", tk.ID)
	if won, _ := g.ClaimTask(ctx, v, "r"); won || v.Task.Status != store.TaskCancelled || runs.Load() != 0 {
		t.Errorf("a cancelled task was claimed (%v) or ran (%d): %+v", won, runs.Load(), v.Task)
	}
}
