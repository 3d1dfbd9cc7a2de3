package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// Calls whose backend needs the client's input first (MCP 2026-07-28
// multi round-trip requests, SEP-2322).
//
// An upstream that answers a tools/call with input_required has not
// completed the call: the revision makes each attempt an independent
// request, and the retry carrying the client's answers is a request of its
// own, which the server completes (or asks again). So the journal records
// the rounds as calls of their own:
//
//   - The first attempt's intent is settled failed, class input_required,
//     when the backend returns *tool.InputRequiredError: its outcome is
//     known (the upstream answered, and what it answered is "not done
//     yet"), so it is not uncertain; its budget is released, and the
//     approval it consumed stays consumed by it.
//   - The retry is a new call (CallRequest.Continues names the attempt it
//     continues, CallRequest.Input carries the answers and the upstream's
//     own state). It goes through the whole pipeline again (lookup,
//     validation, policy, budget and its own durable intent), but for the
//     approval: the call it continues was approved for exactly this
//     caller, tool, definition and arguments, and the continuation is that
//     same call's next round, not a second call.
//   - The continuation is recorded under the idempotency key
//     continuationKey(Continues): one continuation per attempt. A retry
//     made twice with the same answers (a replayed request state, a client
//     that resends) gets the first one's recorded outcome, and a
//     continuation whose outcome is unknown is never run again.
//
// A continuation may itself answer input_required (another round); each
// round continues the one before it.
//
// Answers without a call to continue (CallRequest.Input alone: a client
// answering an upstream that asked with no request state of its own to
// echo) are handed to the backend with a call of its own, which goes
// through every step, its approval included.

// continuationKey is the idempotency key under which the continuation of
// the call callID is recorded.
func continuationKey(callID string) string { return "continues:" + callID }

// continuing checks that the call named by CallRequest.Continues is one
// this call may continue, and makes this call its continuation.
func (c *call) continuing(ctx context.Context) error {
	id := c.req.Continues
	refuse := func(why string) error {
		c.audit("approve", "continuation_refused", "continues", id, "reason", why)
		return newError(tool.ClassForbidden, "approve", "this call cannot continue call "+id+": "+why, map[string]any{"continues": id})
	}
	prev, err := c.g.store.GetIntent(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return refuse("no such call")
	}
	if err != nil {
		return c.storeFailure(ctx, "approve", err)
	}
	switch {
	case prev.Caller != c.req.Caller:
		return refuse("it is another caller's")
	case prev.Tool != c.tool.Name || prev.DefinitionHash != c.tool.defHash || prev.ArgsDigest != c.digest:
		return refuse("it is a call of another tool, definition or arguments")
	case prev.Status != store.StatusFailed || prev.ErrorClass != string(tool.ClassInputRequired):
		return refuse(fmt.Sprintf("it is %s (%s), not waiting for the client's input", prev.Status, prev.ErrorClass))
	}
	c.continued = id
	c.req.IdempotencyKey = continuationKey(id)
	return nil
}

// settleInputRequired settles the intent of a call whose backend needs the
// client's input before it completes: failed, class input_required (the
// call did not complete; see above), and answers the error that carries
// the backend's requests to the front end (errors.As finds the
// *tool.InputRequiredError).
func (c *call) settleInputRequired(ctx context.Context, in *tool.InputRequiredError) error {
	msg := fmt.Sprintf("the upstream server %s asked for the client's input (%d request(s)) before completing the call: this call did not complete; the client's retry with the answers continues it", in.Server, len(in.Requests))
	e := newError(tool.ClassInputRequired, "invoke", msg, map[string]any{"status": string(store.StatusFailed), "server": in.Server})
	e.cause = in
	// The journal keeps the server that asked, not its requests nor their
	// state: those are the live answer's, for the client to answer by
	// calling again (a rebuilt answer tells it to call again).
	return c.settle(ctx, store.Settlement{Status: store.StatusFailed, ErrorClass: string(tool.ClassInputRequired), ErrorMessage: msg, ErrorDetail: errorDetail(e)},
		e, "server", in.Server)
}
