package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
	"strings"
	"time"
)

// approve finds or creates the approval request bound to this exact call
// and returns its id once approved. The same caller, tool, definition and
// arguments get the same request back while it is open, never a second.
func (c *call) approve(ctx context.Context) (string, error) {
	g, t := c.g, c.tool
	key := store.ApprovalKey{Caller: c.req.Caller, Tool: t.Name, DefinitionHash: t.defHash, ArgsDigest: c.digest}
	var a *store.Approval
	var err error
	if c.req.ApprovalID != "" {
		// A task's call: its own request or none, never a new one.
		if a, err = c.givenApproval(ctx, key); err != nil {
			return "", err
		}
	} else {
		a, err = boundedRead(ctx, g.approval.ReadTimeout, func(rctx context.Context) (*store.Approval, error) {
			return g.store.FindApproval(rctx, key, g.now())
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			if a, err = c.createApproval(ctx, key); err != nil {
				return "", err
			}
		case err != nil:
			return "", c.storeFailure(ctx, "approve", err)
		}
	}

	wait := g.approval.Wait
	if c.req.ApprovalWait != nil {
		wait = min(max(*c.req.ApprovalWait, 0), MaxApprovalWait)
	}
	if c.req.ApprovalID != "" {
		wait = 0 // a task is run once its request is decided
	}
	if a.Status == store.ApprovalPending && g.approval.Approver != nil && c.req.Approver == nil {
		// An operator's own prompt (a terminal): it is its own bound.
		c.askApprover(ctx, a, g.approval.Approver, false)
		fresh, err := boundedRead(ctx, g.approval.ReadTimeout, func(rctx context.Context) (*store.Approval, error) {
			return g.store.GetApproval(rctx, a.ID)
		})
		if err != nil {
			return "", c.storeFailure(ctx, "approve", err)
		}
		a = fresh
	}
	// The person at the caller's own client is asked where a rule lets
	// them decide, whatever the wait: self_approve under approval_wait 0s
	// must not be an opt-in that does nothing.
	selfAsk := c.req.Approver != nil && g.approverRule(a.Caller, a.Tool).SelfApprove
	if a.Status == store.ApprovalPending && (wait > 0 || selfAsk) {
		g.waiters.add(a.ID, 1)
		a, err = c.awaitDecision(ctx, a, wait, selfAsk)
		g.waiters.add(a.ID, -1)
		if err != nil {
			return "", err
		}
	}
	if store.EffectiveApprovalStatus(a, g.now()) == store.ApprovalApproved && !c.holdWhileAway(ctx) {
		return "", c.withdraw(a)
	}
	details := map[string]any{"approval_id": a.ID, "expires_at": a.ExpiresAt.UTC().Format(time.RFC3339)}
	if c.rule != "" {
		details["rule"] = c.rule // the policy rule that asked for the approval, if one did
	}
	switch store.EffectiveApprovalStatus(a, g.now()) {
	case store.ApprovalApproved:
		c.audit("approve", "approved", "approval_id", a.ID, "decided_by", a.DecidedBy, "channel", a.Channel)
		c.approvedPath = a.ResolvedPath // the commit checks the call's path still leads there
		return a.ID, nil
	case store.ApprovalDenied:
		c.audit("approve", "denied", "approval_id", a.ID, "decided_by", a.DecidedBy, "channel", a.Channel)
		details["decided_by"] = a.DecidedBy
		msg := fmt.Sprintf("the call was denied by %s", a.DecidedBy)
		if a.Reason != "" {
			details["reason"] = a.Reason
			msg += ": " + a.Reason
		}
		return "", newError(tool.ClassForbidden, "approve", msg, details)
	case store.ApprovalExpired:
		c.audit("approve", "expired", "approval_id", a.ID)
		return "", newError(tool.ClassForbidden, "approve", "the approval request expired before a decision; call again for a new one", details)
	}
	c.audit("approve", "pending", "approval_id", a.ID)
	hints := g.hints(a.ID)
	details["how_to_decide"] = hints
	return "", newError(tool.ClassApprovalRequired, "approve", fmt.Sprintf(
		"this call needs an approval: request %s is pending. An operator decides it (%s); then make the same call again, with the same arguments, before %s",
		a.ID, strings.Join(hints, "; or "), a.ExpiresAt.UTC().Format(time.RFC3339)), details)
}

// boundedRead runs one store read of the approval step within timeout. The
// read outlives the end of a wait (a decision made just then is still
// seen) but never runs unbounded: a store that stops answering, even one
// that ignores its context, fails the read after timeout, and a caller
// that goes away is not kept waiting for it.
func boundedRead[T any](ctx context.Context, timeout time.Duration, read func(context.Context) (T, error)) (T, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel() // also ends a read still running when we stop waiting
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1) // the read may finish after we stopped waiting
	go func() {
		v, err := read(rctx)
		done <- result{v, err}
	}()
	var zero T
	select {
	case r := <-done:
		return r.v, r.err
	case <-rctx.Done():
		select {
		case r := <-done: // it answered just then
			return r.v, r.err
		default:
		}
		return zero, fmt.Errorf("the store did not answer within %s: %w", timeout, context.DeadlineExceeded)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// withdraw is the answer of a call whose client went away while it waited
// for an approval: the request stays as it is, for the client's retry.
func (c *call) withdraw(a *store.Approval) error {
	c.audit("approve", "withdrawn", "approval_id", a.ID)
	c.g.events.publish(opsview.ApprovalEvent{Kind: "withdrawn", Approval: *a})
	return newError(tool.ClassCancelled, "approve",
		"the call went away while waiting for approval; the request stays open for the same call made again", map[string]any{"approval_id": a.ID})
}

// holdWhileAway holds an approved call while its client is away
// (CallRequest.Away): a client that closed its transport and quit looks,
// for a while, like one whose connection broke and will resume, and the
// approval must be consumed only by a call whose client is there. It
// reports whether the client is there (at once, or back within the hold);
// false when ctx ended first or the hold reached MaxApprovalWait.
func (c *call) holdWhileAway(ctx context.Context) bool {
	if c.req.Away == nil || !c.req.Away() {
		return ctx.Err() == nil
	}
	poll := c.g.approval.PollInterval
	if poll <= 0 {
		poll = defaultPollInterval
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	bound := time.NewTimer(MaxApprovalWait)
	defer bound.Stop()
	for c.req.Away() {
		select {
		case <-ctx.Done():
			return false
		case <-bound.C:
			return false
		case <-tick.C:
		}
	}
	return ctx.Err() == nil
}

// createApproval opens a new request, unless an identical call opened one
// meanwhile (that one is returned) or the caller already has
// Options.Approvals.MaxPending pending ones: then nothing is created.
func (c *call) createApproval(ctx context.Context, key store.ApprovalKey) (*store.Approval, error) {
	g, t := c.g, c.tool
	now := g.now()
	// The store opens the request or gives back the one an identical call
	// opened meanwhile (in this process or another replica): operators see
	// one request, not many, and the caller's cap holds across replicas.
	a, created, err := g.store.OpenApproval(ctx, &store.Approval{
		ID: newID("apr"), Caller: key.Caller, Session: c.req.Session, Tool: t.Name,
		DefinitionHash: key.DefinitionHash, ArgsDigest: key.ArgsDigest, Arguments: c.req.Arguments,
		ResolvedPath: c.resolvedPath(),
		Status:       store.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(g.approval.Expire),
	}, g.approval.MaxPending)
	switch {
	case errors.Is(err, store.ErrTooManyPending):
		max := g.approval.MaxPending
		c.audit("approve", "too_many_pending", "pending", max, "max", max)
		return nil, newError(tool.ClassForbidden, "approve", fmt.Sprintf(
			"caller %s already has %d approval requests pending, the most allowed: no new request was created; wait for an operator to decide them or for them to expire",
			c.req.Caller, max), map[string]any{"pending": max, "max_pending": max})
	case err != nil:
		return nil, c.storeFailure(ctx, "approve", err)
	case !created:
		return a, nil
	}
	c.audit("approve", "requested", "approval_id", a.ID)
	g.events.publish(opsview.ApprovalEvent{Kind: "pending", Approval: *a, HowToDecide: g.hints(a.ID)})
	return a, nil
}

// askApprover puts a pending request to an interactive approver and records
// its answer through DecideApproval, under the same rules as any other
// decision. The approver of the call itself (the person at the caller's own
// client) is asked only where the policy lets that person decide.
func (c *call) askApprover(ctx context.Context, a *store.Approval, approver Approver, self bool) {
	g := c.g
	if self && !g.approverRule(a.Caller, a.Tool).SelfApprove {
		return // operators only: the caller's own client is not asked
	}
	ans, err := approver.Ask(ctx, a)
	if errors.Is(err, ErrNoDecision) {
		return
	}
	if err != nil {
		c.audit("approve", "approver_error", "approval_id", a.ID, "error", err.Error())
		return // the request stays pending; the wait goes on
	}
	d := ApprovalDecision{Operator: ans.By, Approve: ans.Approve, Reason: ans.Reason, Channel: Channel(ans.Channel)}
	if self {
		d.Operator, d.Channel = c.req.Caller, ChannelElicitation
	}
	if _, err := g.DecideApproval(ctx, a.ID, d); err != nil {
		c.audit("approve", "decision_refused", "approval_id", a.ID, "error", err.Error())
	}
}

// awaitDecision puts the request to the person at the caller's own client
// when selfAsk (bounded by Options.Approvals.SelfApproveTimeout), and polls
// the store until the request is decided or expires, the wait is over
// (wait has passed and the person's question is closed) or ctx is done.
// Polling (not an in-process signal) is what lets a decision made by
// another process, such as `backplane approvals approve`, release the call.
// A call whose client went away withdraws: the request stays as it is,
// for the client's retry, and is never consumed by this call.
func (c *call) awaitDecision(outer context.Context, a *store.Approval, wait time.Duration, selfAsk bool) (*store.Approval, error) {
	g, id := c.g, a.ID
	poll := g.approval.PollInterval
	if poll <= 0 {
		poll = defaultPollInterval
	}
	bound := wait
	if selfAsk {
		bound = max(wait, g.approval.SelfApproveTimeout)
	}
	c.audit("approve", "waiting", "approval_id", id, "wait", bound.String())
	// The wait's end: a timer, not a deadline on ctx, since the person's
	// question may keep the call waiting past it.
	waitTimer := time.NewTimer(wait)
	defer waitTimer.Stop()
	waitOver := false
	asked := make(chan struct{}) // closed once the person's question is over
	askCtx, cancelAsk := context.WithTimeout(outer, g.approval.SelfApproveTimeout)
	if selfAsk {
		askee := *a
		go func() {
			defer close(asked)
			c.askApprover(askCtx, &askee, c.req.Approver, true)
		}()
	} else {
		close(asked)
	}
	askDone := asked
	defer func() { cancelAsk(); <-askDone }()
	askOpen := selfAsk
	tick := time.NewTicker(poll)
	defer tick.Stop()
	start, lastProgress := time.Now(), time.Now()
	for {
		fresh, err := boundedRead(outer, g.approval.ReadTimeout, func(rctx context.Context) (*store.Approval, error) {
			return g.store.GetApproval(rctx, id)
		})
		if outer.Err() != nil {
			return a, c.withdraw(a)
		}
		if err != nil {
			return a, c.storeFailure(outer, "approve", err)
		}
		a = fresh
		if store.EffectiveApprovalStatus(a, g.now()) != store.ApprovalPending {
			return a, nil
		}
		if waitOver && !askOpen {
			return a, nil // the wait is over: approval_required
		}
		select {
		case <-outer.Done():
			return a, c.withdraw(a)
		case <-waitTimer.C:
			waitOver = true
		case <-asked:
			asked, askOpen = nil, false // answered (or not): poll on until the wait ends
		case <-tick.C:
			if c.req.Progress != nil && time.Since(lastProgress) >= time.Second {
				lastProgress = time.Now()
				c.req.Progress(id, time.Since(start))
			}
		}
	}
}

// invoke runs the backend under the tool's deadline and settles the intent.
// Settlement uses a context that outlives the caller's: an intent must not be
// left started because the caller went away.
func (c *call) invoke(ctx context.Context) (*CallResult, error) {
	g, t := c.g, c.tool
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = g.timeout
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bc := &tool.Call{
		CallID: c.id, Tool: t.Name, Caller: c.req.Caller, Session: c.req.Session, Arguments: c.req.Arguments,
		Asker:  c.req.Asker,
		Client: c.req.Client,
		Input:  c.req.Input,
		Path:   c.path, PathDenied: c.pathDenied,
		CallerToken: c.req.CallerToken,
	}
	ictx, bspan := c.startBackend(ictx, bc)
	began := time.Now()
	res, err := t.Backend.Invoke(ictx, bc)
	c.endBackend(bspan, res, err)
	c.mu.Lock()
	c.mark = time.Now() // the settle step's duration is the settlement's own
	c.invoked = c.mark.Sub(began)
	c.mu.Unlock()
	sctx := context.WithoutCancel(ctx)

	var invalid *tool.InvalidResultError
	if errors.As(err, &invalid) {
		return nil, c.settleInvalidResult(sctx, invalid) // invalidresult.go
	}
	var input *tool.InputRequiredError
	if errors.As(err, &input) {
		return nil, c.settleInputRequired(sctx, input) // continue.go
	}
	if err != nil {
		status, class := store.StatusUncertain, tool.ClassUnknownOutcome
		switch {
		case errors.Is(err, tool.ErrNotStarted):
			status, class = store.StatusFailed, tool.ClassExecutionFailure
		case errors.Is(err, tool.ErrMalformedResult):
			class = tool.ClassMalformedResult
		case errors.Is(ictx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			class = tool.ClassTimeout
		case ctx.Err() != nil:
			class = tool.ClassCancelled
		}
		msg := err.Error()
		if status == store.StatusUncertain {
			msg += " (the outcome is unknown: the call is marked uncertain and will not be re-run)"
		}
		var de tool.DetailedError
		var detail []byte
		if errors.As(err, &de) {
			// What the caller needs to act (a URL to open) is its answer's
			// only: the journal keeps the names of what was withheld, so
			// that an answer rebuilt from it says so (settledAnswer).
			detail = withheldDetail(de.ErrorDetails())
		}
		serr := c.settle(sctx, store.Settlement{Status: status, ErrorClass: string(class), ErrorMessage: msg, ErrorDetail: detail},
			newError(class, "invoke", msg, map[string]any{"status": string(status)}))
		if ge, ok := serr.(*Error); ok && de != nil {
			for k, v := range de.ErrorDetails() {
				if _, taken := ge.Details[k]; !taken {
					ge.Details[k] = v
				}
			}
		}
		return nil, serr
	}
	if res != nil && len(res.Content) > g.maxRes {
		// It ran; its result is refused, not lost silently: the journal says so.
		return nil, c.settleError(sctx, store.StatusSucceeded, tool.ClassResourceConflict,
			fmt.Sprintf("the result is %d bytes, over the limit of %d", len(res.Content), g.maxRes))
	}
	if res == nil || !validResult(res.Content) {
		return nil, c.settleError(sctx, store.StatusUncertain, tool.ClassMalformedResult,
			"the backend's result is not one JSON value (the outcome is unknown: the call is marked uncertain)")
	}
	stored := store.EncodeResult(store.Result{IsError: res.IsError, Content: res.Content})
	if err := g.store.Settle(sctx, c.id, store.Settlement{Status: store.StatusSucceeded, Result: stored, At: g.now()}); err != nil {
		return nil, c.settleFailure(err)
	}
	g.noteStoreWrite(nil)
	c.audit("settle", "ok", "status", string(store.StatusSucceeded), "is_error", res.IsError)
	return &CallResult{CallID: c.id, Result: res.Content, IsError: res.IsError}, nil
}

func validResult(b json.RawMessage) bool {
	if len(b) == 0 {
		return false
	}
	p := getParser(len(b))
	defer putParser(p, len(b))
	_, err := p.Parse(b, &resultLimits)
	return err == nil
}

// resultLimits bound the check of a result: its size is the gateway's
// MaxResultBytes to cap, checked before.
var resultLimits = jsonstrict.Options{MaxBytes: 1 << 30}

func (c *call) settleError(ctx context.Context, status store.Status, class tool.Class, msg string) error {
	return c.settle(ctx, store.Settlement{Status: status, ErrorClass: string(class), ErrorMessage: msg},
		newError(class, "invoke", msg, map[string]any{"status": string(status)}))
}

// settle records st, at now, for a call that ends with error e (st's
// class and message), and returns e: the audit's settle step says so,
// with attrs beside the status.
func (c *call) settle(ctx context.Context, st store.Settlement, e *Error, attrs ...any) error {
	st.At = c.g.now()
	if err := c.g.store.Settle(ctx, c.id, st); err != nil {
		return c.settleFailure(err)
	}
	c.g.noteStoreWrite(nil)
	c.audit("settle", st.ErrorClass, append([]any{"status", string(st.Status)}, attrs...)...)
	return e
}

// settleFailure is the answer when the backend was invoked but its
// settlement could not be recorded: the tool may well have run, so the
// outcome is unknown, never a failure that invites a retry. The intent
// stays started (or was already marked uncertain by a recovery) and is
// never re-run by the gateway.
func (c *call) settleFailure(err error) error {
	c.g.noteStoreWrite(err)
	c.audit("settle", "store_error", "error", err.Error())
	e := newError(tool.ClassUnknownOutcome, "settle",
		"the tool was invoked but its outcome could not be recorded: "+err.Error()+
			" (the call is left for recovery to mark uncertain and will not be re-run)",
		map[string]any{"status": "unknown"})
	e.cause = err
	return e
}
