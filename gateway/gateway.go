// Package gateway is the execution gateway every tool call of an agent
// passes through. For each call, in this order (D19), each step leaving no
// trace of any later step when it refuses:
//
//  1. lookup of the tool by exact name (not_found);
//  2. validation of the arguments against the tool's compiled schema, every
//     violation reported (validation, unsupported_capability); one strict
//     parse of the arguments serves validation and their canonical digest
//     (and the policy's Go values, built only for a decision that reads
//     them) where the validator is the subset one;
//  3. authorization by the policy in force, on the validated arguments,
//     default deny (forbidden; a shell command that does not parse is
//     validation); a tool.PathResolver's path argument is decided on
//     the real path it resolves to as well as on its text, and the backend
//     is handed that resolution to use (tool.Call.Path);
//  4. approval, where the policy or the tool's safety flags demand it: a
//     persisted request bound to the caller, the tool, its definition hash
//     and the digest of the canonical arguments (approval_required while
//     pending, forbidden when denied). A call may wait for the decision
//     (Options.Approvals.Wait, CallRequest.ApprovalWait); the person at
//     the caller's own client is asked where a rule sets self_approve,
//     whatever the wait, within Options.Approvals.SelfApproveTimeout;
//     every store read of the step is bounded (ReadTimeout); an approval
//     is consumed only by a call whose client is there (a cancelled call
//     withdraws; one whose client is away, CallRequest.Away, holds);
//  5. budget reservation and 6. the durable intent, in one synced
//     transaction of the store (budget_exceeded, resource_conflict);
//  7. invocation of the backend with a deadline, then settlement: succeeded,
//     failed (proven not to have run) or uncertain (anything unproven).
//
// A call whose outcome is unknown is never invoked again: a repeated
// idempotency key returns the recorded outcome, or resource_conflict while
// the first call is running or uncertain.
//
// A call answered approval_required may be followed as a task instead of
// retried (tasks.go: OpenTask, GetTask, ClaimTask, RunTask): once its
// request is decided, one poller claims the task in the store and makes
// the call again with that request (CallRequest.ApprovalID), through the
// whole pipeline: it runs once, or gets the denial's or expiry's refusal.
//
// Decide runs steps 1 to 6 for a tool someone else runs (a coding agent's
// own tools, through its hook: package hook) and settles the intent at
// once as DecisionOnly; its backend is never invoked.
//
// The store (required: the gateway's promises are only as durable as it),
// policy, approver, budgets and backends are small interfaces a host can
// replace. Every call is written as one structured audit event (log/slog)
// when it returns to its caller, carrying the call id, caller, tool, the
// digest of the arguments (never their values), where and how the call
// ended, and each step it went through with its outcome and duration
// (docs/audit.md shows one). With Options.Tracer, a call is also
// an OpenTelemetry span, a child of the trace in the call's context, with
// the same steps as events and the backend as a child span whose context
// the backend receives (tool.Call.Trace); it too carries no values.
//
// The gateway is the audit log's one writer: what happens beside the calls
// (a request refused by a limit, a resource read, a request an upstream
// makes of a call's client) is written through [Gateway.Record]. A call's
// error is an *[Error] that matches its class (errors.Is(err,
// tool.ClassForbidden)). What front ends read (the journal, the overview,
// health, an approval under review) comes back as package opsview's
// types, filled here: no front end reads the store.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults.
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxResultBytes = 1 << 20
	DefaultApprovalExpiry = 10 * time.Minute
)

// Store is what the gateway needs of its store: the journal of intents
// (with the budget reservations it commits), approval requests, budget usage
// (for health, metrics and an operator's reset), tool pins and retention
// (pruning, paging the journal). Every store.Store is one:
// store/sqlite and store/postgres are durable, store/memstore is not.
type Store interface {
	store.Journal
	store.Approvals
	store.Budgets
	store.Pins
	store.Retention
}

// Options configure a Gateway. Store is required; every other zero field
// means the default.
type Options struct {
	// Store keeps intents, reservations, approvals and pins. Required: there
	// is no silent in-memory fallback, which would switch off the
	// durability promise (tests and examples pass memstore.New()
	// explicitly).
	Store Store
	// Policy authorizes calls. Default: deny everything.
	Policy policy.Policy
	// Budgets are the quotas reserved for each call. Default: none.
	Budgets []budget.Quota
	// Approvals configure the approval step.
	Approvals ApprovalOptions
	// TaskLease is how long a runner's claim on a task lasts unless it
	// renews it (it does, every third of it, while the call runs): a
	// running task whose lease lapsed was left by a runner that died, and
	// another runner acts on it (see tasks.go). Default 30 seconds.
	TaskLease time.Duration
	// Logger receives the audit events: one per call (see docs/audit.md)
	// and one per operator action. Default: discard.
	Logger *slog.Logger
	// Timeout bounds a backend call when its tool sets none. Default 30s.
	Timeout time.Duration
	// MaxResultBytes refuses larger results (resource_conflict). Default 1 MiB.
	MaxResultBytes int
	// Limits bound schemas and arguments (see inputschema.Limits).
	Limits inputschema.Limits
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Operators names the people who decide approvals, resolve intents and
	// accept definitions (see DecideApproval). None: any named person but
	// the caller (a single person's set-up).
	Operators []string
	// Tracer, when set, opens a span per call (see package tracing). Nil:
	// no spans, at no cost.
	Tracer trace.Tracer
}

// The gateway is a tool.Registry: an upstream registers its tools through it.
var _ tool.Registry = (*Gateway)(nil)

