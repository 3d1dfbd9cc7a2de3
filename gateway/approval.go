package gateway

// What the approval step can be configured with (the step itself is in
// steps.go: approveIfNeeded). Approval requests are persisted by the store
// (see store.Approval): each is bound to one exact call (caller, tool, the
// tool's definition hash, the digest of the canonical arguments), expires,
// is decided once, and is consumed by one call whose client is still
// there. Who may decide is the gateway's rule (Gateway.DecideApproval):
// operators, those a policy rule names as approvers, and the caller's own
// person through elicitation only where a rule sets self_approve.

import (
	"context"
	"errors"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// defaultPollInterval is how often a waiting call re-reads its request.
const defaultPollInterval = 100 * time.Millisecond

// defaultMaxPending is how many pending requests one caller may have open.
const defaultMaxPending = 16

// MaxApprovalWait bounds every wait for a decision (and every elicitation): the MCP
// SDK clients give up on a request after 60 seconds, and a call that
// outlives its client must not be the one that consumes the approval.
const MaxApprovalWait = 50 * time.Second

// DefaultSelfApproveTimeout bounds, by default, how long the person at a
// caller's own client has to answer an approval put to them (where a rule
// sets self_approve and the client can elicit). It is below the 60 seconds
// after which the MCP SDK clients give up on a request by default: a
// longer bound only helps clients whose request timeout is longer.
const DefaultSelfApproveTimeout = 50 * time.Second

// defaultApprovalReadTimeout bounds, by default, each store read of the approval
// step: a store that stops answering fails the call instead of holding
// it for ever.
const defaultApprovalReadTimeout = 10 * time.Second

// ApprovalOptions configure the approval step (Options.Approvals).
type ApprovalOptions struct {
	// Expire is how long a request stays open, and an approval usable.
	// Default 10 minutes.
	Expire time.Duration
	// Wait is how long a call waits for a decision before it returns
	// approval_required with the request id. Zero (or negative) means do
	// not wait: it returns at once. The same holds for every approval wait
	// in Backplane (server.Options.ApprovalWait, CallRequest's
	// override, the configuration's approvals.wait and serve.approval_wait),
	// whose defaults, where they have one, apply only when left unset.
	// At most MaxApprovalWait.
	Wait time.Duration
	// MaxPending caps the pending requests of one caller: beyond it a call
	// needing a new request is refused and nothing is created. Default
	// defaultMaxPending.
	MaxPending int
	// Hints, when set, returns the ways to decide request id that are told
	// to the caller and the operator (the CLI command with the
	// configuration path, the console URL). Default: the CLI commands.
	Hints func(id string) []string
	// PollInterval is how often a waiting call re-reads the request.
	PollInterval time.Duration
	// SelfApproveTimeout bounds how long the person at the caller's own
	// client (a per-call approver: CallRequest.Approver) has to
	// answer, where a rule sets self_approve. That person is asked whatever
	// Wait is (0 included): the call waits while the question is open, up
	// to this bound, then as long as Wait says. Default
	// DefaultSelfApproveTimeout; at most policy.MaxSelfApproveTimeout.
	SelfApproveTimeout time.Duration
	// ReadTimeout bounds each store read of the approval step (finding the
	// request, each poll of a wait). Default 10 seconds.
	ReadTimeout time.Duration
	// Approver, when set, is an operator's own prompt (a terminal), asked
	// as soon as a request is pending; its answer is decided as ApprovalAnswer.By
	// through ApprovalAnswer.Channel, under the gateway's rules. (The person at a
	// caller's own client is a per-call approver: CallRequest.)
	Approver Approver
}

// Approver obtains a decision from a person, interactively.
type Approver interface {
	// Ask presents the request and returns the answer. It returns
	// ErrNoDecision when none was made; the request then stays pending.
	// Whether the person who answered may decide is the gateway's rule
	// (Gateway.DecideApproval), applied to the answer.
	Ask(ctx context.Context, req *store.Approval) (ApprovalAnswer, error)
}

// ErrNoDecision means an Approver could not obtain a decision.
var ErrNoDecision = errors.New("approval: no decision was made")

// ApprovalAnswer is what an Approver obtained: the verdict, who gave it and
// through which channel ("elicitation": the person at the caller's own
// client; "cli": an operator at a terminal).
type ApprovalAnswer struct {
	Approve bool
	Reason  string
	By      string
	Channel string
}
