package gateway

// The decide-only entry: the pipeline of a call up to and including the
// durable intent, for a tool that someone else runs (a coding agent's own
// Bash or Edit, asked about through its PreToolUse hook). Backplane decides
// and records; the agent runs the tool.

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// DecisionOnly is the error class a decision-only journal entry is settled
// with (its status is succeeded, since it holds its budget like a call that
// ran): it marks the entries of calls Backplane decided but did not run,
// so that no reader takes the recorded result for the tool's output.
const DecisionOnly = "decision_only"

// decisionOnlyMessage is the settled entry's message, for people reading
// the journal.
const decisionOnlyMessage = "decided only: Backplane allowed this call and did not run the tool; the agent that asked runs it"

// DecideRequest is one call to decide without running it.
type DecideRequest struct {
	Caller    string
	Session   string
	Tool      string
	Arguments json.RawMessage
	// ApprovalWait overrides Options.Approvals.Wait for this decision when
	// set (0: do not wait; at most MaxApprovalWait).
	ApprovalWait *time.Duration
	// Progress, when set, is called about once a second while the decision
	// waits for an approval.
	Progress func(approvalID string, waited time.Duration)
	// Preview stops after the approval step: the answer is what the
	// decision would be (an approval request is still found or created,
	// so that an operator can decide it), but nothing is reserved or
	// journaled and no approval is consumed. A hook deciding several calls
	// for one tool use (the files of one patch) previews them all first, so
	// that an approval is consumed only when every part will be allowed.
	Preview bool
}

// DecideResult is an allowed decision.
type DecideResult struct {
	// CallID names the decision-only journal entry (see DecisionOnly);
	// "" for a preview.
	CallID string `json:"call_id"`
	// Rule is the policy rule that allowed the call (file:line), if one
	// did.
	Rule string `json:"rule,omitempty"`
	// ApprovalID is the approval this decision consumed, if it needed one
	// (a preview: the approved request it would consume).
	ApprovalID string `json:"approval_id,omitempty"`
}

// Decide runs req through the steps of a call that come before its backend:
// lookup, validation, authorization (default deny), approval (the request
// bound to caller, tool, definition and argument digest is found or
// created, exactly as for a call, and an approved one is consumed by this
// decision) and budget reservation, committed as an intent. The intent is
// then settled at once with the error class DecisionOnly: the journal says
// Backplane did not run the tool. No backend is invoked. Like Call, it
// writes one audit event, marked "decision_only".
//
// It returns a *DecideResult when the call is allowed, and otherwise the
// *Error a call would get: forbidden (with the rule's reason),
// approval_required (details.approval_id), budget_exceeded, not_found, ...
func (g *Gateway) Decide(ctx context.Context, req DecideRequest) (*DecideResult, error) {
	c := &call{g: g, id: newID("call"), decideOnly: true, preview: req.Preview, req: CallRequest{
		Caller: req.Caller, Session: req.Session, Tool: req.Tool, Arguments: req.Arguments,
		ApprovalWait: req.ApprovalWait, Progress: req.Progress,
	}}
	res, err := c.execute(ctx)
	if err != nil {
		return nil, err
	}
	return &DecideResult{CallID: res.CallID, Rule: c.rule, ApprovalID: c.approvalID}, nil
}

// settleDecision ends a decision-only intent right after its commit, in
// place of the invocation. The settlement outlives the caller's context,
// as any settlement does: the intent must not stay started (a started
// intent of a dead process becomes uncertain, which this is not).
func (c *call) settleDecision(ctx context.Context) (*CallResult, error) {
	g := c.g
	content, _ := json.Marshal(map[string]any{"decision": "allow", "executed_by_backplane": false})
	st := store.Settlement{
		Status: store.StatusSucceeded, Result: store.EncodeResult(store.Result{Content: content}),
		ErrorClass: DecisionOnly, ErrorMessage: decisionOnlyMessage, At: g.now(),
	}
	if err := g.store.Settle(context.WithoutCancel(ctx), c.id, st); err != nil {
		g.noteStoreWrite(err)
		c.audit("settle", "store_error", "error", err.Error())
		e := newError(tool.ClassExecutionFailure, "settle", "the decision could not be recorded: "+err.Error(), nil)
		e.cause = err
		return nil, e
	}
	g.noteStoreWrite(nil)
	c.audit("settle", DecisionOnly, "status", string(store.StatusSucceeded))
	return &CallResult{CallID: c.id, Result: content}, nil
}