// registered is a tool with what registration derived from it.
type registered struct {
	tool.Tool
	validator tool.Validator
	schemaErr error  // the schema is outside the subset: every call fails with it
	defHash   string // digest of name, description and input schema
	// pinOK is when (pinClock) a pin check last found defHash accepted;
	// 0: never. A pinned tool's calls trust it for pinRecheck instead of
	// reading the store each time.
	pinOK atomic.Int64
}

// pinRecheck is how long a pinned tool found accepted is trusted without
// reading its pin again. A held tool is read at every call (so an
// acceptance, by this process or by an operator's command in another, lets
// the next call through), and a new definition is a new registration, so
// the only change this delays is another process accepting a different
// definition of the tool, which this process sees within pinRecheck.
var pinRecheck = time.Second

// pinClock is a monotonic clock for pinOK, never 0.
func pinClock() int64 { return int64(time.Since(pinEpoch)) + 1 }

var pinEpoch = time.Now()

// Gateway runs calls through the pipeline. It is safe for concurrent use.
type Gateway struct {
	store    Store
	policy   policy.Policy
	budgets  []budget.Quota
	approval ApprovalOptions
	lease    time.Duration // Options.TaskLease
	log      *slog.Logger
	timeout  time.Duration
	maxRes   int
	limits   inputschema.Limits
	now      func() time.Time
	tracer   trace.Tracer
	// conns is where the upstream credentials are (SetConnections).
	conns atomic.Pointer[connectionsBox]

	operators []string
	events    approvalEvents
	waiters   approvalWaiters
	mu        sync.RWMutex
	tools     map[string]*registered

	reloads reloads // ReloadPolicy, one at a time (reload.go)

	watchMu   sync.Mutex
	watchers  []func()                                       // OnChange
	lastWrite atomic.Pointer[writeFailure]                   // see storeWriteError
	upstreams atomic.Pointer[func() []opsview.UpstreamState] // see SetUpstreams
	// refusals being written, and those not recorded (see refusals.go)
	refusalSem      chan struct{}
	refusalsDropped atomic.Int64
}

