package gateway

// Operator actions. Every front end (the CLI, the MCP server's elicitation
// path, the web console) decides approvals, resolves uncertain intents and
// accepts changed tool definitions through these methods: each applies its
// rules and writes its one audit event here, and nowhere else.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// Channel is how an operator action reached the gateway.
type Channel string

const (
	ChannelCLI         Channel = "cli"
	ChannelConsole     Channel = "console"
	ChannelElicitation Channel = "elicitation" // the person at the caller's own client
)

// ApprovalDecision is a person's verdict on an approval request.
type ApprovalDecision struct {
	// Operator is who decides: an operator's name, or for
	// ChannelElicitation the caller whose client was asked.
	Operator string
	Approve  bool
	Reason   string
	Channel  Channel
}

// OperatorError is a refused operator action. Class is stable:
// not_found, not_operator, not_approver, self_approval, expired,
// already_decided, not_uncertain, not_pinned, changed, bad_reset. Each
// class is of one kind, which errors.Is matches: [ErrActionNotFound],
// [ErrActionForbidden], [ErrActionConflict] or [ErrActionInvalid]; the
// cause (a sentinel of this package or of package store) is matched too.
type OperatorError struct {
	Class   string
	Message string
	err     error
}

// The kinds of refused operator actions, what a front end answers with
// (for HTTP: 404, 403, 409, 400). Every *OperatorError matches exactly
// one of them with errors.Is.
var (
	// ErrActionNotFound: what the action names does not exist (not_found).
	ErrActionNotFound = errors.New("no such record")
	// ErrActionForbidden: the person may not take it (not_operator,
	// not_approver, self_approval).
	ErrActionForbidden = errors.New("not permitted")
	// ErrActionConflict: the record's state does not allow it (expired,
	// already_decided, not_uncertain, not_pinned, changed), or the
	// upstream's authorization server did not let a login start
	// (login_failed).
	ErrActionConflict = errors.New("not in a state that allows it")
	// ErrActionInvalid: the request itself is malformed (bad_reset,
	// bad_revoke, bad_login).
	ErrActionInvalid = errors.New("invalid request")
)

// operatorKinds is the kind of each class.
var operatorKinds = map[string]error{
	"not_found":    ErrActionNotFound,
	"not_operator": ErrActionForbidden, "not_approver": ErrActionForbidden, "self_approval": ErrActionForbidden,
	"expired": ErrActionConflict, "already_decided": ErrActionConflict, "not_uncertain": ErrActionConflict,
	"not_pinned": ErrActionConflict, "changed": ErrActionConflict,
	"bad_reset": ErrActionInvalid, "bad_revoke": ErrActionInvalid, "bad_login": ErrActionInvalid,
	"login_failed": ErrActionConflict,
}

func (e *OperatorError) Error() string { return e.Message }

