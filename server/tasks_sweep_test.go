package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// Tasks acted on without their client polling, by the sweeper of every
// server (Options.TaskSweep), across replicas sharing one store: two
// gateways and servers on one SQLite file, each with its own Store (its
// own incarnation), as two serve processes have.

// replica is one gateway and server on a shared store folder.
type replica struct {
	st  *sqlite.Store
	g   *gateway.Gateway
	url string
	// block, when set, holds the tool's run until it is closed (the
	// runner's call in progress); entered is closed when a run starts.
	block   chan struct{}
	entered chan struct{}
	// fail, when set, is the error the tool's run answers.
	fail error
}

// newReplicas opens n replicas on one store folder; every replica's tool
// counts its runs in runs. sweep is each server's TaskSweep, lease each
// gateway's TaskLease.
func newReplicas(t *testing.T, n int, sweep, lease time.Duration, runs *atomic.Int64) []*replica {
	t.Helper()
	dir := t.TempDir()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}, Approve: []string{"danger"}}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*replica
	for i := range n {
		st, err := sqlite.Open(dir, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r := &replica{st: st, entered: make(chan struct{}, 16)}
		r.g = runnerGateway(t, st, rules, lease, r, runs, i)
		srv := server.New(r.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}, TaskSweep: sweep})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		})
		r.url = httpServer(t, srv).URL
		out = append(out, r)
	}
	return out
}

