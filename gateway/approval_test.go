package gateway_test

// The approval step: a request bound to one exact call, decided once by
// someone other than the caller, used by one call, expiring.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pendingID makes a call that must be held for approval and returns the
// request id.
func pendingID(t *testing.T, f *fixture, caller, name, args string) string {
	t.Helper()
	_, err := f.call(caller, name, args)
	ge := gwErr(t, err, tool.ClassApprovalRequired)
	id, _ := ge.Details["approval_id"].(string)
	if id == "" {
		t.Fatalf("no approval_id in %v", ge.Details)
	}
	return id
}

func TestApprovalApproveThenConsumedByOneCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		args := `{"text":"rm -rf"}`
		id := pendingID(t, f, "alice", "danger", args)
		// Asking again while pending finds the same request, not a new one.
		if again := pendingID(t, f, "alice", "danger", args); again != id {
			t.Errorf("second pending call got request %s, want the same %s", again, id)
		}
		if n := len(f.approvals()); n != 1 {
			t.Errorf("%d approval requests, want 1", n)
		}
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		res, err := f.call("alice", "danger", args)
		if err != nil {
			t.Fatalf("the approved call failed: %v", err)
		}
		if danger.Count() != 1 {
			t.Errorf("backend invoked %d times, want 1", danger.Count())
		}
		a := f.approval(id)
		if a.Status != store.ApprovalApproved || a.DecidedBy != "bob" || a.ConsumedBy != res.CallID {
			t.Errorf("approval %+v, want approved by bob and consumed by %s", a, res.CallID)
		}
		// The approval is used up: the identical third call needs a new one.
		third := pendingID(t, f, "alice", "danger", args)
		if third == id {
			t.Error("the consumed approval was offered again")
		}
		if danger.Count() != 1 {
			t.Errorf("backend invoked %d times after the third call, want 1", danger.Count())
		}
	})
}

func TestApprovalSelfApprovalRefused(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		id := pendingID(t, f, "alice", "danger", `{"text":"x"}`)
		err := f.decide(id, true, "alice")
		if !errors.Is(err, store.ErrSelfApproval) {
			t.Fatalf("self-approval: %v, want ErrSelfApproval", err)
		}
		if a := f.approval(id); a.Status != store.ApprovalPending || a.DecidedBy != "" {
			t.Errorf("approval %+v changed after a refused self-approval", a)
		}
		if again := pendingID(t, f, "alice", "danger", `{"text":"x"}`); again != id {
			t.Errorf("request %s, want still %s", again, id)
		}
		if danger.Count() != 0 || len(f.intents()) != 0 {
			t.Error("the call ran")
		}
	})
}

func TestApprovalDenialStandsUntilExpiry(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		clock := newFakeClock()
		f := newFixture(t, mk, config{Clock: clock, Approvals: gateway.ApprovalOptions{Expire: 10 * time.Minute}})
		danger := f.tool("danger", nil)
		args := `{"text":"x"}`
		id := pendingID(t, f, "alice", "danger", args)
		if err := f.decide(id, false, "bob"); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			clock.Advance(time.Minute)
			_, err := f.call("alice", "danger", args)
			ge := gwErr(t, err, tool.ClassForbidden)
			if ge.Step != "approve" || ge.Details["approval_id"] != id || ge.Details["decided_by"] != "bob" {
				t.Errorf("retry %d: %+v", i, ge)
			}
		}
		if n := len(f.approvals()); n != 1 {
			t.Errorf("%d requests; a retry of a denied call must not ask again", n)
		}
		// Past the denial's expiry, the call may ask again.
		clock.Advance(10 * time.Minute)
		next := pendingID(t, f, "alice", "danger", args)
		if next == id {
			t.Error("the expired denial was reused")
		}
		if danger.Count() != 0 || len(f.intents()) != 0 || f.st.Count("CommitIntent") != 0 {
			t.Error("a denied call reached commit or the backend")
		}
	})
}

