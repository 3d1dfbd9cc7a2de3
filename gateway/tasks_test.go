package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// taskGateway is a gateway on memstore with a settable clock where
// alice's danger needs an operator's approval; runs counts its runs.
func taskGateway(t *testing.T) (g *gateway.Gateway, clock *atomic.Int64, runs *atomic.Int64) {
	t.Helper()
	return taskGatewayAnswering(t, func() (*tool.Result, error) { return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil })
}

// taskGatewayAnswering is taskGateway with danger answering what answer
// returns.
func taskGatewayAnswering(t *testing.T, answer func() (*tool.Result, error)) (g *gateway.Gateway, clock *atomic.Int64, runs *atomic.Int64) {
	t.Helper()
	return taskGatewayOn(t, memstore.New(), answer)
}

// taskGatewayOn is taskGatewayAnswering on store st.
func taskGatewayOn(t *testing.T, st gateway.Store, answer func() (*tool.Result, error)) (g *gateway.Gateway, clock *atomic.Int64, runs *atomic.Int64) {
	t.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}, Approve: []string{"danger"}}, {Caller: "bob", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	clock, runs = new(atomic.Int64), new(atomic.Int64)
	clock.Store(time.Now().UnixNano())
	g = gateway.New(&gateway.Options{Store: st, Policy: rules, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	err = g.Register(context.Background(), tool.Tool{Name: "danger", InputSchema: json.RawMessage(`{"type":"object"}`),
		Backend: tool.BackendFunc(func(context.Context, *tool.Call) (*tool.Result, error) {
			runs.Add(1)
			return answer()
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
// (no answer recorded) is reported orphaned once its lease lapsed, with
// the answer the journal settled the call with, as the runner got it:
// the result, or the error of a failure or of an uncertain outcome of a
// known class (malformed_result, timeout, cancelled). Only a call whose outcome the journal does not know ends
// with the uncertain-call error. Before the lease lapsed it is running.
func TestTaskOrphaned(t *testing.T) {
	cases := []struct {
		name    string
		backend func() (*tool.Result, error)
		want    func(t *testing.T, o *gateway.Orphan, live *gateway.CallResult, liveErr error)
	}{
		{"result", func() (*tool.Result, error) { return &tool.Result{Content: json.RawMessage(`{"ok" : true}`)}, nil },
			func(t *testing.T, o *gateway.Orphan, live *gateway.CallResult, _ error) {
				if o.Unknown || o.Err != nil || o.Result == nil || string(o.Result.Result) != string(live.Result) || o.Result.IsError || o.Result.CallID != live.CallID {
					t.Errorf("orphan %+v: want the call's result %s", o, live.Result)
				}
			}},
		{"tool error result", func() (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`"no"`), IsError: true}, nil
		},
			func(t *testing.T, o *gateway.Orphan, live *gateway.CallResult, _ error) {
				if o.Unknown || o.Result == nil || !o.Result.IsError || string(o.Result.Result) != `"no"` {
					t.Errorf("orphan %+v: want the tool's error result", o)
				}
			}},
		{"failed", func() (*tool.Result, error) { return nil, fmt.Errorf("no such program: %w", tool.ErrNotStarted) },
			func(t *testing.T, o *gateway.Orphan, _ *gateway.CallResult, liveErr error) {
				wantSettledError(t, o, liveErr, tool.ClassExecutionFailure, store.StatusFailed)
			}},
		{"uncertain of a known class", func() (*tool.Result, error) { return nil, fmt.Errorf("half an answer: %w", tool.ErrMalformedResult) },
			func(t *testing.T, o *gateway.Orphan, _ *gateway.CallResult, liveErr error) {
				wantSettledError(t, o, liveErr, tool.ClassMalformedResult, store.StatusUncertain)
			}},
		{"refused result's violations", func() (*tool.Result, error) {
			return nil, &tool.InvalidResultError{Result: json.RawMessage(`{"structuredContent":{"a":"x"}}`), Err: &inputschema.ErrorList{Truncated: true, Errors: []*inputschema.Error{
				{Class: inputschema.ClassValidation, Stage: inputschema.StageArguments, Message: "want a number", Path: "$.a", Pointer: "/a", SchemaPointer: "/properties/a/type", Keyword: "type", Details: map[string]any{"type": "number"}},
				{Class: inputschema.ClassValidation, Stage: inputschema.StageArguments, Message: "missing", Path: "$", Pointer: "", SchemaPointer: "/required", Keyword: "required", Details: map[string]any{"property": "b"}},
			}}}
		},
			func(t *testing.T, o *gateway.Orphan, _ *gateway.CallResult, liveErr error) {
				wantSettledError(t, o, liveErr, tool.ClassInvalidResult, store.StatusSucceeded)
				wantSameError(t, o, liveErr)
				if len(o.Err.Errors) != 2 {
					t.Errorf("the rebuilt error lists %d violations, want the 2 of the live one", len(o.Err.Errors))
				}
			}},
		{"input required", func() (*tool.Result, error) {
			return nil, &tool.InputRequiredError{Server: "up", Requests: map[string]tool.InputRequest{"k": {Method: "elicitation/create", Params: json.RawMessage(`{}`)}}, State: "s"}
		},
			func(t *testing.T, o *gateway.Orphan, _ *gateway.CallResult, liveErr error) {
				wantSettledError(t, o, liveErr, tool.ClassInputRequired, store.StatusFailed)
				wantSameError(t, o, liveErr)
			}},
		{"login required", func() (*tool.Result, error) { return nil, loginError{} },
			func(t *testing.T, o *gateway.Orphan, _ *gateway.CallResult, liveErr error) {
				wantSettledError(t, o, liveErr, tool.ClassExecutionFailure, store.StatusFailed)
				// The URL is the live answer's only: the rebuilt one names
				// what it withheld.
				if _, has := o.Err.Details["authorization_url"]; has {
					t.Errorf("the rebuilt error carries the login URL: %v", o.Err.Details)
				}
				if w := fmt.Sprint(o.Err.Details["withheld"]); w != "[authorization_server authorization_url]" {
					t.Errorf("details.withheld = %s, want the names of the live answer's details", w)
				}
			}},
		{"unknown outcome", func() (*tool.Result, error) { return nil, errors.New("the connection broke") },
			func(t *testing.T, o *gateway.Orphan, _ *gateway.CallResult, liveErr error) {
				var live *gateway.Error
				errors.As(liveErr, &live)
				if !o.Unknown || o.Result != nil || o.Err == nil || o.Err.Class != tool.ClassUnknownOutcome || o.Err.CallID != live.CallID ||
					o.Err.Details["status"] != string(store.StatusUncertain) || o.Err.Details["run_by"] != "r-dead" {
					t.Errorf("orphan %+v (%+v): want the uncertain-call error naming call %s and its runner", o, o.Err, live.CallID)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, clock, runs := taskGatewayAnswering(t, tc.backend)
			ctx := context.Background()
			tk, res, err := runByDeadRunner(t, g)
			if v, _ := g.GetTask(ctx, "alice", tk.ID); v.Orphaned != nil {
				t.Errorf("orphaned at once: %+v", v.Orphaned)
			}
			clock.Add(int64(31 * time.Second))
			v, gerr := g.GetTask(ctx, "alice", tk.ID)
			if gerr != nil || v.Orphaned == nil {
				t.Fatalf("GetTask after 31s = %+v, %v: want orphaned", v, gerr)
			}
			callID := ""
			if res != nil {
				callID = res.CallID
			} else if ge := (*gateway.Error)(nil); errors.As(err, &ge) {
				callID = ge.CallID
			}
			if callID == "" || v.Orphaned.CallID != callID {
				t.Errorf("orphan of call %q, want the call run, %q", v.Orphaned.CallID, callID)
			}
			tc.want(t, v.Orphaned, res, err)
			if runs.Load() != 1 {
				t.Errorf("runs %d", runs.Load())
			}
		})
	}
}

// runByDeadRunner opens alice's task, approves it, claims it for the
// runner r-dead and runs its call, which settles; r-dead then "dies"
// before EndTask (nothing records the task's answer). It returns the task
// and the live call's answer.
func runByDeadRunner(t *testing.T, g *gateway.Gateway) (*store.Task, *gateway.CallResult, error) {
	t.Helper()
	ctx := context.Background()
	tk, _ := openTask(t, g)
	if _, err := g.DecideApproval(ctx, tk.ApprovalID, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	v, _ := g.GetTask(ctx, "alice", tk.ID)
	if won, err := g.ClaimTask(ctx, v, "r-dead"); !won || err != nil {
		t.Fatalf("claim = %v, %v", won, err)
	}
	tk.RunBy = "r-dead"
	res, err := g.RunTask(ctx, tk, gateway.CallRequest{})
	return tk, res, err
}

// wantSettledError checks that o is the error the live call got (liveErr):
// its class, message and call, with the settlement's status.
func wantSettledError(t *testing.T, o *gateway.Orphan, liveErr error, class tool.Class, status store.Status) {
	t.Helper()
	var live *gateway.Error
	if !errors.As(liveErr, &live) || live.Class != class {
		t.Fatalf("the live call's error %v: want class %s", liveErr, class)
	}
	if o.Unknown || o.Result != nil || o.Err == nil || o.Err.Class != live.Class || o.Err.Message != live.Message ||
		o.Err.CallID != live.CallID || o.Err.Tool != live.Tool || o.Err.Step != live.Step || o.Err.Details["status"] != string(status) {
		t.Errorf("orphan %+v (%+v): want the live call's error %+v", o, o.Err, live)
	}
}

// TestTaskOrphanedAfterRestart: on the durable store, the task of a
// runner that died after its call settled with a refused result, read by
// the next process on the same folder, answers with the live call's
// error, every violation included.
func TestTaskOrphanedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	s1, err := sqlite.Open(dir, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g, clock, _ := taskGatewayOn(t, s1, func() (*tool.Result, error) {
		return nil, &tool.InvalidResultError{Result: json.RawMessage(`{"structuredContent":{"a":"x"}}`), Err: &inputschema.Error{
			Class: inputschema.ClassValidation, Stage: inputschema.StageArguments, Message: "want a number", Path: "$.a", Pointer: "/a", SchemaPointer: "/properties/a/type", Keyword: "type", Details: map[string]any{"type": "number"}}}
	})
	ctx := context.Background()
	tk, _, liveErr := runByDeadRunner(t, g)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	g2, clock2, _ := taskGatewayOn(t, openSQLite(t, dir), nil)
	clock2.Store(clock.Load() + int64(31*time.Second))
	v, err := g2.GetTask(ctx, "alice", tk.ID)
	if err != nil || v.Orphaned == nil {
		t.Fatalf("GetTask after the restart = %+v, %v: want orphaned", v, err)
	}
	wantSettledError(t, v.Orphaned, liveErr, tool.ClassInvalidResult, store.StatusSucceeded)
	wantSameError(t, v.Orphaned, liveErr)
}

// wantSameError checks that o's error is, in its wire form, the live
// call's (liveErr): what a client polling the task would read.
func wantSameError(t *testing.T, o *gateway.Orphan, liveErr error) {
	t.Helper()
	var live *gateway.Error
	errors.As(liveErr, &live)
	want, _ := json.Marshal(live)
	got, _ := json.Marshal(o.Err)
	if string(got) != string(want) {
		t.Errorf("the rebuilt error\n%s\nwant the live one\n%s", got, want)
	}
}

// loginError is an upstream's answer to a caller with no account
// connected (as backend/upstream's LoginRequiredError): nothing ran, and
// its details are for the caller's eyes only.
type loginError struct{}

func (loginError) Error() string { return "connect an account first" }
func (loginError) Unwrap() error { return tool.ErrNotStarted }
func (loginError) ErrorDetails() map[string]any {
	return map[string]any{"authorization_url": "https://login.example/?state=secret", "authorization_server": "up"}
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