// Unwrap exposes the class's kind and the cause.
func (e *OperatorError) Unwrap() []error {
	out := make([]error, 0, 2)
	if k, ok := operatorKinds[e.Class]; ok {
		out = append(out, k)
	}
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

func opError(class, msg string, err error) *OperatorError {
	return &OperatorError{Class: class, Message: msg, err: err}
}

// Sentinels of operator refusals not already in package store.
var (
	errNotOperator = errors.New("not a configured operator")
	errNotApprover = errors.New("not an approver of this request")
	errNotPinned   = errors.New("the tool is not pinned")
)

// isOperator reports whether name is a configured operator. With no
// operators configured, any name but an empty one is accepted (a single
// person's set-up; the configuration's operators section turns this off).
func (g *Gateway) isOperator(name string) bool {
	if name == "" {
		return false
	}
	if len(g.operators) == 0 {
		return true
	}
	return slices.Contains(g.operators, name)
}

// Operators lists the configured operators' names.
func (g *Gateway) Operators() []string { return slices.Clone(g.operators) }

// approverRule is who may decide the requests of (caller, tool).
func (g *Gateway) approverRule(caller, tool string) policy.ApproverRule {
	if p, ok := g.policy.(policy.Approvers); ok {
		return p.ApproverRule(caller, tool)
	}
	return policy.ApproverRule{}
}

// DecideApproval decides a pending approval request. The rules:
//   - through the CLI or the console, only an operator decides (see
//     isOperator), one the policy names among the request's approvers, and
//     never the caller of the request;
//   - through elicitation, only the caller's own person, and only where a
//     policy rule sets self_approve;
//   - the request is still pending and not expired.
//
// The decision records who decided, the channel and the reason.
func (g *Gateway) DecideApproval(ctx context.Context, id string, d ApprovalDecision) (*store.Approval, error) {
	verb := map[bool]string{true: "approve", false: "deny"}[d.Approve]
	refuse := func(e *OperatorError) (*store.Approval, error) {
		g.log.Warn("approval", "approval_id", id, "step", "decide", "outcome", "refused", "decision", verb,
			"by", d.Operator, "channel", string(d.Channel), "reason", e.Class, "error", e.Message)
		return nil, e
	}
	a, err := g.store.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(opError("not_found", fmt.Sprintf("no approval request %s", id), err))
	}
	if err != nil {
		return nil, fmt.Errorf("reading approval %s: %w", id, err)
	}
	rule := g.approverRule(a.Caller, a.Tool)
	switch d.Channel {
	case ChannelElicitation:
		if d.Operator != a.Caller {
			return refuse(opError("not_approver", fmt.Sprintf("an elicitation decides only for the caller's own person, not %s", d.Operator), errNotApprover))
		}
		if !rule.SelfApprove {
			return refuse(opError("self_approval", fmt.Sprintf(
				"%s cannot approve its own call of %s: no policy rule sets self_approve for it; an operator decides", a.Caller, a.Tool), store.ErrSelfApproval))
		}
	case ChannelCLI, ChannelConsole:
		if !g.isOperator(d.Operator) {
			return refuse(opError("not_operator", fmt.Sprintf("%q is not a configured operator (operators: %v)", d.Operator, g.operators), errNotOperator))
		}
		if d.Operator == a.Caller {
			return refuse(opError("self_approval", fmt.Sprintf("%s made the call of request %s and cannot decide it: someone else must", d.Operator, id), store.ErrSelfApproval))
		}
		if !rule.MayApprove(d.Operator) {
			return refuse(opError("not_approver", fmt.Sprintf("%s is not among the approvers of %s calling %s (%v)", d.Operator, a.Caller, a.Tool, rule.Approvers), errNotApprover))
		}
	default:
		return nil, fmt.Errorf("gateway: DecideApproval: unknown channel %q", d.Channel)
	}
	now := g.now()
	err = g.store.DecideApproval(ctx, id, store.ApprovalDecision{Approve: d.Approve, By: d.Operator, At: now, Channel: string(d.Channel), Reason: d.Reason})
	switch {
	case errors.Is(err, store.ErrApprovalExpired):
		return refuse(opError("expired", fmt.Sprintf("approval request %s has expired; the caller must call again for a new one", id), err))
	case errors.Is(err, store.ErrAlreadyDecided):
		return refuse(opError("already_decided", fmt.Sprintf("approval request %s is already decided", id), err))
	case errors.Is(err, store.ErrNotFound):
		return refuse(opError("not_found", fmt.Sprintf("no approval request %s", id), err))
	case err != nil:
		return nil, fmt.Errorf("deciding approval %s: %w", id, err)
	}
	outcome := map[bool]string{true: "approved", false: "denied"}[d.Approve]
	g.log.Info("approval", "approval_id", id, "step", "decide", "outcome", outcome, "by", d.Operator,
		"channel", string(d.Channel), "reason", d.Reason, "caller", a.Caller, "tool", a.Tool)
	a.Status, a.DecidedBy, a.DecidedAt, a.Channel, a.Reason = store.ApprovalApproved, d.Operator, now, string(d.Channel), d.Reason
	if !d.Approve {
		a.Status = store.ApprovalDenied
	}
	g.events.publish(opsview.ApprovalEvent{Kind: "decided", Approval: *a})
	return a, nil
}

