package gateway_test

// Settlement: what is known about a call's outcome decides its status, its
// error class and whether its budget is released.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

func TestSettlementClasses(t *testing.T) {
	cases := []struct {
		name       string
		fn         tool.BackendFunc
		timeout    time.Duration
		maxResult  int
		class      tool.Class
		status     store.Status
		budgetHeld int64
	}{
		{
			name: "not started",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return nil, fmt.Errorf("exec: no such program: %w", tool.ErrNotStarted)
			},
			class: tool.ClassExecutionFailure, status: store.StatusFailed, budgetHeld: 0,
		},
		{
			name: "plain error",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return nil, errors.New("broken pipe")
			},
			class: tool.ClassUnknownOutcome, status: store.StatusUncertain, budgetHeld: 1,
		},
		{
			name: "timeout",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			timeout: 50 * time.Millisecond,
			class:   tool.ClassTimeout, status: store.StatusUncertain, budgetHeld: 1,
		},
		{
			name: "result not JSON",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return &tool.Result{Content: json.RawMessage(`{"ok":tru`)}, nil
			},
			class: tool.ClassMalformedResult, status: store.StatusUncertain, budgetHeld: 1,
		},
		{
			name: "two JSON values",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return &tool.Result{Content: json.RawMessage(`{} {}`)}, nil
			},
			class: tool.ClassMalformedResult, status: store.StatusUncertain, budgetHeld: 1,
		},
		{
			name: "empty result",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return &tool.Result{}, nil
			},
			class: tool.ClassMalformedResult, status: store.StatusUncertain, budgetHeld: 1,
		},
		{
			name: "nil result",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return nil, nil
			},
			class: tool.ClassMalformedResult, status: store.StatusUncertain, budgetHeld: 1,
		},
		{
			name: "backend reports malformed",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return nil, fmt.Errorf("stdout: %w", tool.ErrMalformedResult)
			},
			class: tool.ClassMalformedResult, status: store.StatusUncertain, budgetHeld: 1,
		},
		{
			name: "result over the limit",
			fn: func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return &tool.Result{Content: json.RawMessage(`"` + strings.Repeat("a", 200) + `"`)}, nil
			},
			maxResult: 100,
			// It ran: the journal says succeeded with the refusal recorded
			// (gateway/steps.go), and the budget is spent.
			class: tool.ClassResourceConflict, status: store.StatusSucceeded, budgetHeld: 1,
		},
	}
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				f := newFixture(t, mk, config{MaxResultBytes: tc.maxResult, Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
				note := f.tool("note", tc.fn, func(tl *tool.Tool) { tl.Timeout = tc.timeout })
				start := time.Now()
				res, err := f.call("alice", "note", `{"text":"x"}`)
				if res != nil {
					t.Errorf("a result was returned: %s", res.Result)
				}
				ge := gwErr(t, err, tc.class)
				// The timeout case's backend returns only when its context
				// ends: the timeout class proves the deadline ended it (no
				// wall-clock bound, which a loaded machine could break).
				if tc.timeout > 0 && time.Since(start) < tc.timeout {
					t.Errorf("returned before the %v deadline", tc.timeout)
				}
				if ge.CallID == "" {
					t.Fatal("no call id on an error after commit")
				}
				in := f.intent(ge.CallID)
				if in.Status != tc.status || in.ErrorClass != string(tc.class) || in.SettledAt.IsZero() {
					t.Errorf("intent status %s class %q settled %v, want %s %s", in.Status, in.ErrorClass, in.SettledAt, tc.status, tc.class)
				}
				if got := f.used("caller", "alice"); got != tc.budgetHeld {
					t.Errorf("budget held %d, want %d", got, tc.budgetHeld)
				}
				if note.Count() != 1 {
					t.Errorf("backend invoked %d times", note.Count())
				}
				ev := stepsOf(t, f.log.Events(t))
				inOrder(t, ev, "validate", "authorize", "approve", "commit", "settle")
				last := ev[len(ev)-1]
				if last["step"] != "settle" || last["outcome"] != string(tc.class) || last["status"] != string(tc.status) {
					t.Errorf("last audit event %v", last)
				}
			})
		}
	})
}

func TestCallerCancelsDuringInvocation(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		started := make(chan struct{})
		note := f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-started
			cancel()
		}()
		_, err := f.g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "note", Arguments: json.RawMessage(`{"text":"x"}`)})
		ge := gwErr(t, err, tool.ClassCancelled)
		in := f.intent(ge.CallID)
		// Settled although the caller's context is gone.
		if in.Status != store.StatusUncertain || in.ErrorClass != string(tool.ClassCancelled) {
			t.Errorf("intent %s %s, want uncertain cancelled", in.Status, in.ErrorClass)
		}
		if f.used("caller", "alice") != 1 || note.Count() != 1 {
			t.Error("budget released or backend not invoked once")
		}
		for _, c := range f.st.Calls() {
			if c.Method == "Settle" && c.Args[2] != nil {
				t.Errorf("Settle was given the caller's cancelled context (%v): a store honouring it would leave the intent started", c.Args[2])
			}
		}
	})
}