func TestApprovalForOtherArgumentsDoesNotCount(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		argsA, argsB := `{"text":"A"}`, `{"text":"B"}`
		idA := pendingID(t, f, "alice", "danger", argsA)
		if err := f.decide(idA, true, "bob"); err != nil {
			t.Fatal(err)
		}
		idB := pendingID(t, f, "alice", "danger", argsB)
		if idB == idA {
			t.Fatal("call B was given call A's approval")
		}
		if danger.Count() != 0 || f.approval(idA).ConsumedBy != "" {
			t.Fatal("call B ran or consumed A's approval")
		}
		// Same arguments, other member order and spacing: the same call, so
		// A's approval counts.
		res, err := f.call("alice", "danger", ` { "text" : "A" } `)
		if err != nil {
			t.Fatalf("call A (reformatted): %v", err)
		}
		if f.approval(idA).ConsumedBy != res.CallID {
			t.Error("call A did not consume its approval")
		}
	})
}

// An approval is for the numbers as the operator saw them (review 22 item
// 5): integers a double confuses, and 5 against 5.0, are other calls, so
// the approval of one is not used by the other.
func TestApprovalForAnotherNumberDoesNotCount(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		for _, p := range [][2]string{
			{`{"text":"A","n":1234567890123456789}`, `{"text":"A","n":1234567890123456800}`},
			{`{"text":"A","n":5}`, `{"text":"A","n":5.0}`},
		} {
			idA := pendingID(t, f, "alice", "danger", p[0])
			if err := f.decide(idA, true, "bob"); err != nil {
				t.Fatal(err)
			}
			if idB := pendingID(t, f, "alice", "danger", p[1]); idB == idA {
				t.Fatalf("%s was given the approval of %s", p[1], p[0])
			}
			if danger.Count() != 0 || f.approval(idA).ConsumedBy != "" {
				t.Fatalf("%s ran or consumed the approval of %s", p[1], p[0])
			}
		}
	})
}

func TestApprovalForOtherCallerOrDefinitionDoesNotCount(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Rules: []policy.Rule{
			{Caller: "alice", Allow: []string{"danger"}, Approve: []string{"danger"}},
			{Caller: "carol", Allow: []string{"danger"}, Approve: []string{"danger"}},
		}})
		f.tool("danger", nil)
		args := `{"text":"x"}`
		id := pendingID(t, f, "alice", "danger", args)
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		if other := pendingID(t, f, "carol", "danger", args); other == id {
			t.Error("carol's call used alice's approval")
		}
		// A second gateway on the same store whose danger has another
		// definition (description changed): alice's approval was for the old
		// definition.
		pr, _ := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"danger"}, Approve: []string{"danger"}}})
		g2 := gateway.New(&gateway.Options{Store: f.raw, Policy: pr})
		b2 := &recBackend{}
		if err := g2.Register(context.Background(), tool.Tool{Name: "danger", Description: "changed", InputSchema: json.RawMessage(noteSchema), Backend: b2.Backend()}); err != nil {
			t.Fatal(err)
		}
		_, err := g2.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(args)})
		ge := gwErr(t, err, tool.ClassApprovalRequired)
		if ge.Details["approval_id"] == id || b2.Count() != 0 {
			t.Error("an approval for another tool definition was used")
		}
		if f.approval(id).ConsumedBy != "" {
			t.Error("the approval was consumed")
		}
	})
}

