package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// askingBackend answers input_required until a call carries the answer
// "token", then completes with it.
func askingBackend(_ context.Context, c *tool.Call) (*tool.Result, error) {
	if c.Input == nil || c.Input.Responses["token"] == nil {
		return nil, &tool.InputRequiredError{Server: "up", State: "up-state",
			Requests: map[string]tool.InputRequest{"token": {Method: tool.RequestElicitation, Params: json.RawMessage(`{"message":"token?"}`)}}}
	}
	if c.Input.State != "up-state" {
		return nil, errors.New("the upstream's state was not handed back")
	}
	return &tool.Result{Content: json.RawMessage(`{"got":` + string(c.Input.Responses["token"]) + `}`)}, nil
}

// TestInputRequiredAndItsContinuation: issue 24. A backend that needs the
// client's input settles the first attempt failed (class input_required,
// its budget released), and its error carries the backend's requests; the
// retry continuing it runs with the answers, without a second approval;
// the same retry made again replays the continuation's outcome, never a
// second run; a continuation of another caller's call, or of another
// call, is refused before anything runs.
func TestInputRequiredAndItsContinuation(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		danger := f.tool("danger", askingBackend)
		args := `{"text":"x"}`

		// The first attempt needs an approval, which an operator gives.
		_, err := f.call("alice", "danger", args)
		ge := gwErr(t, err, tool.ClassApprovalRequired)
		if err := f.decide(ge.Details["approval_id"].(string), true, "ops"); err != nil {
			t.Fatal(err)
		}
		_, err = f.call("alice", "danger", args)
		ge = gwErr(t, err, tool.ClassInputRequired)
		var ir *tool.InputRequiredError
		if !errors.As(err, &ir) || ir.Server != "up" || ir.Requests["token"].Method != tool.RequestElicitation {
			t.Fatalf("the error does not carry the backend's requests: %v", err)
		}
		first := f.intent(ge.CallID)
		if first.Status != store.StatusFailed || first.ErrorClass != string(tool.ClassInputRequired) || first.ApprovalID == "" {
			t.Fatalf("the first attempt is recorded %+v", first)
		}
		if n := f.totalUsed(); n != 0 {
			t.Errorf("budget held after the first attempt: %d", n)
		}

		retry := gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(args), Continues: ge.CallID,
			Input: &tool.InputAnswers{State: ir.State, Responses: map[string]json.RawMessage{"token": json.RawMessage(`"t-1"`)}}}
		res, err := f.do(retry)
		if err != nil {
			t.Fatalf("the continuation: %v", err)
		}
		if string(res.Result) != `{"got":"t-1"}` || res.Replayed || danger.Count() != 2 {
			t.Fatalf("the continuation %+v ran %d times in all", res, danger.Count())
		}
		cont := f.intent(res.CallID)
		if cont.Status != store.StatusSucceeded || cont.IdempotencyKey != "continues:"+ge.CallID || cont.ApprovalID != "" {
			t.Errorf("the continuation is recorded %+v", cont)
		}
		if n := len(f.approvals()); n != 1 {
			t.Errorf("%d approval requests, want the one the first attempt used", n)
		}
		if n := f.totalUsed(); n != 1 {
			t.Errorf("budget held after the continuation: %d, want 1", n)
		}

		// The same retry again: the recorded outcome, not a second run.
		again, err := f.do(retry)
		if err != nil || !again.Replayed || again.CallID != res.CallID || danger.Count() != 2 {
			t.Fatalf("the retry made twice: %+v %v (ran %d times)", again, err, danger.Count())
		}

		// bob cannot continue alice's call, nor alice another tool's or
		// arguments' call.
		f2 := f.tool("note", askingBackend)
		_, err = f.call("alice", "note", args)
		ge2 := gwErr(t, err, tool.ClassInputRequired)
		_, err = f.do(gateway.CallRequest{Caller: "bob", Tool: "note", Arguments: json.RawMessage(args), Continues: ge2.CallID, Input: retry.Input})
		if e := gwErr(t, err, tool.ClassForbidden); !strings.Contains(e.Message, "another caller") {
			t.Errorf("bob continuing alice's call: %v", e)
		}
		_, err = f.do(gateway.CallRequest{Caller: "alice", Tool: "note", Arguments: json.RawMessage(`{"text":"other"}`), Continues: ge2.CallID, Input: retry.Input})
		gwErr(t, err, tool.ClassForbidden)
		// Answers alone (an upstream that asked with no state): a call of
		// its own, the answers handed to the backend.
		own, err := f.do(gateway.CallRequest{Caller: "alice", Tool: "note", Arguments: json.RawMessage(args), Input: retry.Input})
		if err != nil || string(own.Result) != `{"got":"t-1"}` || f.intent(own.CallID).IdempotencyKey != "" {
			t.Errorf("answers without a call to continue: %+v %v", own, err)
		}
		// A continuation of a call that completed is refused too.
		_, err = f.do(gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(args), Continues: res.CallID, Input: retry.Input})
		gwErr(t, err, tool.ClassForbidden)
		if f2.Count() != 2 || danger.Count() != 2 {
			t.Errorf("a refused continuation ran: note %d, danger %d", f2.Count(), danger.Count())
		}
	})
}
