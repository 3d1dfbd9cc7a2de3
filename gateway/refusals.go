package gateway

// Refused calls as rows of the store (store.Refusal), beside the intents:
// every decision is recorded, not only the calls that ran, so that the
// console and the CLI of any replica list the denied, invalid,
// approval-pending and over-budget calls too. A call records its refusal
// at the one point it is refused: where its audit event is written
// (call.execute), with nothing of its arguments but their digest.

import (
	"context"
	"github.com/agentbackplane/backplane/tool"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// refusalWrites bounds the refusals being written at once: past it a
// refusal is not recorded (and counted in RefusalsDropped), so that a
// flood of refused calls cannot queue without bound behind a slow store.
const refusalWrites = 8

// refusalTimeout bounds one refusal's write: the caller's answer waits for
// it (so that the row is there when the answer is), but never long.
const refusalTimeout = 2 * time.Second

// recordRefusal records that c was refused with ge, when the store keeps
// refusals. A call that was journaled (its intent has the outcome), one in
// preview, and one whose client went away are not refusals.
func (c *call) recordRefusal(ctx context.Context, ge *Error) {
	g := c.g
	rs, ok := g.store.(store.Refusals)
	if !ok || c.committed || c.preview || ge.Class == tool.ClassCancelled {
		return
	}
	select {
	case g.refusalSem <- struct{}{}:
	default:
		g.refusalsDropped.Add(1)
		return
	}
	defer func() { <-g.refusalSem }()
	r := store.Refusal{
		CallID: c.id, Caller: c.req.Caller, Session: c.req.Session, Tool: c.req.Tool,
		Class: string(ge.Class), Step: ge.Step, Message: store.TrimMessage(ge.Message),
		ArgsDigest: c.digest, At: g.now(),
	}
	if id, ok := ge.Details["approval_id"].(string); ok {
		r.ApprovalID = id
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refusalTimeout)
	defer cancel()
	if err := rs.RecordRefusals(wctx, []store.Refusal{r}); err != nil {
		g.refusalsDropped.Add(1)
		g.log.Debug("refusal not recorded", "call_id", c.id, "error", err.Error())
	}
}

// RefusalsDropped counts the refusals this gateway did not record (too
// many at once, or the store failed).
func (g *Gateway) RefusalsDropped() int64 { return g.refusalsDropped.Load() }

// ListRefusals lists recorded refusals, newest first; none when the store
// keeps none.
func (g *Gateway) ListRefusals(ctx context.Context, f store.RefusalFilter) ([]store.Refusal, error) {
	rs, ok := g.store.(store.Refusals)
	if !ok {
		return nil, nil
	}
	return rs.ListRefusals(ctx, f)
}
