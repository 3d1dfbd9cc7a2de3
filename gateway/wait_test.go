package gateway_test

// The approval wait's bounds (findings 17, 19 and 20 of issue 22): the
// person at the caller's own client is asked where a rule lets them
// decide, whatever the wait; every store read of the wait is bounded; an
// approval decided while the call's client is away is not consumed.

import (
	"context"
	"encoding/json"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
	"sync/atomic"
	"testing"
	"time"
)

// selfRules: alice's danger needs an approval her own client may give.
var selfRules = []policy.Rule{
	{Caller: "alice", Allow: []string{"danger"}, Approve: []string{"danger"}, SelfApprove: true},
	{Caller: "bob", Allow: []string{"danger"}, Approve: []string{"danger"}},
}

// TestSelfApproveUnderNoWait: with the wait at 0 (the default), the
// person at alice's client is asked (self_approve), and the call runs on
// their yes; bob's rule does not let his client decide, and his client is
// not asked. Before, self_approve did nothing under a wait of 0.
func TestSelfApproveUnderNoWait(t *testing.T) {
	f := newFixture(t, stores(t)["sqlite"], config{Rules: selfRules})
	danger := f.tool("danger", nil)
	yes := &recApprover{ask: func(context.Context, *store.Approval) (gateway.ApprovalAnswer, error) {
		return gateway.ApprovalAnswer{Approve: true}, nil
	}}
	noWait := time.Duration(0)
	res, err := f.do(gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`),
		ApprovalWait: &noWait, Approver: yes})
	if err != nil || res == nil {
		t.Fatalf("alice's call, approved by her client: %v", err)
	}
	if len(yes.Asked()) != 1 || danger.Count() != 1 {
		t.Errorf("asked %d times, ran %d times; want once each", len(yes.Asked()), danger.Count())
	}

	bobs := &recApprover{ask: yes.ask}
	_, err = f.do(gateway.CallRequest{Caller: "bob", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`),
		ApprovalWait: &noWait, Approver: bobs})
	gwErr(t, err, tool.ClassApprovalRequired)
	if len(bobs.Asked()) != 0 || danger.Count() != 1 {
		t.Errorf("bob's client asked %d times, tool ran %d times; want 0 and 1", len(bobs.Asked()), danger.Count())
	}
}

// TestSelfApproveBoundedByItsTimeout: a person who never answers holds the
// call for SelfApproveTimeout, not for ever, and the question is cancelled;
// the call then returns approval_required (the wait is 0).
func TestSelfApproveBoundedByItsTimeout(t *testing.T) {
	f := newFixture(t, stores(t)["sqlite"], config{Rules: selfRules,
		Approvals: gateway.ApprovalOptions{SelfApproveTimeout: 200 * time.Millisecond}})
	danger := f.tool("danger", nil)
	var cancelled atomic.Bool
	silent := &recApprover{ask: func(ctx context.Context, _ *store.Approval) (gateway.ApprovalAnswer, error) {
		<-ctx.Done()
		cancelled.Store(true)
		return gateway.ApprovalAnswer{}, ctx.Err()
	}}
	done := make(chan error, 1)
	go func() {
		_, err := f.do(gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`), Approver: silent})
		done <- err
	}()
	select {
	case err := <-done:
		gwErr(t, err, tool.ClassApprovalRequired)
	case <-time.After(30 * time.Second):
		t.Fatal("a question no one answers held the call past 30s")
	}
	if len(silent.Asked()) != 1 || !cancelled.Load() || danger.Count() != 0 {
		t.Errorf("asked %d times, question cancelled %v, ran %d times", len(silent.Asked()), cancelled.Load(), danger.Count())
	}
}

// TestWaitSurvivesAStoreThatStopsAnswering: a call waiting for an approval
// whose store then blocks on every read (ignoring its context, the worst
// case) returns a store failure after ReadTimeout, instead of hanging for
// ever; the request is left as it was.
func TestWaitSurvivesAStoreThatStopsAnswering(t *testing.T) {
	f := newFixture(t, stores(t)["sqlite"], config{Approvals: gateway.ApprovalOptions{ReadTimeout: 200 * time.Millisecond, PollInterval: 10 * time.Millisecond}})
	danger := f.tool("danger", nil)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) }) // the blocked reads end with the test
	var stuck atomic.Bool
	var blocked atomic.Int64
	f.st.before = func(method string, n int) {
		if method == "GetApproval" && stuck.Load() {
			blocked.Add(1)
			<-block
		}
	}
	wait := 30 * time.Second
	done := make(chan error, 1)
	go func() {
		_, err := f.do(gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`), ApprovalWait: &wait})
		done <- err
	}()
	// Once the wait polls, the store stops answering.
	deadline := time.Now().Add(20 * time.Second)
	for f.st.Count("GetApproval") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the wait never read its request")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stuck.Store(true)
	select {
	case err := <-done:
		ge := gwErr(t, err, tool.ClassExecutionFailure)
		if ge.Step != "approve" {
			t.Errorf("step %s, want approve", ge.Step)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("the call hung on a store that stopped answering (wait 30s, read timeout 200ms)")
	}
	if blocked.Load() == 0 || danger.Count() != 0 {
		t.Errorf("%d reads blocked, tool ran %d times; want at least 1 and 0", blocked.Load(), danger.Count())
	}
}

// TestApprovedWhileAwayIsHeld: an approval decided while the call's client
// is away (CallRequest.Away) is not consumed: the call holds; when the
// client comes back it goes on; when the caller's context ends instead it
// withdraws and the approval stays for the retry.
func TestApprovedWhileAwayIsHeld(t *testing.T) {
	for _, back := range []bool{true, false} {
		name := map[bool]string{true: "client comes back", false: "client never comes back"}[back]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, stores(t)["sqlite"], config{Approvals: gateway.ApprovalOptions{PollInterval: 10 * time.Millisecond}})
			danger := f.tool("danger", nil)
			var away atomic.Bool
			away.Store(true)
			var awayChecks atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := 30 * time.Second
			done := make(chan error, 1)
			go func() {
				_, err := f.g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"text":"x"}`),
					ApprovalWait: &wait, Away: func() bool { awayChecks.Add(1); return away.Load() }})
				done <- err
			}()
			var id string
			deadline := time.Now().Add(20 * time.Second)
			for id == "" {
				if time.Now().After(deadline) {
					t.Fatal("no pending request")
				}
				if as, _ := f.raw.ListApprovals(context.Background(), store.ApprovalFilter{Status: store.ApprovalPending}, time.Now()); len(as) == 1 {
					id = as[0].ID
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := f.decide(id, true, "ops"); err != nil {
				t.Fatal(err)
			}
			// The call has seen the decision and holds: it asks whether
			// the client is back, again and again.
			for n := awayChecks.Load(); awayChecks.Load() < n+3; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the call never checked whether its client was there")
				}
			}
			if danger.Count() != 0 {
				t.Fatal("the call ran while its client was away")
			}
			if back {
				away.Store(false)
			} else {
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(25 * time.Second):
				t.Fatal("the held call did not return")
			}
			a, _ := f.raw.GetApproval(context.Background(), id)
			if back {
				if err != nil || danger.Count() != 1 || a.ConsumedBy == "" {
					t.Errorf("back: %v, ran %d times, consumed by %q", err, danger.Count(), a.ConsumedBy)
				}
				return
			}
			gwErr(t, err, tool.ClassCancelled)
			if danger.Count() != 0 || a.ConsumedBy != "" || a.Status != store.ApprovalApproved {
				t.Errorf("gone: ran %d times, approval %+v", danger.Count(), a)
			}
		})
	}
}
