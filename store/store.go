// Package store defines what the gateway keeps durably: call intents (the
// journal), budget reservations, approval requests and process incarnations.
//
// The contract every implementation keeps (checked by the shared suite in
// store/storetest, run against memstore, sqlite and postgres):
//
//   - CommitIntent is one atomic, durable step: the idempotency check, the
//     budget check and reservation, the consumption of an approval and the
//     intent row (status started) all happen, or none does, and it returns
//     only once the transaction is synced to stable storage. Concurrent
//     commits may share one sync (group commit).
//   - A reservation never takes a (scope, key) above its quota in its window
//     (each Window of a (scope, key) counts apart; the zero Window is for
//     ever), whatever the concurrency; reservations are idempotent by call
//     id.
//   - Budget is released only when an intent settles failed (proven not to
//     have run) or an operator resolves an uncertain intent as not executed.
//   - An intent leaves started exactly once. A started intent whose
//     incarnation is dead becomes uncertain at the next Recover (which Open
//     runs); never while its incarnation is alive. Nothing is ever re-run.
//   - An approval is decided once, before it expires, and is consumed by
//     exactly one call. Who may decide it is the gateway's rule.
//   - Prune deletes only what has ended (settled intents, expired approvals
//     and tasks, finished incarnations, ended windows, refusals, expired
//     logins in progress) before its cut; a
//     started or uncertain intent is never pruned.
//   - Refused calls are kept as light rows (Refusal), at most MaxRefusals,
//     the oldest dropped first.
//   - Upstream OAuth credentials (Credential) are one row per (server,
//     caller), their token sealed by the gateway (the store holds no key);
//     a replacement given the sealed value it read replaces only that one.
//     Prune never touches them.
//   - A task (Task: a call behind an approval that its client polls) is
//     one per approval request and moves only forward, each move once
//     (CheckTaskMove): of two processes claiming it, one wins.
package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/budget"
	"time"
)

// Status is the state of an intent in the journal.
type Status string

const (
	StatusStarted   Status = "started"   // durable, backend may be running
	StatusSucceeded Status = "succeeded" // the backend returned a result (possibly a tool-level error)
	StatusFailed    Status = "failed"    // the backend proved nothing ran; budget released
	StatusUncertain Status = "uncertain" // the outcome is unknown: never re-run automatically
	// An operator's resolution of an uncertain intent.
	StatusExecuted    Status = "executed"
	StatusNotExecuted Status = "not_executed" // budget released
)

// Terminal reports whether no further automatic transition can happen.
func (s Status) Terminal() bool { return s != StatusStarted && s != StatusUncertain }

// Intent is one call's journal entry.
type Intent struct {
	CallID         string `json:"call_id"`
	Caller         string `json:"caller"`
	Session        string `json:"session,omitempty"`
	Tool           string `json:"tool"`
	DefinitionHash string `json:"definition_hash"`
	Arguments      []byte `json:"-"` // exactly as received and validated
	ArgsDigest     string `json:"args_digest"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	ApprovalID     string `json:"approval_id,omitempty"`
	Incarnation    string `json:"incarnation"`
	Status         Status `json:"status"`
	Result         []byte `json:"-"`                       // JSON result when succeeded
	ErrorClass     string `json:"error_class,omitempty"`   // why it failed or is uncertain
	ErrorMessage   string `json:"error_message,omitempty"` // for people
	// ErrorDetail is what the error the call settled with told its caller
	// beside its class and message (the gateway's JSON: every violation of
	// a refused result, the upstream server that asked for input), so an
	// answer rebuilt from the journal is the one the call gave; nil when
	// there was nothing more. Never what reaches the caller only (a login
	// URL: tool.DetailedError).
	ErrorDetail []byte    `json:"-"`
	ResolvedBy  string    `json:"resolved_by,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	SettledAt   time.Time `json:"settled_at,omitzero"`
	// ClientInfo names the MCP client that made the call ("name/version")
	// and ProtocolVersion the MCP revision it spoke, as the gateway was
	// told them; "" when unknown. They describe the caller's software,
	// never the call's arguments.
	ClientInfo      string `json:"client,omitempty"`
	ProtocolVersion string `json:"protocol_version,omitempty"`
}

// CommitRequest is everything CommitIntent writes in one transaction.
type CommitRequest struct {
	Intent       Intent // Status and Incarnation are set by the store
	Reservations []budget.Reservation
	// ApprovalID names an approved request to consume; "" when none is needed.
	ApprovalID string
}