// A caller that is gone before the intent is committed gets cancelled: no
// intent, no invocation, and not a store failure.
func TestCallerCancelledBeforeCommit(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		note := f.tool("note", nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := f.g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "note", Arguments: json.RawMessage(`{"text":"x"}`)})
		gwErr(t, err, tool.ClassCancelled)
		if note.Count() != 0 {
			t.Error("a cancelled call was invoked")
		}
		if len(f.intents()) != 0 || f.totalUsed() != 0 {
			t.Error("a cancelled call left an intent or a reservation")
		}
	})
}

func TestToolLevelErrorIsAResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		content := `{"error":"file not found"}`
		f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(content), IsError: true}, nil
		})
		res, err := f.call("alice", "note", `{"text":"x"}`)
		if err != nil {
			t.Fatalf("a tool-level error came back as a Go error: %v", err)
		}
		if !res.IsError || string(res.Result) != content {
			t.Errorf("result %+v (%s)", res, res.Result)
		}
		in := f.intent(res.CallID)
		if in.Status != store.StatusSucceeded || in.ErrorClass != "" {
			t.Errorf("intent %s %q, want succeeded", in.Status, in.ErrorClass)
		}
		if f.used("caller", "alice") != 1 {
			t.Error("budget not kept")
		}
	})
}

// The gateway never re-invokes a settled call on its own: a second, distinct
// call is a new intent.
func TestEveryInvocationHasItsOwnIntent(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		note := f.tool("note", nil)
		ids := map[string]bool{}
		for range 5 {
			res, err := f.call("alice", "note", `{"text":"same"}`)
			if err != nil {
				t.Fatal(err)
			}
			ids[res.CallID] = true
		}
		calls := note.Calls()
		for _, c := range calls {
			if !ids[c.CallID] {
				t.Errorf("backend call %s has no returned call id", c.CallID)
			}
			if f.intent(c.CallID).Status != store.StatusSucceeded {
				t.Errorf("intent %s not succeeded", c.CallID)
			}
		}
		if len(ids) != 5 || len(calls) != 5 || len(f.intents()) != 5 {
			t.Errorf("%d ids, %d invocations, %d intents; want 5 each", len(ids), len(calls), len(f.intents()))
		}
	})
}

// The intent is durable before the backend runs: the backend itself can read
// it, started, from the store.
func TestIntentCommittedBeforeInvocation(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		var f *fixture
		seen := make(chan *store.Intent, 1)
		f = newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		f.tool("note", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			in, err := f.raw.GetIntent(ctx, c.CallID)
			if err != nil {
				return nil, err
			}
			seen <- in
			return &tool.Result{Content: json.RawMessage(`true`)}, nil
		})
		res, err := f.call("alice", "note", `{"text":"x"}`)
		if err != nil {
			t.Fatal(err)
		}
		in := <-seen
		if in.CallID != res.CallID || in.Status != store.StatusStarted || in.Incarnation != f.raw.Incarnation() {
			t.Errorf("during invocation the intent was %+v, want started by this incarnation", in)
		}
	})
}

// TestJournalRecordsClient: the MCP client's name/version and protocol
// version a call came with are kept in its journal entry, through its
// settlement (issue 24); a call without them records none.
func TestJournalRecordsClient(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		f.tool("note", nil)
		res, err := f.do(gateway.CallRequest{Caller: "alice", Tool: "note", Arguments: json.RawMessage(`{"text":"hi"}`),
			ClientInfo: "claude-code/2.1.0", ProtocolVersion: "2026-07-28"})
		if err != nil {
			t.Fatal(err)
		}
		in := f.intent(res.CallID)
		if in.Status != store.StatusSucceeded || in.ClientInfo != "claude-code/2.1.0" || in.ProtocolVersion != "2026-07-28" {
			t.Errorf("journal entry %+v: want succeeded, client claude-code/2.1.0, protocol 2026-07-28", in)
		}
		res, err = f.call("alice", "note", `{"text":"again"}`)
		if err != nil {
			t.Fatal(err)
		}
		if in := f.intent(res.CallID); in.ClientInfo != "" || in.ProtocolVersion != "" {
			t.Errorf("a call without a client: client %q, protocol %q; want none", in.ClientInfo, in.ProtocolVersion)
		}
	})
}