// ResolveIntent records an operator's finding about an uncertain call:
// it ran (executed) or not (which releases its budget). reason, why the
// operator concluded so, goes into the audit event (the journal keeps the
// verdict and who gave it). The record's error class then says what the
// operator found (store.ResolvedClass: executed, no class instead of
// unknown_outcome; not executed, execution_failure); that the call was
// uncertain stays in its status, its message and the audit event (was,
// was_error_class).
func (g *Gateway) ResolveIntent(ctx context.Context, callID string, executed bool, operator, reason string) (*store.Intent, error) {
	verdict := map[bool]string{true: "executed", false: "not_executed"}[executed]
	refuse := func(e *OperatorError) (*store.Intent, error) {
		g.log.Warn("resolve", "call_id", callID, "step", "resolve", "outcome", "refused", "verdict", verdict, "by", operator, "reason", e.Class)
		return nil, e
	}
	if !g.isOperator(operator) {
		return refuse(opError("not_operator", fmt.Sprintf("%q is not a configured operator", operator), errNotOperator))
	}
	// What it was before (uncertain, and its class), for the audit event:
	// the record's class then says what the operator found
	// (store.ResolvedClass).
	var wasClass string
	if prev, err := g.store.GetIntent(ctx, callID); err == nil {
		wasClass = prev.ErrorClass
	}
	err := g.store.ResolveIntent(ctx, callID, executed, operator, g.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return refuse(opError("not_found", fmt.Sprintf("no call %s in the journal", callID), err))
	case errors.Is(err, store.ErrNotUncertain):
		msg := fmt.Sprintf("call %s is not uncertain", callID)
		if in, gerr := g.store.GetIntent(ctx, callID); gerr == nil {
			msg = fmt.Sprintf("call %s is %s, not uncertain: only an uncertain call can be resolved", callID, in.Status)
		}
		return refuse(opError("not_uncertain", msg, err))
	case err != nil:
		return nil, fmt.Errorf("resolving %s: %w", callID, err)
	}
	g.log.Info("resolve", "call_id", callID, "step", "resolve", "outcome", verdict, "resolved_by", operator, "reason", reason,
		"was", string(store.StatusUncertain), "was_error_class", wasClass, "error_class", store.ResolvedClass(executed, wasClass))
	return g.store.GetIntent(ctx, callID)
}

// AcceptDefinition makes the current definition of a pinned (upstream) tool
// the accepted one, so that a held tool becomes callable. reviewed, when
// not empty, must be that definition's hash: what is accepted is what the
// operator reviewed.
func (g *Gateway) AcceptDefinition(ctx context.Context, tool, operator, reviewed string) (*opsview.Accepted, error) {
	refuse := func(e *OperatorError) (*opsview.Accepted, error) {
		g.log.Warn("pin", "tool", tool, "step", "accept", "outcome", "refused", "by", operator, "reason", e.Class)
		return nil, e
	}
	if !g.isOperator(operator) {
		return refuse(opError("not_operator", fmt.Sprintf("%q is not a configured operator", operator), errNotOperator))
	}
	t, current, ok := g.Tool(tool)
	switch {
	case !ok:
		return refuse(opError("not_found", fmt.Sprintf("no tool named %s is registered", tool), store.ErrNotFound))
	case !t.Pinned:
		return refuse(opError("not_pinned", fmt.Sprintf("%s is not an upstream tool: its definition comes from the configuration and is not pinned", tool), errNotPinned))
	case reviewed != "" && reviewed != current:
		return refuse(opError("changed", fmt.Sprintf("the definition of %s is now %s, not %s: review it again", tool, current, reviewed), store.ErrPinChanged))
	}
	pin, err := g.store.GetPin(ctx, tool)
	if err != nil {
		return nil, fmt.Errorf("reading the pin of %s: %w", tool, err)
	}
	if pin.AcceptedHash == current {
		return &opsview.Accepted{Tool: tool, DefinitionHash: current, AcceptedBy: pin.AcceptedBy, AlreadyAccepted: true}, nil
	}
	err = g.store.AcceptPin(ctx, tool, current, operator, g.now())
	if errors.Is(err, store.ErrPinChanged) {
		return refuse(opError("changed", fmt.Sprintf("the definition of %s changed again while it was being accepted: review it again", tool), err))
	}
	if err != nil {
		return nil, fmt.Errorf("accepting %s: %w", tool, err)
	}
	g.log.Info("pin", "tool", tool, "step", "accept", "outcome", "accepted", "by", operator,
		"definition_hash", current, "previous_hash", pin.AcceptedHash)
	return &opsview.Accepted{Tool: tool, DefinitionHash: current, AcceptedBy: operator}, nil
}

// ListApprovals lists approval requests, newest first, status as seen now.
func (g *Gateway) ListApprovals(ctx context.Context, f store.ApprovalFilter) ([]store.Approval, error) {
	return g.store.ListApprovals(ctx, f, g.now())
}

