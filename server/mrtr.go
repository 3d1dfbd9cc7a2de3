package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/tool"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/store"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Approvals of 2026-07-28 calls (multi round-trip requests): where a
// policy rule sets self_approve and the request's client declared
// elicitation, a call needing approval is answered input_required, with
// one elicitation request (approvalInput) that shows what would be
// approved (tool, arguments, the diff or command) and a signed
// requestState (requeststate.go). The client's retry carries the person's
// answer: it is recorded as the caller's own decision through the
// elicitation channel (gateway.DecideApproval, the same approval record
// the console and the CLI see), and the call then goes through the
// pipeline as any retry of an approved call does: it runs once and
// consumes the approval. Otherwise approval_required is answered at once,
// as for a session.

// approvalInput is the key of the approval's elicitation request in
// inputRequests and inputResponses.
const approvalInput = "backplane_approval"

// askedApprover is the gateway.Approver of a 2026-07-28 call: it cannot
// ask during the request, so it notes the approval request put to it
// (the gateway asks it only where a rule sets self_approve) and reports
// no decision; the call then answers approval_required, which callModern
// turns into input_required.
type askedApprover struct{ asked *store.Approval }

// Ask implements gateway.Approver.
func (a *askedApprover) Ask(_ context.Context, req *store.Approval) (gateway.ApprovalAnswer, error) {
	cp := *req
	a.asked = &cp
	return gateway.ApprovalAnswer{}, gateway.ErrNoDecision
}

// callModern runs a 2026-07-28 tools/call (cr is ready but for the
// approver): a retry carrying a requestState and the person's answer
// decides the approval first.
func (s *Server) callModern(ctx context.Context, req *mcp.CallToolRequest, cr gateway.CallRequest, mc modernCall) (*mcp.CallToolResult, error) {
	p := req.Params
	// The fast path's requests (fastpath.go) have no session, and carry
	// no progress token or log level: their client is the same, with
	// nothing to send on.
	cr.Client = modernClient{&sessionClient{ss: req.Session, token: p.GetProgressToken()}}
	var asked *askedApprover
	if mc.elicits() {
		if p.RequestState != "" {
			if err := s.answerApproval(ctx, cr, p); err != nil {
				return nil, err
			}
		}
		asked = &askedApprover{}
		cr.Approver = asked
	}
	if declaresTasks(mc.caps) {
		var now time.Duration // a task is answered at once (tasks.go)
		cr.ApprovalWait = &now
	}
	res, err := s.runCall(ctx, cr)
	var ge *gateway.Error
	if asked != nil && asked.asked != nil && errors.As(err, &ge) && ge.Class == tool.ClassApprovalRequired {
		return s.inputRequired(ctx, cr, asked.asked), nil
	}
	if task, ok := s.callAsTask(ctx, cr, mc, err); ok {
		return nil, taskAnswer{task}
	}
	out, err := toolResult(res, err, s.declaresOutput(cr.Tool, res, err))
	if err != nil {
		return nil, err
	}
	return resultTyped(out, "complete"), nil
}

// inputRequired is the input_required answer for a pending approval a.
func (s *Server) inputRequired(ctx context.Context, cr gateway.CallRequest, a *store.Approval) *mcp.CallToolResult {
	state := s.states.sign(requestState{
		Method: "tools/call", Approval: a.ID, Caller: a.Caller, Tool: a.Tool,
		DefHash: a.DefinitionHash, Digest: a.ArgsDigest, Expires: a.ExpiresAt.Unix(),
	})
	res := &mcp.CallToolResult{
		Meta: mcp.Meta{MetaApprovalID: a.ID},
		InputRequests: mcp.InputRequestMap{approvalInput: &mcp.ElicitParams{
			Mode:            "form",
			Message:         approvalMessage(a, cr.Arguments, s.previewText(ctx, a.ID)),
			RequestedSchema: approveSchema,
		}},
		RequestState: state,
	}
	return resultTyped(res, "input_required")
}

// MetaApprovalID, in an input_required result's _meta, is the approval
// request the elicitation decides (what the console and the CLI show).
const MetaApprovalID = "backplane/approval_id"

// answerApproval checks the requestState of a retry against the call it
// comes with and records the person's answer, when there is one. A state
// that fails verification, names another call, or whose approval is no
// longer pending (a replay) is invalid params; a retry without an answer
// goes on (the call is put to the person again).
func (s *Server) answerApproval(ctx context.Context, cr gateway.CallRequest, p *mcp.CallToolParamsRaw) error {
	refuse := func(why string) error {
		s.refusals.warn(s.log, "request state "+cr.Caller, "2026-07-28 retry refused: its request state does not hold", "caller", cr.Caller, "tool", cr.Tool, "reason", why)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call: requestState refused: " + why}
	}
	st, err := s.states.verify(p.RequestState, time.Now())
	if err != nil {
		return refuse(err.Error())
	}
	digest, derr := canonjson.Digest(cr.Arguments)
	_, defHash, known := s.g.Tool(cr.Tool)
	switch {
	case st.Method != "tools/call":
		return refuse("it was issued for " + st.Method)
	case st.Caller != cr.Caller:
		return refuse("it was issued to another caller")
	case st.Tool != cr.Tool:
		return refuse(fmt.Sprintf("it was issued for tool %q", st.Tool))
	case derr != nil || digest != st.Digest:
		return refuse("it was issued for other arguments")
	case !known || defHash != st.DefHash:
		return refuse("the tool's definition changed since it was issued")
	}
	a, err := s.g.GetApproval(ctx, st.Approval)
	if err != nil {
		return refuse("its approval request " + st.Approval + " is not found")
	}
	if a.Caller != st.Caller || a.Tool != st.Tool || a.DefinitionHash != st.DefHash || a.ArgsDigest != st.Digest {
		return refuse("its approval request is for another call")
	}
	if a.Status != store.ApprovalPending {
		// Decided once: by this state's first retry, or elsewhere.
		return refuse(fmt.Sprintf("approval request %s is already %s: the state was used", a.ID, a.Status))
	}
	resp, ok := p.InputResponses[approvalInput]
	if !ok {
		return nil // no answer: asked again
	}
	er, ok := resp.(*mcp.ElicitResult)
	if !ok {
		return refuse("inputResponses." + approvalInput + " is not an elicitation result")
	}
	approve := false
	if er.Action == "accept" {
		approve, _ = er.Content["approve"].(bool)
	}
	_, err = s.g.DecideApproval(ctx, a.ID, gateway.ApprovalDecision{
		Operator: cr.Caller, Approve: approve, Channel: gateway.ChannelElicitation,
		Reason: "answered through the client (" + string(er.Action) + ")",
	})
	var oe *gateway.OperatorError
	if errors.As(err, &oe) && oe.Class == "already_decided" {
		return refuse(fmt.Sprintf("approval request %s was decided meanwhile: the state was used", a.ID))
	}
	if err != nil {
		return refuse(err.Error())
	}
	return nil
}