// runnerGateway is a gateway on st with danger registered (the same
// definition everywhere, as replicas of one configuration have), counting
// its runs in runs and reporting them on r.entered, held while r.block is
// set and open.
func runnerGateway(t *testing.T, st store.Store, rules policy.Policy, lease time.Duration, r *replica, runs *atomic.Int64, i int) *gateway.Gateway {
	t.Helper()
	g := gateway.New(&gateway.Options{Store: st, Policy: rules, TaskLease: lease, Operators: []string{"ops"},
		Logger: slog.New(slog.DiscardHandler)})
	err := g.Register(context.Background(), tool.Tool{Name: "danger", Description: "Needs an approval.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"target":{"type":"string"}},"required":["target"]}`),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			runs.Add(1)
			r.entered <- struct{}{}
			if r.block != nil {
				select {
				case <-r.block:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if r.fail != nil {
				return nil, r.fail
			}
			return &tool.Result{Content: json.RawMessage(`{"done":` + string(c.Arguments) + `,"by":` + fmt.Sprint(i) + `}`)}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// openTaskOn makes alice's call of danger on r, declaring the extension,
// and returns the task's and the approval request's ids.
func openTaskOn(t *testing.T, r *replica, target string) (id, aid string) {
	t.Helper()
	res := post(t, r.url, "tok-alice", "tools/call", map[string]any{"name": "danger", "arguments": map[string]any{"target": target}, "_meta": modernMeta(tasksCaps)}, nil)
	if res.Error != nil || str(res.Result["resultType"]) != "task" {
		t.Fatalf("tools/call = %+v, %v: want a CreateTaskResult", res.Result, res.Error)
	}
	var meta map[string]any
	json.Unmarshal(res.Result["_meta"], &meta)
	aid, _ = meta[server.MetaTaskApprovalID].(string)
	return str(res.Result["taskId"]), aid
}

// waitTask waits, without any tasks/get, until the store shows task id
// in status want.
func waitTask(t *testing.T, st store.Store, id string, want store.TaskStatus, within time.Duration) *store.Task {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		tk, err := st.GetTask(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status == want {
			return tk
		}
		if tk.Status.Terminal() {
			t.Fatalf("task %s ended %s (outcome %s), want %s", id, tk.Status, tk.Outcome, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s (run by %q) after %s, want %s", id, tk.Status, tk.RunBy, within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTaskRunsOnDecisionWithoutPolling: tasks opened on either of two
// replicas, approved through a third gateway on the same store (as the
// CLI does from its own process), run without any tasks/get, each exactly
// once across the replicas, and the answer is there for the client's
// next tasks/get on either.
func TestTaskRunsOnDecisionWithoutPolling(t *testing.T) {
	var runs atomic.Int64
	reps := newReplicas(t, 3, 20*time.Millisecond, time.Minute, &runs)
	cli := reps[2] // the deciding process; it serves too, as a third replica
	const n = 6
	ids := make([]string, n)
	for i := range n {
		var aid string
		ids[i], aid = openTaskOn(t, reps[i%2], fmt.Sprintf("t%d", i))
		if _, err := cli.g.DecideApproval(context.Background(), aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		tk := waitTask(t, reps[0].st, id, store.TaskCompleted, 20*time.Second)
		if !strings.Contains(string(tk.Outcome), fmt.Sprintf(`"t%d"`, i)) || strings.Contains(string(tk.Outcome), `"isError":true`) {
			t.Errorf("task %d's outcome %s: want its call's result", i, tk.Outcome)
		}
	}
	// Sweeps go on: nothing runs again.
	time.Sleep(200 * time.Millisecond)
	if got := runs.Load(); got != n {
		t.Errorf("the tool ran %d times for %d tasks, want once each", got, n)
	}
	for i, id := range ids {
		r := post(t, reps[(i+1)%2].url, "tok-alice", "tasks/get", map[string]any{"taskId": id, "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": id})
		if r.Error != nil || str(r.Result["status"]) != "completed" {
			t.Errorf("tasks/get of task %d on the other replica = %+v, %+v: want completed", i, r.Result, r.Error)
		}
	}
}

// TestTaskRunsAtOnceOnDecisionInProcess: a decision taken through the
// server's own gateway (as its console does) wakes its sweeper: the task
// runs without waiting for the next sweep (an hour away here) nor for a
// tasks/get.
func TestTaskRunsAtOnceOnDecisionInProcess(t *testing.T) {
	var runs atomic.Int64
	r := newReplicas(t, 1, time.Hour, time.Minute, &runs)[0]
	id, aid := openTaskOn(t, r, "decided here")
	if _, err := r.g.DecideApproval(context.Background(), aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelConsole}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the approved task did not run within 10s of its decision: the sweeper waited for its next tick")
	}
	tk := waitTask(t, r.st, id, store.TaskCompleted, 10*time.Second)
	if !strings.Contains(string(tk.Outcome), `"decided here"`) || runs.Load() != 1 {
		t.Errorf("task outcome %s, runs %d: want its call's result, once", tk.Outcome, runs.Load())
	}
}

// TestTaskTakenOverWhenRunnerDiedBeforeIntent: a runner that claimed a
// task and died before its call's intent was written ran nothing; once
// its lease lapsed another replica's sweeper takes the claim over and
// runs the call, once; the runner that lost the claim cannot run it
// again nor write over the answer.
func TestTaskTakenOverWhenRunnerDiedBeforeIntent(t *testing.T) {
	var runs atomic.Int64
	const lease = 3 * time.Second // the check within it must hold on a loaded machine
	reps := newReplicas(t, 2, 20*time.Millisecond, lease, &runs)
	a, b := reps[0], reps[1]
	ctx := context.Background()
	// The dead runner: a gateway that claims the task, then nothing.
	dead := runnerGateway(t, a.st, mustRules(t), lease, &replica{entered: make(chan struct{}, 16)}, &runs, 9)
	id, aid := openTaskOn(t, a, "lost runner")
	v, err := dead.GetTask(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	// Claim it as the dead runner would, before the decision reaches the
	// sweepers: decide on a copy of the view.
	v.Approval.Status = store.ApprovalApproved
	if won, err := dead.ClaimTask(ctx, v, "runner-dead"); !won || err != nil {
		t.Fatalf("the dead runner's claim = %v, %v", won, err)
	}
	if _, err := b.g.DecideApproval(ctx, aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	// Within the lease, nobody runs it.
	time.Sleep(50 * time.Millisecond)
	if tk, _ := b.st.GetTask(ctx, id); tk.Status != store.TaskRunning || tk.RunBy != "runner-dead" || runs.Load() != 0 {
		t.Fatalf("within the lease: %+v, runs %d; want it left to its runner", tk, runs.Load())
	}
	tk := waitTask(t, b.st, id, store.TaskCompleted, 20*time.Second)
	if tk.RunBy == "runner-dead" || !strings.Contains(string(tk.Outcome), `"lost runner"`) {
		t.Errorf("task after the lease lapsed: run by %q, outcome %s; want another runner's result", tk.RunBy, tk.Outcome)
	}
	if runs.Load() != 1 {
		t.Fatalf("the tool ran %d times, want once", runs.Load())
	}
	// The runner that was taken for gone comes back: its call is not run
	// again, and its answer does not replace the one recorded.
	old := *v
	old.Task.RunBy = "runner-dead"
	_, err = dead.RunTask(ctx, &old.Task, gateway.CallRequest{})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Class != tool.ClassUnknownOutcome || runs.Load() != 1 {
		t.Errorf("the late runner's RunTask = %v (runs %d): want unknown_outcome, no run", err, runs.Load())
	}
	if err := dead.EndTask(ctx, id, "runner-dead", true, []byte(`{"code":1,"message":"late"}`)); !errors.Is(err, store.ErrTaskMoved) {
		t.Errorf("the late runner's EndTask = %v, want ErrTaskMoved", err)
	}
}

// TestTaskFailsUncertainWhenRunnerDiedAfterIntent: a runner whose process
// goes away (its store closed: its lock released, as at a process's
// death) while its call runs, after the intent was written, left a call
// whose outcome is unknown: the other replica's sweeper marks the call
// uncertain in the journal (recovery) and fails the task with the
// uncertain-call error; the call is never run again.
func TestTaskFailsUncertainWhenRunnerDiedAfterIntent(t *testing.T) {
	var runs atomic.Int64
	reps := newReplicas(t, 2, 20*time.Millisecond, 300*time.Millisecond, &runs)
	a, b := reps[0], reps[1]
	ctx := context.Background()
	// The dying runner: a gateway of its own on a store of its own, the
	// only one to claim the task (the sweepers see it running, under its
	// lease).
	dyingStore, err := sqlite.Open(a.st.Dir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	dyingRep := &replica{entered: make(chan struct{}, 16), block: make(chan struct{})}
	defer close(dyingRep.block)
	dying := runnerGateway(t, dyingStore, mustRules(t), 300*time.Millisecond, dyingRep, &runs, 9)
	id, aid := openTaskOn(t, a, "dies mid-call")
	v, err := dying.GetTask(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	v.Approval.Status = store.ApprovalApproved // claimed as the decision lands
	if won, err := dying.ClaimTask(ctx, v, "runner-dying"); !won || err != nil {
		t.Fatalf("claim = %v, %v", won, err)
	}
	if _, err := b.g.DecideApproval(ctx, aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	go dying.RunTask(context.Background(), &v.Task, gateway.CallRequest{})
	select {
	case <-dyingRep.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the runner's call did not start")
	}
	// While its runner lives and renews the lease, the task is left alone.
	time.Sleep(time.Second)
	if tk, _ := b.st.GetTask(ctx, id); tk.Status != store.TaskRunning || tk.RunBy != "runner-dying" {
		t.Fatalf("while its runner lives: %+v; want it running by runner-dying", tk)
	}
	dyingStore.Close() // the process is gone: its lock with it
	tk := waitTask(t, b.st, id, store.TaskFailed, 20*time.Second)
	var rpcErr struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	var shape struct {
		Class   string         `json:"class"`
		CallID  string         `json:"call_id"`
		Details map[string]any `json:"details"`
	}
	if err := json.Unmarshal(tk.Outcome, &rpcErr); err != nil || json.Unmarshal(rpcErr.Data, &shape) != nil ||
		shape.Class != string(tool.ClassUnknownOutcome) || shape.CallID == "" || shape.Details["status"] != string(store.StatusUncertain) {
		t.Fatalf("the failed task's outcome %s: want the uncertain-call error with its call", tk.Outcome)
	}
	in, err := b.st.GetIntent(ctx, shape.CallID)
	if err != nil || in.Status != store.StatusUncertain || in.ApprovalID != aid {
		t.Fatalf("the call in the journal: %+v, %v; want it uncertain, for an operator", in, err)
	}
	r := post(t, b.url, "tok-alice", "tasks/get", map[string]any{"taskId": id, "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": id})
	if r.Error != nil || str(r.Result["status"]) != "failed" || !strings.Contains(string(r.Result["error"]), "unknown_outcome") {
		t.Errorf("tasks/get = %+v, %+v: want failed with the uncertain-call error", r.Result, r.Error)
	}
	time.Sleep(200 * time.Millisecond)
	if runs.Load() != 1 {
		t.Errorf("the tool ran %d times, want once: never re-run", runs.Load())
	}
}

// TestTaskEndsWithSettledAnswerWhenRunnerDiedAfterSettling: a runner
// whose process goes away after its call settled in the journal, before
// it recorded the task's answer, left a call whose outcome the journal
// knows: the other replica's sweeper ends the task with that answer, as
// the runner would have (completed with the call's result, or with the
// error result of the failure it settled with), not as unknown_outcome;
// the call is never run again.
func TestTaskEndsWithSettledAnswerWhenRunnerDiedAfterSettling(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail error
		want func(t *testing.T, res map[string]any, callID string)
	}{
		{"result", nil, func(t *testing.T, res map[string]any, callID string) {
			if res["isError"] == true || fmt.Sprint(res["structuredContent"]) != "map[by:9 done:map[target:settled, then died]]" {
				t.Errorf("the task's result %v: want the call's result", res)
			}
		}},
		{"failure", fmt.Errorf("no such program: %w", tool.ErrNotStarted), func(t *testing.T, res map[string]any, callID string) {
			sc, _ := res["structuredContent"].(map[string]any)
			if res["isError"] != true || sc["class"] != string(tool.ClassExecutionFailure) || sc["call_id"] != callID ||
				!strings.Contains(fmt.Sprint(sc["message"]), "no such program") {
				t.Errorf("the task's result %v: want the error result of the failure the call settled with", res)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			const lease = 300 * time.Millisecond
			reps := newReplicas(t, 2, 20*time.Millisecond, lease, &runs)
			a, b := reps[0], reps[1]
			ctx := context.Background()
			// The runner that dies: a gateway on a store of its own, the only
			// one to claim the task.
			dyingStore, err := sqlite.Open(a.st.Dir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			dying := runnerGateway(t, dyingStore, mustRules(t), lease, &replica{entered: make(chan struct{}, 16), fail: tc.fail}, &runs, 9)
			id, aid := openTaskOn(t, a, "settled, then died")
			v, err := dying.GetTask(ctx, "alice", id)
			if err != nil {
				t.Fatal(err)
			}
			v.Approval.Status = store.ApprovalApproved // claimed as the decision lands
			if won, err := dying.ClaimTask(ctx, v, "runner-dying"); !won || err != nil {
				t.Fatalf("claim = %v, %v", won, err)
			}
			if _, err := b.g.DecideApproval(ctx, aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
				t.Fatal(err)
			}
			// The call runs and settles; the process goes away before EndTask.
			res, callErr := dying.RunTask(ctx, &v.Task, gateway.CallRequest{})
			dyingStore.Close()
			apr, err := b.st.GetApproval(ctx, aid)
			if err != nil || apr.ConsumedBy == "" {
				t.Fatalf("approval %+v, %v: want it used by the call", apr, err)
			}
			in, err := b.st.GetIntent(ctx, apr.ConsumedBy)
			if err != nil || in.Status == store.StatusStarted || in.Status == store.StatusUncertain {
				t.Fatalf("the call in the journal: %+v, %v (run: %v, %v); want it settled", in, err, res, callErr)
			}
			tk := waitTask(t, b.st, id, store.TaskCompleted, 20*time.Second)
			var out map[string]any
			if err := json.Unmarshal(tk.Outcome, &out); err != nil {
				t.Fatalf("the task's outcome %s: %v", tk.Outcome, err)
			}
			if meta, _ := out["_meta"].(map[string]any); meta[server.MetaCallID] != in.CallID {
				t.Errorf("the task's outcome %s: want it to name call %s", tk.Outcome, in.CallID)
			}
			tc.want(t, out, in.CallID)
			r := post(t, b.url, "tok-alice", "tasks/get", map[string]any{"taskId": id, "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": id})
			if r.Error != nil || str(r.Result["status"]) != "completed" {
				t.Errorf("tasks/get = %+v, %+v: want completed", r.Result, r.Error)
			}
			if runs.Load() != 1 {
				t.Errorf("the tool ran %d times, want once: never re-run", runs.Load())
			}
		})
	}
}

func mustRules(t *testing.T) policy.Policy {
	t.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}, Approve: []string{"danger"}}})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}