// GetApproval returns one request with the tool's description, the
// arguments pretty-printed, a preview of the call and how to decide it.
// Errors wrap store.ErrNotFound for an unknown id.
func (g *Gateway) GetApproval(ctx context.Context, id string) (*opsview.Approval, error) {
	a, err := g.store.GetApproval(ctx, id)
	if err != nil {
		return nil, err
	}
	a.Status = store.EffectiveApprovalStatus(a, g.now())
	v := &opsview.Approval{Approval: *a, Waiting: g.waiters.waiting(id)}
	if len(a.Arguments) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, a.Arguments, "", "  ") == nil {
			v.Arguments = buf.Bytes()
		} else {
			v.Arguments, _ = json.Marshal(string(a.Arguments))
		}
	}
	rule := g.approverRule(a.Caller, a.Tool)
	v.Approvers, v.SelfApprove = rule.Approvers, rule.SelfApprove
	if a.Status == store.ApprovalPending {
		v.HowToDecide = g.hints(id)
	}
	if t, _, ok := g.Tool(a.Tool); ok {
		v.Description = t.Description
		if p, ok := t.Backend.(tool.Previewer); ok && len(a.Arguments) > 0 {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			pv, err := p.Preview(pctx, &tool.Call{Tool: a.Tool, Caller: a.Caller, Session: a.Session, Arguments: a.Arguments})
			cancel()
			if err != nil {
				v.PreviewError = err.Error()
			} else {
				v.Preview = pv
			}
		}
	}
	return v, nil
}

// ApprovalHints lists the ways to decide request id (the CLI commands, the
// console URL), as told to callers and operators.
func (g *Gateway) ApprovalHints(id string) []string { return g.hints(id) }

// hints are the ways to decide request id.
func (g *Gateway) hints(id string) []string {
	if g.approval.Hints != nil {
		return g.approval.Hints(id)
	}
	// Real commands, no placeholder to fill in: an agent may pass them on
	// word for word (the host's Hints add --config and the console).
	return []string{
		fmt.Sprintf("backplane approvals approve %s", id),
		fmt.Sprintf("backplane approvals deny %s", id),
	}
}

// ListIntents lists journal entries, newest first.
func (g *Gateway) ListIntents(ctx context.Context, f store.IntentFilter) ([]store.Intent, error) {
	return g.store.ListIntents(ctx, f)
}

// GetIntent returns one journal entry; errors wrap store.ErrNotFound.
func (g *Gateway) GetIntent(ctx context.Context, callID string) (*store.Intent, error) {
	return g.store.GetIntent(ctx, callID)
}

// ListPins lists the pinned tools' records.
func (g *Gateway) ListPins(ctx context.Context) ([]opsview.Pin, error) {
	pins, err := g.store.ListPins(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]opsview.Pin, len(pins))
	for i, p := range pins {
		out[i] = opsview.Pin{Pin: p}
		if _, h, ok := g.Tool(p.Tool); ok {
			out[i].CurrentHash = h
		}
	}
	return out, nil
}

// BudgetUsage lists the budget held per (scope, key).
func (g *Gateway) BudgetUsage(ctx context.Context) ([]store.Usage, error) {
	return g.store.BudgetUsage(ctx)
}

// SubscribeApprovals returns a channel of the approval events of this
// process and a function that ends the subscription. A subscriber that
// does not keep up loses events (the channel is buffered; events are never
// waited for): a front end re-reads the list when it needs the truth.
func (g *Gateway) SubscribeApprovals() (<-chan opsview.ApprovalEvent, func()) {
	return g.events.subscribe()
}

type approvalEvents struct {
	mu   sync.Mutex
	subs map[chan opsview.ApprovalEvent]struct{}
}

func (e *approvalEvents) subscribe() (<-chan opsview.ApprovalEvent, func()) {
	ch := make(chan opsview.ApprovalEvent, 64)
	e.mu.Lock()
	if e.subs == nil {
		e.subs = map[chan opsview.ApprovalEvent]struct{}{}
	}
	e.subs[ch] = struct{}{}
	e.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			e.mu.Lock()
			delete(e.subs, ch)
			e.mu.Unlock()
			close(ch)
		})
	}
}

func (e *approvalEvents) publish(ev opsview.ApprovalEvent) {
	ev.Approval.Arguments = nil // subscribers read the request for them
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// approvalWaiters counts the calls of this process waiting on each request.
type approvalWaiters struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *approvalWaiters) add(id string, d int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	w.n[id] += d
	if w.n[id] <= 0 {
		delete(w.n, id)
	}
}

func (w *approvalWaiters) waiting(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[id] > 0
}
