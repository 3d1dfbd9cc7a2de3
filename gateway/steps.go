package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/approval"
	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/store"
)

// approve finds or creates the approval request bound to this exact call
// and returns its id once approved.
func (c *call) approve(ctx context.Context) (string, error) {
	g, t := c.g, c.tool
	key := store.ApprovalKey{Caller: c.req.Caller, Tool: t.Name, DefinitionHash: t.defHash, ArgsDigest: c.digest}
	a, err := g.store.FindApproval(ctx, key, g.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		now := g.now()
		a = &store.Approval{
			ID: NewID("apr"), Caller: c.req.Caller, Session: c.req.Session, Tool: t.Name,
			DefinitionHash: t.defHash, ArgsDigest: c.digest, Status: store.ApprovalPending,
			CreatedAt: now, ExpiresAt: now.Add(g.approval.Expire),
		}
		if err := g.store.CreateApproval(ctx, a); err != nil {
			return "", c.storeFailure(ctx, "approve", err)
		}
		c.audit("approve", "requested", "approval_id", a.ID)
	case err != nil:
		return "", c.storeFailure(ctx, "approve", err)
	}

	approver := g.approval.Approver
	if c.req.Approver != nil {
		approver = c.req.Approver
	}
	if a.Status == store.ApprovalPending && approver != nil {
		if err := c.askApprover(ctx, approver, a); err != nil {
			return "", err
		}
	}
	wait := g.approval.Wait
	if c.req.ApprovalWait != nil {
		wait = *c.req.ApprovalWait
	}
	if a.Status == store.ApprovalPending && wait > 0 {
		if a, err = c.awaitDecision(ctx, a.ID, wait); err != nil {
			return "", err
		}
	}
	details := map[string]any{"approval_id": a.ID, "expires_at": a.ExpiresAt.UTC().Format(time.RFC3339)}
	if c.rule != "" {
		details["rule"] = c.rule // the policy rule that asked for the approval, if one did
	}
	switch store.EffectiveApprovalStatus(a, g.now()) {
	case store.ApprovalApproved:
		c.audit("approve", "approved", "approval_id", a.ID, "decided_by", a.DecidedBy)
		return a.ID, nil
	case store.ApprovalDenied:
		c.audit("approve", "denied", "approval_id", a.ID, "decided_by", a.DecidedBy)
		details["decided_by"] = a.DecidedBy
		return "", newError(ClassForbidden, "approve", fmt.Sprintf("the call was denied by %s", a.DecidedBy), details)
	case store.ApprovalExpired:
		c.audit("approve", "expired", "approval_id", a.ID)
		return "", newError(ClassForbidden, "approve", "the approval request expired before a decision; call again for a new one", details)
	}
	c.audit("approve", "pending", "approval_id", a.ID)
	return "", newError(ClassApprovalRequired, "approve",
		fmt.Sprintf("this call needs an approval: request %s is pending", a.ID), details)
}

// askApprover puts a pending request to the interactive approver, if any,
// and records its decision.
func (c *call) askApprover(ctx context.Context, approver approval.Approver, a *store.Approval) error {
	g := c.g
	d, err := approver.Ask(ctx, a)
	if errors.Is(err, approval.ErrNoDecision) {
		return nil
	}
	if err != nil {
		c.audit("approve", "approver_error", "approval_id", a.ID, "error", err.Error())
		return nil // the request stays pending; the wait below still applies
	}
	if d.At.IsZero() {
		d.At = g.now()
	}
	if err := g.store.DecideApproval(ctx, a.ID, d); err != nil && !errors.Is(err, store.ErrAlreadyDecided) {
		c.audit("approve", "decision_refused", "approval_id", a.ID, "error", err.Error())
		return newError(ClassForbidden, "approve", "the approver's decision was refused: "+err.Error(), map[string]any{"approval_id": a.ID})
	}
	fresh, err := g.store.GetApproval(ctx, a.ID)
	if err != nil {
		return c.storeFailure(ctx, "approve", err)
	}
	*a = *fresh
	return nil
}