// Settlement is how a started intent ends.
type Settlement struct {
	Status       Status // succeeded, failed or uncertain
	Result       []byte
	ErrorClass   string
	ErrorMessage string
	ErrorDetail  []byte // Intent.ErrorDetail
	At           time.Time
}

// IntentFilter selects journal entries; zero fields match everything.
type IntentFilter struct {
	Status Status
	Caller string
	Tool   string
	Limit  int // 0 means a default of 100
}

// ApprovalStatus is the state of an approval request. Expired is derived
// from ExpiresAt when a pending request is read.
type ApprovalStatus string

const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalDenied   ApprovalStatus = "denied"
	ApprovalExpired  ApprovalStatus = "expired"
)

// Approval is a request for a person's decision on one exact call: the
// caller, the tool, the tool's definition hash and the arguments' digest.
type Approval struct {
	ID             string `json:"id"`
	Caller         string `json:"caller"`
	Session        string `json:"session,omitempty"`
	Tool           string `json:"tool"`
	DefinitionHash string `json:"definition_hash"`
	ArgsDigest     string `json:"args_digest"`
	// Arguments are the call's arguments exactly as received and validated,
	// so that whoever decides sees what they approve.
	Arguments []byte         `json:"-"`
	Status    ApprovalStatus `json:"status"`
	DecidedBy string         `json:"decided_by,omitempty"`
	// Channel is how the decision was made (cli, console, elicitation);
	// Reason is what the person who decided wrote, if anything.
	Channel   string    `json:"channel,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// ConsumedBy is the call id that used an approved request.
	ConsumedBy string `json:"consumed_by,omitempty"`
	// ResolvedPath is what the call's path argument led to when the
	// request was made (tool.ResolvedPath.Real: every link resolved,
	// relative to the workspace), "" for a tool without one (or a request
	// recorded before it was kept). The text of the arguments is what the
	// digest binds; this binds the file: a call whose path now leads
	// elsewhere (a link swapped, a relative path that names another file)
	// cannot use the request.
	ResolvedPath string `json:"resolved_path,omitempty"`
}

// ApprovalKey identifies the exact call an approval is bound to.
type ApprovalKey struct {
	Caller, Tool, DefinitionHash, ArgsDigest string
}

// ApprovalDecision is a resolver's verdict on an approval request. Who may decide
// is the gateway's rule (gateway.DecideApproval); the store records it.
type ApprovalDecision struct {
	Approve bool
	By      string
	At      time.Time
	Channel string
	Reason  string
}

// ApprovalFilter selects approval requests; zero fields match everything.
type ApprovalFilter struct {
	Status ApprovalStatus
	Caller string
	Limit  int // 0 means a default of 100
}

// Usage is the budget used in one (scope, key) and window.
type Usage struct {
	Scope  string        `json:"scope"`
	Key    string        `json:"key"`
	Window budget.Window `json:"window,omitzero"`
	// Quota is the quota of the latest reservation made in this usage (the
	// one in force then).
	Quota int64 `json:"quota"`
	Used  int64 `json:"used"`
}

// Store is the durable state of a gateway: the composition of the small
// interfaces below, which every implementation (memstore, sqlite, postgres)
// provides and the conformance suite in store/storetest checks together.
// Code that needs only a part asks for that part (the gateway asks for
// Journal, Approvals, Budgets, Pins and Retention; see gateway.Store). Implementations
// are safe for concurrent use.
type Store interface {
	// Incarnation is this process's incarnation id, recorded in each intent
	// it commits.
	Incarnation() string

	Journal
	Approvals
	Budgets
	Pins
	Retention
	Refusals
	Credentials
	PendingLogins
	Tasks

	Close() error
}

// Journal records call intents: one per call that passed the checks, from
// its commit to its settlement or an operator's resolution.
type Journal interface {
	// CommitIntent durably records a started intent with its reservations
	// and approval consumption. Errors: ErrDuplicateKey (with the existing
	// intent returned) when the caller already used the idempotency key;
	// a *BudgetError; ErrApprovalUnavailable.
	CommitIntent(ctx context.Context, req *CommitRequest) (existing *Intent, err error)
	// Settle ends a started intent of this incarnation. ErrNotStarted when it
	// is no longer started (e.g. recovery marked it uncertain) or belongs to
	// another incarnation.
	Settle(ctx context.Context, callID string, s Settlement) error
	GetIntent(ctx context.Context, callID string) (*Intent, error)
	// GetIntentByKey returns the caller's intent with this idempotency key,
	// or ErrNotFound.
	GetIntentByKey(ctx context.Context, caller, key string) (*Intent, error)
	ListIntents(ctx context.Context, f IntentFilter) ([]Intent, error)
	// ResolveIntent records an operator's verdict on an uncertain intent
	// (status executed or not_executed, ResolvedBy by, SettledAt at, its
	// ErrorClass as ResolvedClass says, its ErrorMessage kept: it tells
	// why the call was uncertain); not executed releases its budget.
	// ErrNotUncertain otherwise.
	ResolveIntent(ctx context.Context, callID string, executed bool, by string, at time.Time) error
	// Recover marks uncertain the started intents of incarnations that are
	// no longer alive, and returns how many it marked.
	Recover(ctx context.Context) (int, error)
}

// Approvals keeps approval requests (see Approval).
type Approvals interface {
	CreateApproval(ctx context.Context, a *Approval) error
	// OpenApproval records a, a new pending request, unless one is already
	// open for the same call (FindApproval's rule at a.CreatedAt): then it
	// returns that one and records nothing (created false). maxPending > 0
	// caps the pending requests of a.Caller: at the cap it records nothing
	// and returns ErrTooManyPending. It is atomic across every process
	// sharing the store, so replicas (or a hook's process beside serve)
	// racing on one call open one request, and the cap holds across them.
	OpenApproval(ctx context.Context, a *Approval, maxPending int) (got *Approval, created bool, err error)
	GetApproval(ctx context.Context, id string) (*Approval, error)
	// FindApproval returns the newest request for exactly this call that is
	// not expired at now and not consumed (pending, approved or denied: a
	// denial stands until it expires, so a retry does not ask again);
	// ErrNotFound when there is none.
	FindApproval(ctx context.Context, k ApprovalKey, now time.Time) (*Approval, error)
	ListApprovals(ctx context.Context, f ApprovalFilter, now time.Time) ([]Approval, error)
	// DecideApproval decides a pending request. Errors: ErrNotFound,
	// ErrApprovalExpired, ErrAlreadyDecided.
	DecideApproval(ctx context.Context, id string, d ApprovalDecision) error
}

// Budgets reports the budget held and lets an operator reset it.
// Reservations themselves are taken by Journal.CommitIntent, in the
// intent's transaction.
type Budgets interface {
	// BudgetUsage lists the budget held per (scope, key, window), by
	// scope, key, window length and window start.
	BudgetUsage(ctx context.Context) ([]Usage, error)
	BudgetOps
}

// Pin is the recorded definition of a tool from a source the gateway does
// not control (an MCP upstream): the hash seen at first sight is accepted;
// a later, different definition is held back until an operator accepts it.
type Pin struct {
	Tool         string    `json:"tool"`
	AcceptedHash string    `json:"accepted_hash"`
	SeenHash     string    `json:"seen_hash"` // the newest definition seen
	AcceptedBy   string    `json:"accepted_by,omitempty"`
	FirstSeen    time.Time `json:"first_seen"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Held reports whether the newest definition seen is not the accepted one.
func (p *Pin) Held() bool { return p.SeenHash != p.AcceptedHash }

// Pins records tool definitions (see Pin). Every store implements it.
type Pins interface {
	// SeePin records that tool's definition hash is now hash: at first
	// sight it is accepted; otherwise it becomes the seen hash. It returns
	// the pin as it stands.
	SeePin(ctx context.Context, tool, hash string, now time.Time) (*Pin, error)
	// GetPin returns the tool's pin, or ErrNotFound.
	GetPin(ctx context.Context, tool string) (*Pin, error)
	// AcceptPin makes the seen hash the accepted one. hash must be the seen
	// hash (ErrPinChanged otherwise: the definition changed again since the
	// operator looked).
	AcceptPin(ctx context.Context, tool, hash, by string, now time.Time) error
	ListPins(ctx context.Context) ([]Pin, error)
}

// HealthChecker is implemented by stores that can lose the right to work
// while their connection still answers, such as a PostgreSQL replica whose
// lease another replica took over: Healthy returns why it cannot serve.
// A server's health endpoint asks it, so a load balancer stops sending
// calls that would all be refused.
type HealthChecker interface {
	Healthy(ctx context.Context) error
}

// Errors of the contract; implementations wrap them with %w.
var (
	ErrNotFound            = errors.New("not found")
	ErrDuplicateKey        = errors.New("idempotency key already used")
	ErrBudgetExceeded      = errors.New("budget exceeded")
	ErrApprovalUnavailable = errors.New("approval not approved, already consumed, expired or for another call")
	ErrNotStarted          = errors.New("intent is not started by this incarnation")
	ErrNotUncertain        = errors.New("intent is not uncertain")
	// ErrSelfApproval is the gateway's refusal of a caller deciding its own
	// request where no rule lets it; stores do not return it.
	ErrSelfApproval    = errors.New("a caller cannot decide its own approval request")
	ErrApprovalExpired = errors.New("approval request expired")
	ErrAlreadyDecided  = errors.New("approval request already decided")
	ErrPinChanged      = errors.New("the tool's definition changed again; review it and accept the new hash")
	ErrTooManyPending  = errors.New("the caller has as many approval requests pending as allowed")
)

// BudgetError reports the reservation that would exceed its quota.
type BudgetError struct {
	Scope, Key             string
	Used, Requested, Quota int64
	// Window is the reservation's window; zero when the budget has none.
	Window budget.Window
}

func (e *BudgetError) Error() string {
	msg := fmt.Sprintf("budget exceeded for %s %q: used %d + requested %d > quota %d", e.Scope, e.Key, e.Used, e.Requested, e.Quota)
	if !e.Window.IsZero() {
		msg += fmt.Sprintf(" in the %v window from %s; it resets at %s", e.Window.Per,
			e.Window.Start.UTC().Format(time.RFC3339), e.Window.End().UTC().Format(time.RFC3339))
	}
	return msg
}

func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// EffectiveApprovalStatus is the status of a as seen at now: a pending
// request past its expiry is expired.
func EffectiveApprovalStatus(a *Approval, now time.Time) ApprovalStatus {
	if a.Status == ApprovalPending && !now.Before(a.ExpiresAt) {
		return ApprovalExpired
	}
	return a.Status
}

// Decide is the state transition every store applies to request a (as
// read, locked, by the store): the decision names who decides, and the
// request is still pending at d.At. Who may decide (operators, approvers,
// self-approval) is decided before, by the gateway (gateway.DecideApproval).
// It returns the status to record, or the contract's error; stores only
// persist the result.
func Decide(a *Approval, d ApprovalDecision) (ApprovalStatus, error) {
	if d.By == "" {
		return "", fmt.Errorf("approval %s: a decision must name who decides", a.ID)
	}
	switch EffectiveApprovalStatus(a, d.At) {
	case ApprovalExpired:
		return "", fmt.Errorf("approval %s: %w", a.ID, ErrApprovalExpired)
	case ApprovalPending:
	default:
		return "", fmt.Errorf("approval %s (%s): %w", a.ID, a.Status, ErrAlreadyDecided)
	}
	if d.Approve {
		return ApprovalApproved, nil
	}
	return ApprovalDenied, nil
}

// ResolvedClass is the error class of an uncertain intent of class class
// once an operator resolved it: executed, the call ran, so unknown_outcome
// (the outcome is unknown) no longer holds and the intent has no error
// class, while a class that says what went wrong with its answer
// (timeout, cancelled, malformed_result) stays; not executed, the call did
// not run: execution_failure, the class of a call proven not run (what an
// idempotent retry of it answers). That it was uncertain stays in the
// record: only an uncertain intent is resolved (its status says it was),
// ResolvedBy names the operator, and ErrorMessage is kept. Every store
// applies this rule.
func ResolvedClass(executed bool, class string) string {
	switch {
	case !executed:
		return classExecutionFailure
	case class == classUnknownOutcome:
		return ""
	}
	return class
}

// The classes ResolvedClass names: tool.ClassExecutionFailure and
// tool.ClassUnknownOutcome, as strings (the store keeps classes as the
// strings they are and does not import package tool; a gateway test pins
// that they agree).
const (
	classExecutionFailure = "execution_failure"
	classUnknownOutcome   = "unknown_outcome"
)

// Released reports whether an intent in status s no longer holds budget.
func Released(s Status) bool { return s == StatusFailed || s == StatusNotExecuted }
