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
// approver and the client): modernRetry reads what a retry carries, the
// gateway runs the call, and modernAnswer makes its result. (Each part is
// a function of its own, for every path that serves such a call.)
func (s *Server) callModern(ctx context.Context, req *mcp.CallToolRequest, cr gateway.CallRequest, mc modernCall) (*mcp.CallToolResult, error) {
	p := req.Params
	// The fast path's requests (fastpath.go) have no session, and carry
	// no progress token or log level: their client is the same, with
	// nothing to send on.
	cr.Client = modernClient{sessionClient: &sessionClient{ss: req.Session, token: p.GetProgressToken()}, caps: mc.caps}
	asked, err := s.modernRetry(ctx, &cr, p, mc)
	if err != nil {
		return nil, err
	}
	if declaresTasks(mc.caps) {
		var now time.Duration // a task is answered at once (tasks.go)
		cr.ApprovalWait = &now
	}
	res, err := s.runCall(ctx, cr)
	return s.modernAnswer(ctx, cr, mc, asked, res, err)
}

// modernRetry prepares cr from what a 2026-07-28 call carries: a retry
// with the requestState of an upstream's input requests continues that
// call with the client's answers (relayinput.go); one with the state of
// an approval records the person's answer first. It returns the approver
// that notes an approval to put to the client, nil when the client cannot
// be asked (it declared no elicitation) or the call continues an earlier
// one (whose approval stands).
func (s *Server) modernRetry(ctx context.Context, cr *gateway.CallRequest, p *mcp.CallToolParamsRaw, mc modernCall) (*askedApprover, error) {
	var st *requestState
	if p.RequestState != "" {
		v, err := s.verifyState(*cr, p.RequestState, "tools/call")
		if err != nil {
			return nil, err
		}
		st = &v
	}
	if st != nil && st.Call != "" {
		return nil, s.continueInput(cr, *st, p.InputResponses)
	}
	if st == nil && len(p.InputResponses) > 0 {
		// Answers with no state to echo (an upstream that asked without
		// one): handed on with a call of its own (relayinput.go).
		in, err := unboundAnswers(p.InputResponses)
		if err != nil {
			return nil, s.stateRefused(*cr, "tools/call", err.Error())
		}
		cr.Input = in
	}
	if !mc.elicits() {
		return nil, nil
	}
	if st != nil {
		if err := s.answerApproval(ctx, *cr, *st, p); err != nil {
			return nil, err
		}
	}
	asked := &askedApprover{}
	cr.Approver = asked
	return asked, nil
}

// modernAnswer is the MCP answer of a 2026-07-28 call's outcome: an
// approval to put to the client, or an upstream's input requests, as
// input_required; else the result, typed complete.
func (s *Server) modernAnswer(ctx context.Context, cr gateway.CallRequest, mc modernCall, asked *askedApprover, res *gateway.CallResult, err error) (*mcp.CallToolResult, error) {
	var ge *gateway.Error
	if asked != nil && asked.asked != nil && errors.As(err, &ge) && ge.Class == tool.ClassApprovalRequired {
		return s.inputRequired(ctx, cr, asked.asked), nil
	}
	var ir *tool.InputRequiredError
	if errors.As(err, &ge) && ge.Class == tool.ClassInputRequired && errors.As(err, &ir) {
		return s.relayInput(cr, mc, ge, ir), nil
	}
	if task, ok := s.callAsTask(ctx, cr, mc, err); ok {
		return nil, taskAnswer{task}
	}
	if mc.raw != nil && err == nil && res != nil {
		// The fast path's answer, as bytes where nothing needs the
		// result decoded (fastresult.go).
		// Room for the result twice (Backplane's own: as text and as
		// structuredContent) and its _meta: one allocation.
		buf := make([]byte, 0, len(mc.raw.prefix)+2*len(res.Result)+192)
		if b, ok := appendFastResult(append(buf, mc.raw.prefix...), res); ok {
			mc.raw.out = b
			return nil, nil
		}
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

// stateRefused is the refusal of a retry whose requestState does not
// hold, logged (rate-limited) with why.
func (s *Server) stateRefused(cr gateway.CallRequest, method, why string) error {
	s.refusals.warn(s.log, "request state "+cr.Caller, "2026-07-28 retry refused: its request state does not hold", "caller", cr.Caller, "tool", cr.Tool, "method", method, "reason", why)
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": requestState refused: " + why}
}

// verifyState checks the requestState of a retry of method against the
// call it comes with: signed by this server (or a replica with its key),
// unexpired, issued for this method, to this caller, for this tool (or
// prompt, or resource), this definition and these arguments.
func (s *Server) verifyState(cr gateway.CallRequest, state, method string) (requestState, error) {
	st, err := s.states.verify(state, time.Now())
	if err != nil {
		return st, s.stateRefused(cr, method, err.Error())
	}
	switch {
	case st.Method != method:
		return st, s.stateRefused(cr, method, "it was issued for "+st.Method)
	case st.Caller != cr.Caller:
		return st, s.stateRefused(cr, method, "it was issued to another caller")
	case st.Tool != cr.Tool:
		return st, s.stateRefused(cr, method, fmt.Sprintf("it was issued for %q", st.Tool))
	}
	if method != "tools/call" {
		return st, nil
	}
	digest, derr := canonjson.Digest(cr.Arguments)
	_, defHash, known := s.g.Tool(cr.Tool)
	switch {
	case derr != nil || digest != st.Digest:
		return st, s.stateRefused(cr, method, "it was issued for other arguments")
	case !known || defHash != st.DefHash:
		return st, s.stateRefused(cr, method, "the tool's definition changed since it was issued")
	}
	return st, nil
}

// answerApproval records the person's answer that a retry carries with
// the (verified) state st of an approval, when there is one. A state whose
// approval is not the call's or no longer pending (a replay) is invalid
// params; a retry without an answer goes on (the call is put to the person
// again).
func (s *Server) answerApproval(ctx context.Context, cr gateway.CallRequest, st requestState, p *mcp.CallToolParamsRaw) error {
	refuse := func(why string) error { return s.stateRefused(cr, "tools/call", why) }
	if st.Approval == "" {
		return refuse("it names no approval request")
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
