package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// An approval requested through replica A is decided through replica B;
// A sees the decision and consumes the approval, and B sees it consumed.
func TestApprovalAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	a := openStore(t, schema, nil)
	b := openStore(t, schema, nil)
	in := intent("call-1", "alice")
	now := time.Now().UTC().Truncate(time.Millisecond)
	apr := &store.Approval{
		ID: "apr-1", Caller: "alice", Tool: in.Tool, DefinitionHash: in.DefinitionHash, ArgsDigest: in.ArgsDigest,
		Status: store.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
	must(t, a.CreateApproval(ctx, apr))
	got, err := b.GetApproval(ctx, "apr-1")
	must(t, err)
	if got.Status != store.ApprovalPending {
		t.Fatalf("B sees %s, want pending", got.Status)
	}
	must(t, b.DecideApproval(ctx, "apr-1", store.ApprovalDecision{Approve: true, By: "bob", At: now.Add(time.Second)}))
	if err := a.DecideApproval(ctx, "apr-1", store.ApprovalDecision{Approve: false, By: "carol", At: now.Add(time.Second)}); !errors.Is(err, store.ErrAlreadyDecided) {
		t.Errorf("deciding again through A: %v, want ErrAlreadyDecided", err)
	}
	got, err = a.GetApproval(ctx, "apr-1")
	must(t, err)
	if got.Status != store.ApprovalApproved || got.DecidedBy != "bob" || !got.DecidedAt.Equal(now.Add(time.Second)) {
		t.Errorf("A sees %+v, want approved by bob", got)
	}
	key := store.ApprovalKey{Caller: "alice", Tool: in.Tool, DefinitionHash: in.DefinitionHash, ArgsDigest: in.ArgsDigest}
	found, err := a.FindApproval(ctx, key, now.Add(2*time.Second))
	must(t, err)
	if found.ID != "apr-1" || found.Status != store.ApprovalApproved {
		t.Errorf("A finds %+v, want apr-1 approved", found)
	}
	in.CreatedAt = now.Add(2 * time.Second)
	_, err = a.CommitIntent(ctx, &store.CommitRequest{Intent: in, ApprovalID: "apr-1"})
	must(t, err)
	got, err = b.GetApproval(ctx, "apr-1")
	must(t, err)
	if got.ConsumedBy != "call-1" {
		t.Errorf("B sees the approval consumed by %q, want call-1", got.ConsumedBy)
	}
	// Consumed once: another call through B cannot use it.
	again := intent("call-2", "alice")
	again.ArgsDigest, again.CreatedAt = in.ArgsDigest, in.CreatedAt
	if _, err := b.CommitIntent(ctx, &store.CommitRequest{Intent: again, ApprovalID: "apr-1"}); !errors.Is(err, store.ErrApprovalUnavailable) {
		t.Errorf("consuming again through B: %v, want ErrApprovalUnavailable", err)
	}
}

// A gateway call over replica A waiting for an approval is released by a
// decision made through replica B.
func TestGatewayApprovalReleasedByOtherReplica(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	a := openStore(t, schema, nil)
	b := openStore(t, schema, nil)
	pol, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"danger"}, Approve: []string{"danger"}}})
	must(t, err)
	g := gateway.New(&gateway.Options{Store: a, Policy: pol})
	var ran atomic.Int32
	must(t, g.Register(context.Background(), tool.Tool{
		Name: "danger", Description: "Needs an approval.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			ran.Add(1)
			return &tool.Result{Content: json.RawMessage(`{"done":true}`)}, nil
		}),
	}))

	wait := 5 * time.Second
	type outcome struct {
		res *gateway.CallResult
		err error
		at  time.Time
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"x":1}`), ApprovalWait: &wait})
		done <- outcome{res, err, time.Now()}
	}()

	// The request appears through B; B decides it.
	var pending []store.Approval
	deadline := time.Now().Add(wait)
	for len(pending) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no pending request visible through B")
		}
		time.Sleep(20 * time.Millisecond)
		pending, err = b.ListApprovals(ctx, store.ApprovalFilter{Status: store.ApprovalPending}, time.Now())
		must(t, err)
	}
	select {
	case o := <-done:
		t.Fatalf("the call returned before the decision: %+v, %v", o.res, o.err)
	default:
	}
	if ran.Load() != 0 {
		t.Fatal("the backend ran before the decision")
	}
	decided := time.Now()
	must(t, b.DecideApproval(ctx, pending[0].ID, store.ApprovalDecision{Approve: true, By: "bob", At: decided}))

	var o outcome
	select {
	case o = <-done:
	case <-time.After(wait + time.Second):
		t.Fatal("the waiting call was not released")
	}
	if o.err != nil {
		t.Fatalf("the approved call: %v", o.err)
	}
	if lag := o.at.Sub(decided); lag > time.Second {
		t.Errorf("the call was released %v after the decision, want well under a second (100ms polling)", lag)
	} else {
		t.Logf("released %v after the decision through the other replica", lag)
	}
	if string(o.res.Result) != `{"done":true}` || ran.Load() != 1 {
		t.Errorf("result %s, backend ran %d times; want {\"done\":true} once", o.res.Result, ran.Load())
	}
	in, err := b.GetIntent(ctx, o.res.CallID)
	must(t, err)
	if in.Status != store.StatusSucceeded || in.ApprovalID != pending[0].ID || in.Incarnation != a.Incarnation() {
		t.Errorf("journal through B: %+v", in)
	}
	apr, err := b.GetApproval(ctx, pending[0].ID)
	must(t, err)
	if apr.Status != store.ApprovalApproved || apr.DecidedBy != "bob" || apr.ConsumedBy != o.res.CallID {
		t.Errorf("approval through B: %+v", apr)
	}
}