// New returns a gateway with no tools. It panics when opts or opts.Store is
// nil: a gateway without a store is a programmer error (as http.Handle
// with a nil handler is), not a condition to handle at run time.
func New(opts *Options) *Gateway {
	if opts == nil || opts.Store == nil {
		panic("gateway.New: Options.Store is required (store/sqlite or store/postgres; store/memstore for tests)")
	}
	o := *opts
	g := &Gateway{
		store: o.Store, policy: o.Policy, budgets: o.Budgets, approval: o.Approvals, lease: o.TaskLease,
		log: o.Logger, timeout: o.Timeout, maxRes: o.MaxResultBytes, limits: o.Limits, now: o.Now,
		operators: slices.Clone(o.Operators), tools: map[string]*registered{}, tracer: o.Tracer,
		refusalSem: make(chan struct{}, refusalWrites),
	}
	if g.policy == nil {
		g.policy = policy.DenyAll{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.timeout <= 0 {
		g.timeout = DefaultTimeout
	}
	if g.maxRes <= 0 {
		g.maxRes = DefaultMaxResultBytes
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.lease <= 0 {
		g.lease = defaultTaskLease
	}
	if g.approval.Expire <= 0 {
		g.approval.Expire = DefaultApprovalExpiry
	}
	if g.approval.MaxPending <= 0 {
		g.approval.MaxPending = defaultMaxPending
	}
	g.approval.Wait = min(max(g.approval.Wait, 0), MaxApprovalWait)
	if g.approval.SelfApproveTimeout <= 0 {
		g.approval.SelfApproveTimeout = DefaultSelfApproveTimeout
	}
	g.approval.SelfApproveTimeout = min(g.approval.SelfApproveTimeout, policy.MaxSelfApproveTimeout)
	if g.approval.ReadTimeout <= 0 {
		g.approval.ReadTimeout = defaultApprovalReadTimeout
	}
	return g
}

// Register adds a tool. A missing name or backend, a name outside
// [A-Za-z0-9_.-]{1,128} (tool.ErrBadName), or a name already registered,
// is an error and nothing is registered. A schema outside the
// subset is registered unchanged (D20) and also returned as an error: hosts
// that author their schemas should treat it as fatal; adapters of MCP
// servers may log it, and every call of that tool then fails with it before
// its backend is invoked. ctx bounds the store writes of a pinned tool
// (its definition recorded, or held at first sight).
func (g *Gateway) Register(ctx context.Context, t tool.Tool) error {
	if t.Name == "" {
		return errors.New("gateway: tool name is required")
	}
	if err := tool.CheckName(t.Name); err != nil {
		return fmt.Errorf("gateway: tool %s: %w", termtext.Line(t.Name), err)
	}
	if t.Backend == nil {
		return fmt.Errorf("gateway: tool %s: backend is required", t.Name)
	}
	r := &registered{Tool: t, validator: t.Validator}
	if r.validator == nil {
		s, err := inputschema.Compile(t.InputSchema, &inputschema.CompileOptions{Limits: g.limits})
		if err != nil {
			r.schemaErr = err
		} else {
			r.validator = s
		}
	}
	r.defHash = tool.HashOf(t) // the descriptor counts: outputSchema, every hint
	if t.Pinned {
		if t.HoldUnseen {
			if err := g.holdUnseen(ctx, t.Name); err != nil {
				return fmt.Errorf("gateway: tool %s: record its definition: %w", t.Name, err)
			}
		}
		p, err := g.store.SeePin(ctx, t.Name, r.defHash, g.now())
		if err != nil {
			return fmt.Errorf("gateway: tool %s: record its definition: %w", t.Name, err)
		}
		if p.AcceptedHash == r.defHash {
			r.pinOK.Store(pinClock())
		}
	}
	g.mu.Lock()
	if _, ok := g.tools[t.Name]; ok {
		g.mu.Unlock()
		return fmt.Errorf("gateway: tool %s: %w", t.Name, tool.ErrAlreadyRegistered)
	}
	g.tools[t.Name] = r
	g.mu.Unlock()
	g.changed()
	if r.schemaErr != nil {
		return &tool.SchemaError{Tool: t.Name, Err: r.schemaErr}
	}
	return nil
}

// noAcceptedDefinition is the accepted hash of a pinned tool held at first
// sight (tool.Tool.HoldUnseen): no definition's hash, so every definition
// of it is held until an operator accepts one.
const noAcceptedDefinition = "none"

// holdUnseen records a pin that accepts nothing for a name never pinned:
// the first SeePin of a name accepts what it sees, so it sees
// noAcceptedDefinition first. The store offers no insert-if-absent of a
// held pin; between the read and the write another process seeing the
// tool at its own start would pin it accepted (that process's start
// trusts its catalog).
func (g *Gateway) holdUnseen(ctx context.Context, name string) error {
	_, err := g.store.GetPin(ctx, name)
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	_, err = g.store.SeePin(ctx, name, noAcceptedDefinition, g.now())
	return err
}

// Unregister removes a tool (an upstream's tool that disappeared or is about
// to be registered again with a new definition). It reports whether the tool
// was registered.
func (g *Gateway) Unregister(name string) bool {
	g.mu.Lock()
	_, ok := g.tools[name]
	delete(g.tools, name)
	g.mu.Unlock()
	if ok {
		g.changed()
	}
	return ok
}

// OnChange registers fn, called after each change of the catalog (a tool
// registered or unregistered), outside the gateway's locks, on the
// goroutine that made the change: fn must return quickly.
func (g *Gateway) OnChange(fn func()) {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	g.watchers = append(g.watchers, fn)
}

func (g *Gateway) changed() {
	g.watchMu.Lock()
	ws := slices.Clone(g.watchers)
	g.watchMu.Unlock()
	for _, fn := range ws {
		fn()
	}
}

// ToolsFor lists the tools the policy allows caller to call, by name.
func (g *Gateway) ToolsFor(caller string) []tool.Tool {
	var out []tool.Tool
	for _, t := range g.Tools() {
		if policy.Visible(g.policy, caller, t.Name) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b tool.Tool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Visible reports whether the tool name is registered and visible to
// caller (see [policy.Visible]): what a caller may learn of a name.
func (g *Gateway) Visible(caller, name string) bool {
	_, _, ok := g.Tool(name)
	return ok && policy.Visible(g.policy, caller, name)
}

// notFound is the refusal of an unknown tool, and of one the caller may not
// know of: the same words for both.
func notFound(name string) *Error {
	return newError(tool.ClassNotFound, "lookup", fmt.Sprintf("no tool named %q", name), nil)
}

// checkError is the refusal of arguments a backend's Check refused: the
// backend's own *Error when it returned one, else a validation error with
// its message.
func checkError(err error) *Error {
	var ge *Error
	if errors.As(err, &ge) {
		ge.Step = "validate"
		return ge
	}
	e := newError(tool.ClassValidation, "validate", err.Error(), nil)
	e.cause = err
	return e
}

// Tools lists the registered tools.
func (g *Gateway) Tools() []tool.Tool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]tool.Tool, 0, len(g.tools))
	for _, r := range g.tools {
		out = append(out, r.Tool)
	}
	return out
}

// Tool returns the named tool and its definition hash.
func (g *Gateway) Tool(name string) (tool.Tool, string, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	r, ok := g.tools[name]
	if !ok {
		return tool.Tool{}, "", false
	}
	return r.Tool, r.defHash, true
}

// Refusal says why every call of the named tool is refused before its
// backend is reached, because of its schema: the subset's error, or the
// refusal of a tool's own validator that cannot use its schema (one that
// has a Refusal() error method). nil when calls are validated, or when no
// such tool is registered.
func (g *Gateway) Refusal(name string) error {
	g.mu.RLock()
	r, ok := g.tools[name]
	g.mu.RUnlock()
	if !ok {
		return nil
	}
	if r.schemaErr != nil {
		return r.schemaErr
	}
	if rf, ok := r.validator.(interface{ Refusal() error }); ok {
		return rf.Refusal()
	}
	return nil
}

// CallRequest is one call of a tool.
type CallRequest struct {
	Caller    string
	Session   string
	Tool      string
	Arguments json.RawMessage
	// IdempotencyKey, when set, makes a repeated call with the same key
	// (by the same caller) return the first call's recorded outcome.
	IdempotencyKey string
	// ApprovalWait overrides Options.Approvals.Wait for this call when set
	// (0: do not wait; at most MaxApprovalWait).
	ApprovalWait *time.Duration
	// Approver, when set, is the person at this call's own client (MCP
	// elicitation). It is asked only where a policy rule sets self_approve
	// for the call, whatever ApprovalWait says (0 included), bounded by
	// Options.Approvals.SelfApproveTimeout; the call waits while it is
	// asked. Its answer is recorded as the caller's, through
	// ChannelElicitation.
	Approver Approver
	// Away, when set, reports whether the call's client is away: its
	// connection dropped and it has not come back yet. An approval
	// decided while the client is away is not consumed by the call: the
	// call holds until the client is back (then goes on) or ctx ends (the
	// client is gone for good: the call withdraws, and the approval stays
	// for the client's retry). Whoever sets Away ends ctx when the client
	// does not come back; the hold is bounded by MaxApprovalWait anyway.
	Away func() bool
	// Progress, when set, is called about once a second while the call
	// waits for an approval decision.
	Progress func(approvalID string, waited time.Duration)
	// Asker, when set, is handed to the backend with the call
	// (tool.Call.Asker): the person behind this call's connection, whom
	// ask_user_question asks.
	Asker tool.Asker
	// Client, when set, is handed to the backend with the call
	// (tool.Call.Client): the client behind this call's connection, to
	// which an upstream's progress, log messages and requests are relayed.
	Client tool.Client
	// CallerToken is handed to the backend with the call
	// (tool.Call.CallerToken): the caller's verified JWT, for a backend
	// that exchanges it. A secret: never recorded or audited.
	CallerToken string
	// ApprovalID, when set, is the approval request this call must use (a
	// task's: Gateway.RunTask): read by its id, never found by the call's
	// key nor created anew; a request for another call, or one already
	// used, refuses the call (forbidden), and the call does not wait.
	ApprovalID string
	// Input, when set, is handed to the backend with the call
	// (tool.Call.Input): the client's answers to the requests an earlier
	// call's backend made (*tool.InputRequiredError), with the state the
	// backend gave. It goes with Continues.
	Input *tool.InputAnswers
	// Continues, when set, is the id of the earlier call of this caller
	// whose backend answered *tool.InputRequiredError, and makes this call
	// its continuation (continue.go): the earlier call's approval stands
	// for it, and it is recorded under the idempotency key
	// continuationKey(Continues), so that a second retry carrying the same
	// answers replays this call's outcome instead of running it again.
	Continues string
	// ClientInfo names the MCP client that made the call ("name/version",
	// from its initialize or, in 2026-07-28, the request's _meta), and
	// ProtocolVersion the MCP revision it spoke: both recorded in the
	// call's audit event and its journal entry ("" when unknown: not MCP,
	// or not said).
	ClientInfo, ProtocolVersion string
}

// CallResult is the outcome of a call that ran.
type CallResult struct {
	CallID  string          `json:"call_id"`
	Result  json.RawMessage `json:"result"`
	IsError bool            `json:"is_error,omitempty"`
	// Replayed is set when the result is the recorded outcome of an earlier
	// call with the same idempotency key.
	Replayed bool `json:"replayed,omitempty"`
}

// Call runs one call through the pipeline. It returns a *CallResult when the
// backend produced a result (which may be a tool-level error: IsError), and
// otherwise an *Error whose Class says why.
func (g *Gateway) Call(ctx context.Context, req CallRequest) (*CallResult, error) {
	return (&call{g: g, req: req, id: newID("call")}).execute(ctx)
}

// execute runs c through the pipeline with its audit event and span: the
// one way a call (Call) and a decision (Decide) are run.
func (c *call) execute(ctx context.Context) (*CallResult, error) {
	c.startAudit(ctx)
	if c.g.tracer != nil {
		ctx = c.startSpan(ctx)
	}
	res, err := c.run(ctx)
	if err != nil {
		var ge *Error
		if !errors.As(err, &ge) {
			ge = newError(tool.ClassExecutionFailure, c.step, err.Error(), nil)
			ge.cause = err
		}
		if ge.Tool == "" {
			ge.Tool = c.req.Tool
		}
		if c.committed {
			ge.CallID = c.id
		}
		c.emitAudit(ctx, nil, ge)
		c.recordRefusal(ctx, ge)
		c.endSpan(nil, ge)
		return nil, ge
	}
	c.emitAudit(ctx, res, nil)
	c.endSpan(res, nil)
	return res, nil
}

// newID returns a unique, roughly time-ordered id with a prefix.
func newID(prefix string) string {
	ms := time.Now().UnixMilli()
	return prefix + "_" + strconv.FormatInt(ms, 36) + rand.Text()[:16]
}

// call is the state of one call through the pipeline.
type call struct {
	g    *Gateway
	req  CallRequest
	id   string
	step string
	tool *registered
	// pol is the policy in force when the call began (a *policy.Live's
	// current one): what validate asks whether the decision reads the
	// arguments is what decides it.
	pol       policy.Policy
	digest    string
	rule      string // the policy rule that authorized the call (file:line)
	committed bool
	span      trace.Span // nil: not traced
	// What the backend resolved the path argument to, and the policy's
	// deny check on other paths for walks (tool.Call.Path, PathDenied).
	path       *tool.ResolvedPath
	pathDenied func(real string) bool
	// decideOnly stops the call after its commit (Gateway.Decide): the
	// intent is settled as DecisionOnly and no backend is invoked.
	decideOnly bool
	// preview stops a decision after its approval step (DecideRequest.Preview).
	preview    bool
	approvalID string // the approval the commit consumed, if any
	// approvedPath is the resolved path recorded with the approval the
	// approval step returned (store.Approval.ResolvedPath): the commit
	// uses that approval only if this call's path leads there too.
	approvedPath string
	continued    string // the call this one continues (checked: continue.go)

	// The audit event's (and the span's) record of the steps; mu guards it
	// and step against an interactive approver's goroutine.
	mu      sync.Mutex
	auditOn bool // the logger takes call events at all
	steps   []auditStep
	start   time.Time
	mark    time.Time     // when the last step ended
	invoked time.Duration // how long the backend ran, if it was invoked
}

// run is the pipeline of the package doc, one method per step in its
// order; each step that refuses returns its error and leaves no trace of
// any later step.
func (c *call) run(ctx context.Context) (*CallResult, error) {
	if err := c.lookup(); err != nil {
		return nil, err
	}
	c.pol = c.g.policy
	if live, ok := c.pol.(*policy.Live); ok {
		c.pol = live.Load()
	}
	args, err := c.validate()
	if err != nil {
		return nil, err
	}
	needsApproval, err := c.authorize(ctx, args)
	if err != nil {
		return nil, err
	}
	if c.req.Continues != "" {
		if err := c.continuing(ctx); err != nil {
			return nil, err
		}
	}
	// A repeated idempotency key returns what is recorded, before any
	// approval or budget is asked for again.
	if prev, err := c.recorded(ctx); err != nil {
		return nil, err
	} else if prev != nil {
		return c.replay(prev)
	}

	// 4 to 6. Approval, then the budget reservation and the durable intent
	// in one transaction. An approval is consumed by one call only: an
	// identical call that found the same approved request and lost the race
	// to commit goes through the approval step once more, so it gets its
	// own request (approval_required, or a wait) rather than a forbidden
	// that reads like a denial.
	for retried := false; ; retried = true {
		approvalID, err := c.approveIfNeeded(ctx, needsApproval)
		if err != nil {
			return nil, err
		}
		if c.preview {
			if err := c.checkApprovedPath(approvalID); err != nil {
				return nil, err // what the commit would answer
			}
			c.audit("commit", "preview", "approval_id", approvalID)
			c.approvalID = approvalID
			return &CallResult{}, nil // nothing reserved, recorded or consumed
		}
		existing, again, err := c.commit(ctx, approvalID, retried)
		if again {
			continue
		}
		if existing != nil {
			return c.replay(existing)
		}
		if err != nil {
			return nil, err
		}
		break
	}
	if c.decideOnly {
		return c.settleDecision(ctx)
	}

	// 7. Invocation, then settlement.
	return c.invoke(ctx)
}

// lookup is step 1: the tool by exact name. A tool the caller's policy
// never allows nor puts to an approval looks exactly like an unknown one:
// no forbidden, no schema, no validation errors tell the caller it exists.
func (c *call) lookup() error {
	g := c.g
	g.mu.RLock()
	t, ok := g.tools[c.req.Tool]
	g.mu.RUnlock()
	if !ok || !policy.Visible(g.policy, c.req.Caller, t.Name) {
		c.audit("lookup", "not_found")
		return notFound(c.req.Tool)
	}
	c.tool = t
	return nil
}

// validate is step 2: the schema first (D4-D11), then every violation of
// the arguments, their digest, and the backend's own check of them, still
// before anything is approved, reserved or recorded. It returns the
// decoded arguments, which the policy decides on (nil when the policy
// says its decision does not read them: policy.ArgsReader).
//
// The arguments are parsed once (validateParsed) where the validator
// takes a parsed document under the limits the digest is computed under
// (the subset validator, inputschema, does); another validator parses
// them itself, and the digest parses them again.
func (c *call) validate() (any, error) {
	g, t := c.g, c.tool
	if t.schemaErr != nil {
		c.audit("validate", "unsupported_schema")
		return nil, schemaError("validate", t.schemaErr)
	}
	if dv, ok := t.validator.(docValidator); ok && effective(dv.ArgumentLimits()) == g.argOptions() {
		return c.validateParsed(dv)
	}
	if err := t.validator.ValidateJSONAll(c.req.Arguments); err != nil {
		c.audit("validate", "invalid")
		return nil, schemaError("validate", err)
	}
	// The arguments passed validation under g.limits; decode them for the
	// digest under the same limits, not jsonstrict's defaults.
	var digest string
	v, err := jsonstrict.Decode(c.req.Arguments, &jsonstrict.Options{MaxDepth: g.limits.MaxDepth, MaxBytes: g.limits.MaxArgumentBytes})
	if err == nil {
		digest, err = canonjson.DigestValue(v)
	}
	if err != nil {
		return nil, c.uncanonical(err)
	}
	c.digest = digest
	if err := c.check(); err != nil {
		return nil, err
	}
	c.audit("validate", "ok")
	return v, nil
}

// docValidator is a validator that takes arguments already parsed
// (inputschema.Schema): ValidateDocAll gives ValidateJSONAll's errors for
// a document parsed under ArgumentLimits.
type docValidator interface {
	ArgumentLimits() jsonstrict.Options
	ValidateDocAll(doc *jsonstrict.Doc) error
}

// parsers are the gateway's strict parsers, reused: once warm a parse of
// the arguments or of a result allocates nothing. A document over
// pooledParse bytes gets a parser of its own, so that the pool holds no
// large tape (nor a reference to a large document).
var parsers = sync.Pool{New: func() any { return new(jsonstrict.Parser) }}

const pooledParse = 64 << 10

// getParser returns a parser for a document of n bytes; putParser gives
// it back.
func getParser(n int) *jsonstrict.Parser {
	if n > pooledParse {
		return new(jsonstrict.Parser)
	}
	return parsers.Get().(*jsonstrict.Parser)
}

func putParser(p *jsonstrict.Parser, n int) {
	if n <= pooledParse {
		parsers.Put(p)
	}
}

// argOptions are the limits the arguments are parsed and digested under:
// g.limits, with jsonstrict's defaults (which are inputschema's) for a
// zero field.
func (g *Gateway) argOptions() jsonstrict.Options {
	return effective(jsonstrict.Options{MaxDepth: g.limits.MaxDepth, MaxBytes: g.limits.MaxArgumentBytes})
}

// effective is o with its zero fields set to the defaults they stand for.
func effective(o jsonstrict.Options) jsonstrict.Options {
	if o.MaxDepth <= 0 {
		o.MaxDepth = jsonstrict.DefaultMaxDepth
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = jsonstrict.DefaultMaxBytes
	}
	return o
}

// validateParsed is validate from one parse of the arguments: the schema
// checks the parsed document, the digest is written from it
// (canonjson.DigestDoc, the digest DigestValue gives of the decoded
// value), and the Go values the policy decides on are built from it only
// when the policy reads them. The outcome, its errors and its audit
// are validate's.
func (c *call) validateParsed(dv docValidator) (any, error) {
	g, t := c.g, c.tool
	p := getParser(len(c.req.Arguments))
	defer putParser(p, len(c.req.Arguments))
	opts := g.argOptions()
	doc, err := p.Parse(c.req.Arguments, &opts)
	if err != nil {
		// Refused as the validator refuses it, in its words (its
		// decoding error); the same parser and limits cannot accept it.
		verr := t.validator.ValidateJSONAll(c.req.Arguments)
		if verr == nil {
			return nil, c.uncanonical(err)
		}
		c.audit("validate", "invalid")
		return nil, schemaError("validate", verr)
	}
	if err := dv.ValidateDocAll(doc); err != nil {
		c.audit("validate", "invalid")
		return nil, schemaError("validate", err)
	}
	digest, err := canonjson.DigestDoc(doc)
	if err != nil {
		return nil, c.uncanonical(err)
	}
	c.digest = digest
	var args any
	if c.readsArgs() {
		args = doc.Value(0)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	c.audit("validate", "ok")
	return args, nil
}

// readsArgs reports whether the call's authorization needs its arguments
// as Go values: the policy reads them (one that cannot say does), or the
// backend resolves a path argument (the walk's deny check decides on the
// arguments with the path replaced).
func (c *call) readsArgs() bool {
	if _, ok := c.tool.Backend.(tool.PathResolver); ok {
		return true
	}
	ar, ok := c.pol.(policy.ArgsReader)
	return !ok || ar.ReadsArgs(c.req.Caller, c.tool.Name)
}

// uncanonical refuses arguments whose digest cannot be written.
func (c *call) uncanonical(err error) error {
	c.audit("validate", "invalid")
	return newError(tool.ClassValidation, "validate", "arguments cannot be canonicalised: "+err.Error(), nil)
}

// check is the backend's own check of the arguments (tool.Checker).
func (c *call) check() error {
	if ck, ok := c.tool.Backend.(tool.Checker); ok {
		if err := ck.Check(c.req.Arguments); err != nil {
			c.audit("validate", "invalid")
			return checkError(err)
		}
	}
	return nil
}

// authorize is step 3: default deny, on the validated arguments args; the
// policy in force now decides (a reload later does not change it). A path
// argument is decided on the file it leads to as well as on its text
// (tool.PathResolver): the backend later uses that file or fails. A
// pinned tool's definition must be the accepted one. It reports whether
// the policy or the tool's safety flags demand an approval.
func (c *call) authorize(ctx context.Context, args any) (needsApproval bool, _ error) {
	g, t := c.g, c.tool
	var realPath string
	if pr, ok := t.Backend.(tool.PathResolver); ok {
		rp, err := pr.ResolvePath(c.req.Arguments)
		if err != nil {
			// An escape or a loop: the text alone is decided, and the
			// backend, told why, refuses the call in its own words.
			rp = &tool.ResolvedPath{Field: "path", Err: err}
		}
		c.path, realPath = rp, rp.Real
		pol := g.policy
		c.pathDenied = func(real string) bool {
			return deniesPath(pol, c.req.Caller, c.req.Session, t.Name, args, rp.Field, real)
		}
	}
	d := c.pol.Decide(policy.Request{Caller: c.req.Caller, Session: c.req.Session, Tool: t.Name, Args: args, RealPath: realPath})
	if d.Err != nil {
		c.audit("authorize", "invalid", "reason", d.Reason)
		return false, newError(tool.ClassValidation, "authorize", d.Err.Error(), nil)
	}
	if !d.Allow {
		c.audit("authorize", "deny", "reason", d.Reason, "rule", d.Source)
		return false, newError(tool.ClassForbidden, "authorize", d.Reason, policyDetails(d))
	}
	if t.Pinned {
		if err := c.checkPin(ctx); err != nil {
			return false, err
		}
	}
	c.rule = d.Source
	c.audit("authorize", "allow", "reason", d.Reason, "rule", d.Source)
	return d.RequireApproval || t.Safety.RequiresApproval, nil
}

// recorded returns the journal's entry for the call's idempotency key,
// nil when there is no key or nothing is recorded under it.
func (c *call) recorded(ctx context.Context) (*store.Intent, error) {
	if c.req.IdempotencyKey == "" {
		return nil, nil
	}
	prev, err := c.g.store.GetIntentByKey(ctx, c.req.Caller, c.req.IdempotencyKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, c.storeFailure(ctx, "authorize", err)
	}
	return prev, nil
}

// approveIfNeeded is step 4: the approval, where needed, and the id of the
// approved request ("" when none was needed). An approval is consumed only
// by a call whose client is still there: a call whose client went away
// leaves it for the retry.
func (c *call) approveIfNeeded(ctx context.Context, needed bool) (string, error) {
	if !needed {
		c.audit("approve", "not_required")
		return "", nil
	}
	if c.continued != "" {
		// The call this one continues was approved (and consumed its
		// approval) for exactly this caller, tool, definition and
		// arguments: the retry carrying the client's answers is the same
		// call, not a second one to approve.
		c.audit("approve", "continued", "continues", c.continued)
		return "", nil
	}
	approvalID, err := c.approve(ctx)
	if err != nil {
		return "", err
	}
	if approvalID != "" && ctx.Err() != nil {
		c.audit("approve", "withdrawn", "approval_id", approvalID)
		return "", newError(tool.ClassCancelled, "approve",
			"the call went away before it could use its approval; the approval stays for the same call made again", map[string]any{"approval_id": approvalID})
	}
	return approvalID, nil
}

// commit is steps 5 and 6: the budget reservation, the approval consumed
// and the intent recorded as started, in one synced transaction of the
// store. It returns the intent already recorded under the call's
// idempotency key (to replay), or again when another identical call
// consumed the approval first and this one has not yet retried (the
// approval step runs once more).
func (c *call) commit(ctx context.Context, approvalID string, retried bool) (existing *store.Intent, again bool, _ error) {
	g, t := c.g, c.tool
	now := g.now()
	req := &store.CommitRequest{
		Intent: store.Intent{
			CallID: c.id, Caller: c.req.Caller, Session: c.req.Session, Tool: t.Name,
			DefinitionHash: t.defHash, Arguments: c.req.Arguments, ArgsDigest: c.digest,
			IdempotencyKey: c.req.IdempotencyKey, CreatedAt: now,
			ClientInfo: c.req.ClientInfo, ProtocolVersion: c.req.ProtocolVersion,
		},
		Reservations: budget.Plan(g.budgets, c.req.Caller, c.req.Session, t.Name, now),
		ApprovalID:   approvalID,
	}
	if err := c.checkApprovedPath(approvalID); err != nil {
		return nil, false, err
	}
	existing, err := g.store.CommitIntent(ctx, req)
	if err != nil {
		var be *store.BudgetError
		switch {
		case errors.As(err, &be):
			c.audit("reserve", "budget_exceeded", "scope", be.Scope, "key", be.Key)
			return nil, false, newError(tool.ClassBudgetExceeded, "reserve", be.Error(), budgetDetails(be))
		case errors.Is(err, store.ErrDuplicateKey) && existing != nil:
			return existing, false, nil
		case errors.Is(err, store.ErrApprovalUnavailable):
			if by := c.consumedByAnother(ctx, approvalID); by != "" && !retried {
				c.audit("commit", "approval_used_by_another", "approval_id", approvalID, "consumed_by", by)
				return nil, true, nil
			}
			c.audit("commit", "approval_unavailable")
			return nil, false, newError(tool.ClassForbidden, "commit", "the approval was used or expired before the call committed; call again", map[string]any{"approval_id": approvalID})
		}
		if ctx.Err() == nil {
			g.noteStoreWrite(err)
		}
		return nil, false, c.storeFailure(ctx, "commit", err)
	}
	g.noteStoreWrite(nil)
	c.committed = true
	c.audit("commit", "ok", "reservations", len(req.Reservations))
	if req.ApprovalID != "" {
		g.events.publish(opsview.ApprovalEvent{Kind: "consumed", Approval: store.Approval{
			ID: req.ApprovalID, Caller: c.req.Caller, Tool: t.Name, Status: store.ApprovalApproved, ConsumedBy: c.id}})
	}
	c.approvalID = req.ApprovalID
	return nil, false, nil
}

// resolvedPath is what the call's path argument led to when the policy
// decided (tool.ResolvedPath.Real), "" for a tool without a path argument
// or a path that could not be resolved (the backend refuses that one).
func (c *call) resolvedPath() string {
	if c.path == nil || c.path.Err != nil {
		return ""
	}
	return c.path.Real
}

// checkApprovedPath refuses to use approval id when the file the call's
// path leads to now is not the one it led to when the request was made:
// the digest binds the text of the arguments, and the same text may name
// another file since (a link swapped, a relative path that means another
// file). The approval is left unused.
func (c *call) checkApprovedPath(id string) error {
	now := c.resolvedPath()
	if id == "" || c.approvedPath == now {
		return nil
	}
	c.audit("commit", "path_changed", "approval_id", id, "approved_path", c.approvedPath, "resolved_path", now)
	was := fmt.Sprintf("%q", c.approvedPath)
	if c.approvedPath == "" {
		was = "no recorded path (the request predates resolved paths, or its path could not be resolved)"
	}
	field := "path"
	if c.path != nil && c.path.Field != "" {
		field = c.path.Field
	}
	return newError(tool.ClassForbidden, "commit", fmt.Sprintf(
		"approval request %s was made when the %s argument led to %s; it now leads to %q (a link swapped, or a relative path that names another file now): the approval was not used, and the call did not run",
		id, field, was, now), map[string]any{"approval_id": id, "approved_path": c.approvedPath, "resolved_path": now})
}

// consumedByAnother returns the id of the call that used approval id, when
// the store shows another call consumed it, and "" otherwise: not used
// (expired, or the store cannot say), or no approval at all.
func (c *call) consumedByAnother(ctx context.Context, id string) string {
	if id == "" {
		return ""
	}
	a, err := c.g.store.GetApproval(ctx, id)
	if err != nil || a.ConsumedBy == c.id {
		return ""
	}
	return a.ConsumedBy
}

// checkPin refuses a pinned tool whose registered definition is not the
// accepted one. An accepted definition is remembered for pinRecheck; a held
// one is read from the store at every call, since the operator may accept
// it from another process.
func (c *call) checkPin(ctx context.Context) error {
	if ok := c.tool.pinOK.Load(); ok != 0 && pinClock()-ok < int64(pinRecheck) {
		return nil
	}
	p, err := c.g.store.GetPin(ctx, c.tool.Name)
	if err != nil {
		return c.storeFailure(ctx, "authorize", err)
	}
	if p.AcceptedHash == c.tool.defHash {
		c.tool.pinOK.Store(pinClock())
		return nil
	}
	c.audit("authorize", "definition_held", "accepted_hash", p.AcceptedHash, "definition_hash", c.tool.defHash)
	return newError(tool.ClassForbidden, "authorize", fmt.Sprintf(
		"the definition of %s changed since it was first seen and is held back until an operator reviews it: backplane tools accept %s",
		c.tool.Name, c.tool.Name), map[string]any{"accepted_hash": p.AcceptedHash, "definition_hash": c.tool.defHash})
}

func (c *call) storeFailure(ctx context.Context, step string, err error) *Error {
	if ctx.Err() != nil {
		// The caller went away; the store refused for that reason, not
		// because it failed.
		c.audit(step, "cancelled", "error", err.Error())
		e := newError(tool.ClassCancelled, step, "the call was cancelled: "+err.Error(), nil)
		e.cause = err
		return e
	}
	c.audit(step, "store_error", "error", err.Error())
	e := newError(tool.ClassExecutionFailure, step, "the gateway's store failed: "+err.Error(), nil)
	e.cause = err
	return e
}

// sameArguments reports whether prev was recorded for this call's
// arguments. A journal written before the exact-number digest holds bare
// hex digests, which never equal a versioned one: those are compared by
// digesting the recorded arguments (kept as received) under today's rule,
// so a retry across an upgrade still replays instead of conflicting.
func (c *call) sameArguments(prev *store.Intent) bool {
	if prev.ArgsDigest == c.digest {
		return true
	}
	if strings.HasPrefix(prev.ArgsDigest, canonjson.DigestVersion) || prev.Arguments == nil {
		return false
	}
	v, err := jsonstrict.Decode(prev.Arguments, &jsonstrict.Options{MaxDepth: c.g.limits.MaxDepth, MaxBytes: c.g.limits.MaxArgumentBytes})
	if err != nil {
		return false
	}
	d, err := canonjson.DigestValue(v)
	return err == nil && d == c.digest
}

// replay answers a repeated idempotency key from the journal.
func (c *call) replay(prev *store.Intent) (*CallResult, error) {
	details := map[string]any{"call_id": prev.CallID, "status": string(prev.Status)}
	if prev.Tool != c.req.Tool || !c.sameArguments(prev) {
		c.audit("replay", "conflict", "previous_call_id", prev.CallID)
		return nil, newError(tool.ClassResourceConflict, "replay", "the idempotency key was used for a different call", details)
	}
	switch prev.Status {
	case store.StatusSucceeded:
		if prev.ErrorClass != "" { // it ran, but its result was refused (too large, invalid_result)
			c.audit("replay", "ok", "previous_call_id", prev.CallID)
			return nil, newError(tool.Class(prev.ErrorClass), "replay", prev.ErrorMessage, details)
		}
		c.audit("replay", "ok", "previous_call_id", prev.CallID)
		r, err := store.DecodeResult(prev.Result)
		if err != nil {
			return nil, newError(tool.ClassMalformedResult, "replay", "the recorded result cannot be read: "+err.Error(), details)
		}
		return &CallResult{CallID: prev.CallID, Result: r.Content, IsError: r.IsError, Replayed: true}, nil
	case store.StatusFailed, store.StatusNotExecuted:
		c.audit("replay", "ok", "previous_call_id", prev.CallID)
		return nil, newError(tool.ClassExecutionFailure, "replay", "the earlier call with this idempotency key did not run: "+prev.ErrorMessage, details)
	}
	c.audit("replay", "conflict", "previous_call_id", prev.CallID)
	return nil, newError(tool.ClassResourceConflict, "replay",
		fmt.Sprintf("the earlier call with this idempotency key is %s; it is never re-run automatically", prev.Status), details)
}

// policyDetails are the error details of a policy refusal: the deciding
// rule and, for a shell command, each part's decision.
func policyDetails(d policy.Decision) map[string]any {
	det := map[string]any{}
	if d.Source != "" {
		det["rule"] = d.Source
	}
	if len(d.Parts) > 0 {
		det["parts"] = d.Parts
	}
	if len(det) == 0 {
		return nil
	}
	return det
}

// deniesPath says whether the policy explicitly denies the call's tool on
// another path (a file a walk met): the call's arguments with the path
// member replaced by real, decided on real. Only an explicit deny (a rule
// that names it, a failed condition) counts; the default deny of a path
// no allow names does not hide a file from a walk the policy allowed.
func deniesPath(p policy.Policy, caller, session, tool string, args any, field, real string) bool {
	m, ok := args.(map[string]any)
	if !ok {
		return false
	}
	cp := make(map[string]any, len(m))
	for k, v := range m {
		cp[k] = v
	}
	cp[field] = real
	d := p.Decide(policy.Request{Caller: caller, Session: session, Tool: tool, Args: cp, RealPath: real})
	return !d.Allow && d.Source != ""
}
