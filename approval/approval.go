// Package approval holds what the gateway's approval step can be configured
// with. Approval requests themselves are persisted by the store (see
// store.Approval): each is bound to one exact call (caller, tool, the tool's
// definition hash, the digest of the canonical arguments), expires, is
// decided once by someone other than its caller, and is consumed by one call.
package approval

import (
	"context"
	"errors"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// DefaultPollInterval is how often a waiting call re-reads its request.
const DefaultPollInterval = 100 * time.Millisecond

// Options configure the approval step.
type Options struct {
	// Expire is how long a request stays open, and an approval usable.
	// Default 10 minutes.
	Expire time.Duration
	// Wait is how long a call waits for a decision before it returns
	// approval_required with the request id. Zero (or negative) means do
	// not wait: it returns at once. The same holds for every approval wait
	// in Backplane (server.Options.ApprovalWait, gateway.CallRequest's
	// override, the configuration's approvals.wait and serve.approval_wait),
	// whose defaults, where they have one, apply only when left unset.
	Wait time.Duration
	// PollInterval is how often a waiting call re-reads the request.
	PollInterval time.Duration
	// Approver, when set, is asked for a decision as soon as a request is
	// pending: a terminal prompt, an MCP elicitation.
	Approver Approver
}

// Approver obtains a decision from a person, interactively.
type Approver interface {
	// Ask presents the request and returns the decision, whose By names the
	// person (never the caller: the store refuses self-approval). It returns
	// ErrNoDecision when none was made; the request then stays pending.
	Ask(ctx context.Context, req *store.Approval) (store.Decision, error)
}

// ErrNoDecision means an Approver could not obtain a decision.
var ErrNoDecision = errors.New("approval: no decision was made")
