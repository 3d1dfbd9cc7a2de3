package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
	"strings"
	"testing"
	"time"
)

// opGateway: alice's danger needs an approval that ops or sec-* decide;
// her self tool needs one she may give herself through elicitation.
func opGateway(t *testing.T, st store.Store, opts gateway.ApprovalOptions) *gateway.Gateway {
	t.Helper()
	rules, err := policy.NewRules([]policy.Rule{
		{Caller: "alice", Allow: []string{"danger"}, Approve: []string{"danger"}, Approvers: []string{"ops", "sec-*"}},
		{Caller: "alice", Allow: []string{"self"}, Approve: []string{"self"}, SelfApprove: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: st, Policy: rules, Approvals: opts, Operators: []string{"ops", "sec-anna", "dev", "alice"}})
	for _, name := range []string{"danger", "self"} {
		err := g.Register(context.Background(), tool.Tool{Name: name, Description: "the " + name + " tool", InputSchema: json.RawMessage(`{"type":"object"}`),
			Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
				return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
			})})
		if err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func requestID(t *testing.T, g *gateway.Gateway, name, args string) string {
	t.Helper()
	_, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: name, Arguments: json.RawMessage(args)})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Class != tool.ClassApprovalRequired {
		t.Fatalf("call: %v, want approval_required", err)
	}
	return ge.Details["approval_id"].(string)
}

func wantRefusal(t *testing.T, err error, class string) {
	t.Helper()
	var oe *gateway.OperatorError
	if !errors.As(err, &oe) || oe.Class != class {
		t.Fatalf("error %v, want an OperatorError of class %s", err, class)
	}
}

func TestDecideApprovalRules(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		ctx := context.Background()
		g := opGateway(t, mk(t), gateway.ApprovalOptions{})
		id := requestID(t, g, "danger", `{"x":1}`)
		for _, c := range []struct {
			d     gateway.ApprovalDecision
			class string
		}{
			{gateway.ApprovalDecision{Operator: "carol", Approve: true, Channel: gateway.ChannelCLI}, "not_operator"},
			{gateway.ApprovalDecision{Operator: "dev", Approve: true, Channel: gateway.ChannelConsole}, "not_approver"},
			{gateway.ApprovalDecision{Operator: "alice", Approve: true, Channel: gateway.ChannelElicitation}, "self_approval"},
			// An operator who is also the caller does not decide their own call.
			{gateway.ApprovalDecision{Operator: "alice", Approve: true, Channel: gateway.ChannelCLI}, "self_approval"},
			{gateway.ApprovalDecision{Operator: "bob", Approve: true, Channel: gateway.ChannelElicitation}, "not_approver"},
			{gateway.ApprovalDecision{Operator: "", Approve: true, Channel: gateway.ChannelCLI}, "not_operator"},
		} {
			_, err := g.DecideApproval(ctx, id, c.d)
			wantRefusal(t, err, c.class)
		}
		if _, err := g.DecideApproval(ctx, "apr_nope", gateway.ApprovalDecision{Operator: "ops", Channel: gateway.ChannelCLI}); err == nil {
			t.Fatal("decided an unknown request")
		} else {
			wantRefusal(t, err, "not_found")
		}
		v, err := g.GetApproval(ctx, id)
		if err != nil || v.Status != store.ApprovalPending || v.Description != "the danger tool" ||
			!strings.Contains(string(v.Arguments), `"x": 1`) || len(v.HowToDecide) == 0 {
			t.Fatalf("view after refusals: %+v %v", v, err)
		}
		a, err := g.DecideApproval(ctx, id, gateway.ApprovalDecision{Operator: "sec-anna", Approve: true, Reason: "fine", Channel: gateway.ChannelConsole})
		if err != nil || a.Status != store.ApprovalApproved || a.DecidedBy != "sec-anna" || a.Channel != "console" || a.Reason != "fine" {
			t.Fatalf("decision by an approver: %+v %v", a, err)
		}
		_, err = g.DecideApproval(ctx, id, gateway.ApprovalDecision{Operator: "ops", Channel: gateway.ChannelCLI})
		wantRefusal(t, err, "already_decided")

		// self: alice's own person may decide, through elicitation only.
		sid := requestID(t, g, "self", `{}`)
		_, err = g.DecideApproval(ctx, sid, gateway.ApprovalDecision{Operator: "alice", Approve: true, Channel: gateway.ChannelCLI})
		wantRefusal(t, err, "self_approval") // self_approve is for the elicitation channel only
		if a, err := g.DecideApproval(ctx, sid, gateway.ApprovalDecision{Operator: "alice", Approve: true, Channel: gateway.ChannelElicitation}); err != nil || a.DecidedBy != "alice" {
			t.Fatalf("self-approval where the rule opts in: %+v %v", a, err)
		}
	})
}

func TestPendingCapCreatesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		st := mk(t)
		g := opGateway(t, st, gateway.ApprovalOptions{MaxPending: 2})
		requestID(t, g, "danger", `{"n":1}`)
		requestID(t, g, "danger", `{"n":2}`)
		requestID(t, g, "danger", `{"n":2}`) // the same call: the same request, no new one
		_, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"n":3}`)})
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Class != tool.ClassForbidden || ge.Details["max_pending"] != 2 {
			t.Fatalf("third request: %v", err)
		}
		list, _ := st.ListApprovals(context.Background(), store.ApprovalFilter{}, time.Now())
		if len(list) != 2 {
			t.Errorf("%d requests, want 2", len(list))
		}
	})
}

// A call whose context ends while it waits withdraws: the request stays
// pending, an event says so, and no intent is committed.
func TestWaitingCallWithdraws(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		st := mk(t)
		g := opGateway(t, st, gateway.ApprovalOptions{Wait: gateway.MaxApprovalWait, PollInterval: 5 * time.Millisecond})
		events, stop := g.SubscribeApprovals()
		defer stop()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{}`)})
			done <- err
		}()
		ev := <-events
		if ev.Kind != "pending" {
			t.Fatalf("first event %+v", ev)
		}
		for v, _ := g.GetApproval(context.Background(), ev.Approval.ID); !v.Waiting; v, _ = g.GetApproval(context.Background(), ev.Approval.ID) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		err := <-done
		if !errors.Is(err, tool.ClassCancelled) {
			t.Fatalf("withdrawn call: %v", err)
		}
		if ev := <-events; ev.Kind != "withdrawn" || ev.Approval.ID == "" {
			t.Errorf("second event %+v", ev)
		}
		v, _ := g.GetApproval(context.Background(), ev.Approval.ID)
		if v.Status != store.ApprovalPending || v.Waiting {
			t.Errorf("after withdrawal: %+v", v)
		}
		if in, _ := st.ListIntents(context.Background(), store.IntentFilter{}); len(in) != 0 {
			t.Errorf("intents after withdrawal: %v", in)
		}
	})
}