func TestApprovalExpiry(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		t.Run("pending request expires", func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, mk, config{Clock: clock, Approvals: gateway.ApprovalOptions{Expire: 10 * time.Minute}})
			danger := f.tool("danger", nil)
			args := `{"text":"x"}`
			id := pendingID(t, f, "alice", "danger", args)
			a := f.approval(id)
			if want := clock.Now().Add(10 * time.Minute); !a.ExpiresAt.Equal(want) {
				t.Errorf("expires at %v, want %v", a.ExpiresAt, want)
			}
			clock.Advance(10*time.Minute + time.Second)
			// Expired requests cannot be decided...
			if err := f.decide(id, true, "bob"); !errors.Is(err, store.ErrApprovalExpired) {
				t.Errorf("deciding an expired request: %v, want ErrApprovalExpired", err)
			}
			// ...are listed as expired...
			for _, x := range f.approvals() {
				if x.ID == id && x.Status != store.ApprovalExpired {
					t.Errorf("listed as %s, want expired", x.Status)
				}
			}
			// ...and the call asks again with a new request (FindApproval
			// never returns an expired one).
			next := pendingID(t, f, "alice", "danger", args)
			if next == id {
				t.Error("the expired request was reused")
			}
			if danger.Count() != 0 {
				t.Error("backend invoked")
			}
		})
		t.Run("approved but expired before use", func(t *testing.T) {
			clock := newFakeClock()
			f := newFixture(t, mk, config{Clock: clock, Approvals: gateway.ApprovalOptions{Expire: 10 * time.Minute}})
			danger := f.tool("danger", nil)
			args := `{"text":"x"}`
			id := pendingID(t, f, "alice", "danger", args)
			clock.Advance(time.Minute)
			if err := f.decide(id, true, "bob"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(10 * time.Minute)
			next := pendingID(t, f, "alice", "danger", args)
			if next == id || danger.Count() != 0 || f.approval(id).ConsumedBy != "" {
				t.Error("an approval past its expiry was used")
			}
		})
		t.Run("expires while the call waits", func(t *testing.T) {
			// gateway/steps.go: a request that expires during the wait is
			// forbidden ("call again for a new one").
			// The clock is advanced only once the call is observed waiting
			// (its first read of the request in the wait loop), never after
			// a guessed delay. The wait is far longer than the test: only
			// the expiry can end it, and a wait that ran out would answer
			// approval_required, not forbidden.
			clock := newFakeClock()
			f := newFixture(t, mk, config{Clock: clock, Approvals: gateway.ApprovalOptions{Expire: 10 * time.Minute, PollInterval: 10 * time.Millisecond}})
			danger := f.tool("danger", nil)
			waiting := waitingSignal(f)
			wait := time.Hour
			go func() {
				<-waiting
				clock.Advance(11 * time.Minute)
			}()
			_, err := f.do(gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`), ApprovalWait: &wait})
			ge := gwErr(t, err, tool.ClassForbidden)
			if ge.Step != "approve" || ge.Details["approval_id"] == nil {
				t.Errorf("%+v", ge)
			}
			if danger.Count() != 0 {
				t.Error("backend invoked")
			}
		})
	})
}

func TestApprovalWait(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		t.Run("decided during the wait", func(t *testing.T) {
			// The decision is made once the call is observed waiting. The
			// wait is far longer than the test: a call that proceeds was
			// released by the decision, not by the wait running out (which
			// answers approval_required).
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{Wait: time.Hour, PollInterval: 20 * time.Millisecond}})
			danger := f.tool("danger", nil)
			waiting := waitingSignal(f)
			decided := make(chan error, 1)
			go func() {
				<-waiting
				as, err := f.raw.ListApprovals(context.Background(), store.ApprovalFilter{Status: store.ApprovalPending}, time.Now())
				if err != nil {
					decided <- err
					return
				}
				if len(as) != 1 {
					decided <- fmt.Errorf("the waiting call made %d pending requests, want 1", len(as))
					return
				}
				decided <- f.decide(as[0].ID, true, "bob")
			}()
			res, err := f.call("alice", "danger", `{"text":"x"}`)
			if derr := <-decided; derr != nil {
				t.Fatal(derr)
			}
			if err != nil {
				t.Fatalf("the call did not proceed after the approval: %v", err)
			}
			if danger.Count() != 1 || f.intent(res.CallID).Status != store.StatusSucceeded {
				t.Error("the call did not run once")
			}
		})
		t.Run("wait elapses", func(t *testing.T) {
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{PollInterval: 20 * time.Millisecond}})
			danger := f.tool("danger", nil)
			wait := 300 * time.Millisecond
			start := time.Now()
			_, err := f.do(gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`), ApprovalWait: &wait})
			el := time.Since(start)
			ge := gwErr(t, err, tool.ClassApprovalRequired)
			if ge.Details["approval_id"] == nil {
				t.Error("no approval_id")
			}
			// Only the lower bound is asserted: a loaded machine may make
			// the call return later, never sooner.
			if el < wait {
				t.Errorf("returned after %v, before the wait of %v", el, wait)
			}
			if danger.Count() != 0 || len(f.intents()) != 0 {
				t.Error("the call ran")
			}
		})
		t.Run("caller cancels while waiting", func(t *testing.T) {
			// The wait is far longer than the test: only the cancellation
			// can end it (a wait that ran out answers approval_required).
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{Wait: time.Hour, PollInterval: 20 * time.Millisecond}})
			danger := f.tool("danger", nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The caller goes away just as the gateway re-reads the request
			// (the second read of the wait): the call is cancelled, whatever
			// the store makes of the cancelled context.
			f.st.before = func(method string, n int) {
				if method == "GetApproval" && n == 2 {
					cancel()
				}
			}
			_, err := f.g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`)})
			gwErr(t, err, tool.ClassCancelled)
			if danger.Count() != 0 || len(f.intents()) != 0 {
				t.Error("the call ran")
			}
		})
	})
}

func TestApprovalRequiredByToolSafety(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		// bob's rule allows note and lists nothing under approve.
		f := newFixture(t, mk, config{})
		note := f.tool("note", nil, func(tl *tool.Tool) { tl.Safety.RequiresApproval = true })
		if d := f.pol.rules.Decide(policy.Request{Caller: "bob", Tool: "note"}); !d.Allow || d.RequireApproval {
			t.Fatalf("precondition: the policy must allow without approval, got %+v", d)
		}
		id := pendingID(t, f, "bob", "note", `{"text":"x"}`)
		if note.Count() != 0 {
			t.Fatal("backend invoked without approval")
		}
		if err := f.decide(id, true, "alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.call("bob", "note", `{"text":"x"}`); err != nil {
			t.Fatal(err)
		}
		if note.Count() != 1 {
			t.Errorf("backend invoked %d times, want 1", note.Count())
		}
	})
}

func TestApprover(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		t.Run("approves interactively", func(t *testing.T) {
			ap := &recApprover{ask: func(ctx context.Context, a *store.Approval) (gateway.ApprovalAnswer, error) {
				return gateway.ApprovalAnswer{Approve: true, By: "bob", Channel: "cli"}, nil
			}}
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{Approver: ap}})
			danger := f.tool("danger", nil)
			res, err := f.call("alice", "danger", `{"text":"x"}`)
			if err != nil {
				t.Fatalf("the interactively approved call failed: %v", err)
			}
			asked := ap.Asked()
			if len(asked) != 1 || asked[0].Caller != "alice" || asked[0].Tool != "danger" || asked[0].Status != store.ApprovalPending {
				t.Fatalf("approver asked %+v", asked)
			}
			a := f.approval(asked[0].ID)
			if a.Status != store.ApprovalApproved || a.DecidedBy != "bob" || a.ConsumedBy != res.CallID || a.DecidedAt.IsZero() {
				t.Errorf("approval %+v", a)
			}
			if danger.Count() != 1 {
				t.Errorf("backend invoked %d times", danger.Count())
			}
		})
		t.Run("denies interactively", func(t *testing.T) {
			ap := &recApprover{ask: func(ctx context.Context, a *store.Approval) (gateway.ApprovalAnswer, error) {
				return gateway.ApprovalAnswer{Approve: false, By: "bob", Channel: "cli"}, nil
			}}
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{Approver: ap}})
			danger := f.tool("danger", nil)
			_, err := f.call("alice", "danger", `{"text":"x"}`)
			gwErr(t, err, tool.ClassForbidden)
			if danger.Count() != 0 || len(f.intents()) != 0 {
				t.Error("the denied call ran")
			}
		})
		t.Run("no decision leaves it pending", func(t *testing.T) {
			ap := &recApprover{ask: func(ctx context.Context, a *store.Approval) (gateway.ApprovalAnswer, error) {
				return gateway.ApprovalAnswer{}, gateway.ErrNoDecision
			}}
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{Approver: ap}})
			danger := f.tool("danger", nil)
			id := pendingID(t, f, "alice", "danger", `{"text":"x"}`)
			if f.approval(id).Status != store.ApprovalPending || danger.Count() != 0 {
				t.Error("the request was decided or the call ran")
			}
		})
		t.Run("self-approval through the approver is refused", func(t *testing.T) {
			ap := &recApprover{ask: func(ctx context.Context, a *store.Approval) (gateway.ApprovalAnswer, error) {
				return gateway.ApprovalAnswer{Approve: true, By: a.Caller, Channel: "cli"}, nil
			}}
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{Approver: ap}})
			danger := f.tool("danger", nil)
			// The answer is refused; the request stays for an operator.
			_, err := f.call("alice", "danger", `{"text":"x"}`)
			ge := gwErr(t, err, tool.ClassApprovalRequired)
			id, _ := ge.Details["approval_id"].(string)
			if id == "" || f.approval(id).Status != store.ApprovalPending {
				t.Errorf("the self-approval was recorded: %+v", ge.Details)
			}
			if danger.Count() != 0 || len(f.intents()) != 0 {
				t.Error("the self-approved call ran")
			}
		})
	})
}

// An approval whose call is then refused for budget is not consumed: the
// commit is one transaction.
func TestApprovalNotConsumedWhenBudgetRefuses(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1, Cost: map[string]int64{"danger": 2}}}})
		danger := f.tool("danger", nil)
		id := pendingID(t, f, "alice", "danger", `{"text":"x"}`)
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		_, err := f.call("alice", "danger", `{"text":"x"}`)
		gwErr(t, err, tool.ClassBudgetExceeded)
		if a := f.approval(id); a.ConsumedBy != "" || a.Status != store.ApprovalApproved {
			t.Errorf("approval %+v was consumed by a call that did not commit", a)
		}
		if danger.Count() != 0 || len(f.intents()) != 0 {
			t.Error("the call ran")
		}
	})
}

// One approval, many identical calls at once: exactly one runs.
func TestApprovalConsumedOnceUnderConcurrency(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		args := `{"text":"x"}`
		id := pendingID(t, f, "alice", "danger", args)
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		const n = 16
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = f.call("alice", "danger", args)
			})
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
				continue
			}
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Class != tool.ClassApprovalRequired {
				t.Errorf("a losing call failed with %v, want approval_required", err)
			}
		}
		if ok != 1 || danger.Count() != 1 || len(f.intents()) != 1 {
			t.Errorf("%d calls succeeded, %d invocations, %d intents; want exactly 1 each", ok, danger.Count(), len(f.intents()))
		}
		// The losers share one new request: operators see one, not fifteen.
		if n := len(f.approvals()); n != 2 {
			t.Errorf("%d approval requests, want 2 (the used one and one new one)", n)
		}
	})
}

// Two identical calls find the same approved request; the one that loses
// the race to commit is not refused (forbidden reads like a denial): it
// gets its own new request, which, once approved, lets it run once.
func TestApprovalLoserOfCommitRaceGetsItsOwnRequest(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		t.Run("answers approval_required", func(t *testing.T) {
			f := newFixture(t, mk, config{})
			r := newCommitRace(t, f)
			loser := r.run(gateway.CallRequest{}, nil)
			ge := gwErr(t, loser, tool.ClassApprovalRequired)
			again, _ := ge.Details["approval_id"].(string)
			if again == "" || again == r.id {
				t.Fatalf("the losing call's request is %q, want a new one, not %s", again, r.id)
			}
			if a := f.approval(again); a.Status != store.ApprovalPending || a.ConsumedBy != "" {
				t.Errorf("the new request is %+v, want pending and unused", a)
			}
			if err := f.decide(again, true, "bob"); err != nil {
				t.Fatal(err)
			}
			if _, err := f.call("alice", "danger", r.args); err != nil {
				t.Fatalf("the call with its own approval: %v", err)
			}
			if r.danger.Count() != 2 || len(f.intents()) != 2 {
				t.Errorf("%d runs, %d intents; want 2 each", r.danger.Count(), len(f.intents()))
			}
			// Both approvals are used up: the same call again needs a third.
			if third := pendingID(t, f, "alice", "danger", r.args); third == r.id || third == again {
				t.Errorf("a further call reused request %s", third)
			}
		})
		t.Run("waits on its own request", func(t *testing.T) {
			// The wait is far longer than the test: a losing call that
			// runs was released by the decision on its new request.
			f := newFixture(t, mk, config{Approvals: gateway.ApprovalOptions{PollInterval: 20 * time.Millisecond}})
			r := newCommitRace(t, f)
			wait := time.Hour
			loser := r.run(gateway.CallRequest{ApprovalWait: &wait}, func() error {
				as, err := f.raw.ListApprovals(context.Background(), store.ApprovalFilter{Status: store.ApprovalPending}, time.Now())
				if err != nil {
					return err
				}
				if len(as) != 1 || as[0].ID == r.id {
					return fmt.Errorf("the losing call waits with pending requests %+v, want one new one", as)
				}
				return f.decide(as[0].ID, true, "bob")
			})
			if loser != nil {
				t.Fatalf("the losing call did not run once its own request was approved: %v", loser)
			}
			if r.danger.Count() != 2 || len(f.intents()) != 2 {
				t.Errorf("%d runs, %d intents; want 2 each", r.danger.Count(), len(f.intents()))
			}
			if n := len(f.approvals()); n != 2 {
				t.Errorf("%d approval requests, want 2", n)
			}
		})
	})
}

// An approval that expires between the approval step and the commit was
// used by no one: the call keeps the forbidden answer ("call again") and
// opens no new request.
func TestApprovalExpiredAtCommitStaysForbidden(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		clock := newFakeClock()
		f := newFixture(t, mk, config{Clock: clock, Approvals: gateway.ApprovalOptions{Expire: 10 * time.Minute}})
		danger := f.tool("danger", nil)
		args := `{"text":"x"}`
		id := pendingID(t, f, "alice", "danger", args)
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		// The call finds the approved request (FindApproval takes the time
		// before this hook runs), then the clock passes its expiry before
		// the call's intent is stamped.
		found := f.st.Count("FindApproval") + 1
		f.st.before = func(method string, n int) {
			if method == "FindApproval" && n == found {
				clock.Advance(11 * time.Minute)
			}
		}
		_, err := f.call("alice", "danger", args)
		f.st.before = nil
		ge := gwErr(t, err, tool.ClassForbidden)
		if ge.Step != "commit" || ge.Details["approval_id"] != id {
			t.Errorf("%+v, want the commit step refusing %s", ge, id)
		}
		if n := len(f.approvals()); n != 1 || danger.Count() != 0 {
			t.Errorf("%d approval requests, %d runs; want 1 and 0", n, danger.Count())
		}
	})
}

// commitRace is two identical calls that both find one approved request,
// arranged so that one of them loses the race to use it: the first call to
// reach the commit waits there until the second has reached it too (so
// both hold the approved request), and the second commits only once the
// first has committed and run.
type commitRace struct {
	f      *fixture
	danger *recBackend
	args   string
	id     string // the approved request both calls find
	ran    chan struct{}
}

func newCommitRace(t *testing.T, f *fixture) *commitRace {
	t.Helper()
	r := &commitRace{f: f, args: `{"text":"x"}`, ran: make(chan struct{})}
	var once sync.Once
	r.danger = f.tool("danger", func(context.Context, *tool.Call) (*tool.Result, error) {
		once.Do(func() { close(r.ran) })
		return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
	})
	r.id = pendingID(t, f, "alice", "danger", r.args)
	if err := f.decide(r.id, true, "bob"); err != nil {
		t.Fatal(err)
	}
	return r
}

// run makes the two calls (req with caller, tool and arguments filled in)
// and returns the losing call's error. When the loser opens a new request
// and reads it in its wait, whileWaiting runs (once) and its error fails
// the test. run asserts that exactly one call won and ran.
func (r *commitRace) run(req gateway.CallRequest, whileWaiting func() error) error {
	t, f := r.f.t, r.f
	req.Caller, req.Tool, req.Arguments = "alice", "danger", json.RawMessage(r.args)
	secondAtCommit, waiting := make(chan struct{}), make(chan struct{})
	var created atomic.Bool
	var waitOnce sync.Once
	f.st.before = func(method string, n int) {
		switch {
		case method == "CommitIntent" && n == 1:
			<-secondAtCommit
		case method == "CommitIntent" && n == 2:
			close(secondAtCommit)
			<-r.ran
		case method == "OpenApproval":
			created.Store(true)
		case method == "GetApproval" && created.Load():
			waitOnce.Do(func() { close(waiting) })
		}
	}
	defer func() { f.st.before = nil }()
	decided := make(chan error, 1)
	if whileWaiting != nil {
		go func() { <-waiting; decided <- whileWaiting() }()
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { _, errs[i] = f.do(req) })
	}
	wg.Wait()
	if whileWaiting != nil {
		select {
		case <-waiting: // whileWaiting runs, or ran, to its end
			if err := <-decided; err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("the losing call never waited on a new request (errors: %v)", errs)
		}
	}
	var loser error
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			loser = err
		}
	}
	if whileWaiting == nil && (won != 1 || r.danger.Count() != 1) {
		t.Fatalf("%d calls succeeded, %d runs; want 1 each (errors: %v)", won, r.danger.Count(), errs)
	}
	return loser
}

// waitingSignal returns a channel closed when a call of f first re-reads its
// approval request inside the wait loop (the first GetApproval: the
// gateway reads the request there and nowhere else before it is decided),
// so a test acts on an observed waiting state instead of after a sleep.
func waitingSignal(f *fixture) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	f.st.before = func(method string, n int) {
		if method == "GetApproval" && n == 1 {
			once.Do(func() { close(ch) })
		}
	}
	return ch
}