// awaitDecision polls the store until the request is decided or expires, the
// wait ends or ctx is done. Polling (not an in-process signal) is what lets
// a decision made by another process, such as `backplane approvals approve`,
// release the call.
func (c *call) awaitDecision(ctx context.Context, id string, wait time.Duration) (*store.Approval, error) {
	g := c.g
	poll := g.approval.PollInterval
	if poll <= 0 {
		poll = approval.DefaultPollInterval
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	c.audit("approve", "waiting", "approval_id", id, "wait", wait.String())
	start, lastProgress := time.Now(), time.Now()
	for {
		a, err := g.store.GetApproval(ctx, id)
		if err != nil {
			return nil, c.storeFailure(ctx, "approve", err)
		}
		if store.EffectiveApprovalStatus(a, g.now()) != store.ApprovalPending {
			return a, nil
		}
		select {
		case <-ctx.Done():
			c.audit("approve", "cancelled", "approval_id", id)
			return nil, newError(ClassCancelled, "approve", "the call was cancelled while waiting for approval", map[string]any{"approval_id": id})
		case <-deadline.C:
			return a, nil
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
	res, err := t.Backend.Invoke(ictx, &backend.Call{
		CallID: c.id, Tool: t.Name, Caller: c.req.Caller, Session: c.req.Session, Arguments: c.req.Arguments,
	})
	sctx := context.WithoutCancel(ctx)

	if err != nil {
		status, class := store.StatusUncertain, ClassUnknownOutcome
		switch {
		case errors.Is(err, backend.ErrNotStarted):
			status, class = store.StatusFailed, ClassExecutionFailure
		case errors.Is(err, backend.ErrMalformedResult):
			class = ClassMalformedResult
		case errors.Is(ictx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			class = ClassTimeout
		case ctx.Err() != nil:
			class = ClassCancelled
		}
		msg := err.Error()
		if status == store.StatusUncertain {
			msg += " (the outcome is unknown: the call is marked uncertain and will not be re-run)"
		}
		return nil, c.settleError(sctx, status, class, msg)
	}
	if res != nil && len(res.Content) > g.maxRes {
		// It ran; its result is refused, not lost silently: the journal says so.
		return nil, c.settleError(sctx, store.StatusSucceeded, ClassResourceConflict,
			fmt.Sprintf("the result is %d bytes, over the limit of %d", len(res.Content), g.maxRes))
	}
	if res == nil || !validResult(res.Content) {
		return nil, c.settleError(sctx, store.StatusUncertain, ClassMalformedResult,
			"the backend's result is not one JSON value (the outcome is unknown: the call is marked uncertain)")
	}
	// Built by hand, not json.Marshal: Marshal would compact the content and
	// escape <, > and &, and a replay must return the bytes this call returns.
	stored := fmt.Appendf(nil, `{"is_error":%t,"content":%s}`, res.IsError, res.Content)
	if err := g.store.Settle(sctx, c.id, store.Settlement{Status: store.StatusSucceeded, Result: stored, At: g.now()}); err != nil {
		return nil, c.settleFailure(err)
	}
	c.audit("settle", "ok", "status", string(store.StatusSucceeded), "is_error", res.IsError)
	return &CallResult{CallID: c.id, Result: res.Content, IsError: res.IsError}, nil
}

func validResult(b json.RawMessage) bool {
	return len(b) > 0 && jsonstrict.Valid(b, &jsonstrict.Options{MaxBytes: 1 << 30}) == nil
}

func (c *call) settleError(ctx context.Context, status store.Status, class Class, msg string) error {
	st := store.Settlement{Status: status, ErrorClass: string(class), ErrorMessage: msg, At: c.g.now()}
	if err := c.g.store.Settle(ctx, c.id, st); err != nil {
		return c.settleFailure(err)
	}
	c.audit("settle", string(class), "status", string(status))
	return newError(class, "invoke", msg, map[string]any{"status": string(status)})
}

// settleFailure is the answer when the backend was invoked but its
// settlement could not be recorded: the tool may well have run, so the
// outcome is unknown, never a failure that invites a retry. The intent
// stays started (or was already marked uncertain by a recovery) and is
// never re-run by the gateway.
func (c *call) settleFailure(err error) error {
	c.audit("settle", "store_error", "error", err.Error())
	e := newError(ClassUnknownOutcome, "settle",
		"the tool was invoked but its outcome could not be recorded: "+err.Error()+
			" (the call is left for recovery to mark uncertain and will not be re-run)",
		map[string]any{"status": "unknown"})
	e.cause = err
	return e
}
