// Package console is the operators' web console of a Backplane gateway,
// served at /ui by `backplane serve` on the same listener as /mcp.
//
// What it promises:
//
//   - Only operators get in. Every page, form and JSON endpoint needs an
//     operator's token, either as `Authorization: Bearer TOKEN` or through
//     the login form, which keeps a random session id server-side and sets
//     it as an HttpOnly, SameSite=Strict cookie (the token itself is never
//     stored in the browser). A caller's token is refused with 403; any
//     other token, or none, with 401 (pages redirect to the login form).
//   - State-changing requests (decide an approval, resolve an uncertain
//     call, accept a definition, connect or revoke an upstream
//     connection, log in or out) are POSTs protected against cross-site
//     requests by http.CrossOriginProtection; requests whose Host is not
//     an allowed host are refused (DNS rebinding).
//   - Pages are server-rendered html/template documents that work without
//     JavaScript (the overview's charts are SVG drawn on the server); one
//     small embedded script adds live updates of pending approvals through
//     server-sent events (/ui/events) and re-reads the journal (with
//     auto-refresh on) and the upstreams page every few seconds. No build
//     step, no CDN: every asset is embedded with go:embed and served from
//     /ui/static/.
//
// The console reads and acts only through a Backend, which the gateway
// implements (see GatewayBackend); it keeps no state of its own besides
// login sessions.
package console

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"
)

// Errors a Backend wraps (with %w) so that the console answers with the
// right status; an unknown id wraps [store.ErrNotFound], the one
// not-found sentinel (the store's).
var (
	ErrConflict  = errors.New("conflict")  // e.g. already decided, expired, definition changed again
	ErrForbidden = errors.New("forbidden") // e.g. this operator may not decide this request
)

// Backend is what the console reads and does. Every method is called with
// the request's context; actions name the operator who asked.
type Backend interface {
	// ListApprovals returns approval requests, newest first; status ""
	// means every status. The arguments and the preview may be left out:
	// GetApproval has them.
	ListApprovals(ctx context.Context, status string, limit int) ([]Approval, error)
	// GetApproval returns one request with everything needed to decide it.
	GetApproval(ctx context.Context, id string) (*Approval, error)
	// DecideApproval records an operator's decision, made in the console.
	DecideApproval(ctx context.Context, id string, approve bool, operator, reason string) error

	// ListCalls returns journal entries matching q, newest first, and
	// whether more follow.
	ListCalls(ctx context.Context, q CallQuery) (calls []Call, more bool, err error)
	GetCall(ctx context.Context, id string) (*Call, error)

	Budgets(ctx context.Context) ([]Budget, error)

	Tools(ctx context.Context) ([]Tool, error)
	// AcceptDefinition accepts the definition of tool with hash (the one the
	// operator saw) as its pinned definition.
	AcceptDefinition(ctx context.Context, tool, hash, operator string) error

	Health(ctx context.Context) Health

	// ResolveCall records an operator's verdict on an uncertain call
	// (executed or not), with a reason.
	ResolveCall(ctx context.Context, id string, executed bool, operator, reason string) error
	// Overview counts the calls from since to until (see Overview).
	Overview(ctx context.Context, since, until time.Time) (*Overview, error)
	// Upstreams lists the upstream MCP servers and their state.
	Upstreams(ctx context.Context) []Upstream
}

// Notifier is implemented by Backends that can tell when approval
// requests change, so that live pages update at once rather than at the
// next poll. Changes returns a channel that receives after each change and
// a function that ends the subscription.
type Notifier interface {
	Changes() (<-chan struct{}, func())
}

// Approval is an approval request as the operator sees it.
type Approval struct {
	ID              string `json:"id"`
	Caller          string `json:"caller"`
	Session         string `json:"session,omitempty"`
	Tool            string `json:"tool"`
	ToolDescription string `json:"tool_description,omitempty"`
	// MainArg is the argument the tool is mainly about, as its
	// registration recorded it (tool.Tool.MainArg): what the request's
	// line shows. "" when the tool names none.
	MainArg   string          `json:"main_arg,omitempty"`
	Status    string          `json:"status"` // pending, approved, denied, expired, ...
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Diff is a unified diff of what a write or edit would change; Command
	// the command a bash call would run.
	Diff           string    `json:"diff,omitempty"`
	Command        string    `json:"command,omitempty"`
	DefinitionHash string    `json:"definition_hash,omitempty"`
	ArgsDigest     string    `json:"args_digest,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	DecidedBy      string    `json:"decided_by,omitempty"`
	Channel        string    `json:"channel,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	DecidedAt      time.Time `json:"decided_at,omitzero"`
	ConsumedBy     string    `json:"consumed_by,omitempty"`
	// PreviewError says why there is no diff or command to show.
	PreviewError string `json:"preview_error,omitempty"`
	// Approvers may decide (empty: any operator).
	Approvers []string `json:"approvers,omitempty"`
	// Waiting reports whether a call is waiting for the decision now.
	Waiting bool `json:"waiting"`
	// HowToDecide lists the other ways to decide (the CLI commands).
	HowToDecide []string `json:"how_to_decide,omitempty"`
	// Why says why the request asks and what deciding it lets run (nil
	// when the backend cannot tell).
	Why *Why `json:"why,omitempty"`
}

// Why is why an approval request asks, for its card.
type Why struct {
	// Effect, Rule (file:line) and Reason are the policy's decision on
	// the call now.
	Effect string `json:"effect"`
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ToolAsks: the tool itself requires approval (not read-only).
	ToolAsks bool `json:"tool_asks,omitempty"`
	// Parts are a shell command's simple commands with their decisions.
	Parts []Part `json:"parts,omitempty"`
	// Sandbox is where the call runs, when its backend says.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	// Source is the upstream server of the tool, if any.
	Source string `json:"source,omitempty"`
	// Deciders may decide; AnyOperator when the rule names no approvers;
	// SelfApprove lets the caller's person decide too.
	Deciders    []string `json:"deciders,omitempty"`
	AnyOperator bool     `json:"any_operator,omitempty"`
	SelfApprove bool     `json:"self_approve,omitempty"`
}

// Part is one simple command of a shell command, with its decision.
type Part struct {
	Text     string `json:"text"`
	Decision string `json:"decision"`
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Sandbox is the sandbox a call's process runs in.
type Sandbox struct {
	Sandboxed bool     `json:"sandboxed"`
	Network   string   `json:"network,omitempty"`
	Write     []string `json:"write,omitempty"`
	Read      []string `json:"read,omitempty"`
}

// CallQuery selects journal entries; zero fields match everything.
type CallQuery struct {
	Caller string
	Tool   string
	// Status is a journal status, or "tool_error" for calls whose tool ran
	// and reported an error.
	Status string
	// Caller and Tool are names or globs ("fs.*"); Class an error class;
	// Text is searched in ids and errors; Since and Until bound the time.
	Class        string
	Text         string
	Since, Until time.Time
	Offset       int
	Limit        int
}

// Call is one journal entry.
type Call struct {
	ID        string `json:"call_id"`
	Caller    string `json:"caller"`
	Session   string `json:"session,omitempty"`
	Tool      string `json:"tool"`
	Status    string `json:"status"`
	ToolError bool   `json:"tool_error,omitempty"` // the tool ran and reported an error
	// ResultRefused: the tool ran (status succeeded) and its structured
	// result broke its output schema (class invalid_result): the caller
	// got invalid_result, not the result, which is kept as it came.
	ResultRefused  bool            `json:"result_refused,omitempty"`
	ErrorClass     string          `json:"error_class,omitempty"`
	ErrorMessage   string          `json:"error_message,omitempty"`
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	ApprovalID     string          `json:"approval_id,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	DefinitionHash string          `json:"definition_hash,omitempty"`
	ResolvedBy     string          `json:"resolved_by,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	SettledAt      time.Time       `json:"settled_at,omitzero"`
	// Client and ProtocolVersion name the MCP client that made the call
	// and the revision it spoke, when known.
	Client          string `json:"client,omitempty"`
	ProtocolVersion string `json:"protocol_version,omitempty"`
	// Refused: the call was refused before it was journaled (Status
	// "refused", ErrorClass why, Step where); it has no arguments kept
	// but their digest.
	Refused    bool   `json:"refused,omitempty"`
	Step       string `json:"step,omitempty"`
	ArgsDigest string `json:"args_digest,omitempty"`
}

// Overview is the gateway's activity over a range, for the overview page.
type Overview struct {
	Since  time.Time     `json:"since"`
	Until  time.Time     `json:"until"`
	Bucket time.Duration `json:"bucket_ns"`
	// Buckets count calls by outcome (succeeded, tool_error, failed,
	// uncertain, started, resolved, refused:CLASS), oldest first.
	Buckets []Bucket       `json:"buckets"`
	Totals  map[string]int `json:"totals"`
	// P50 and P95 are the latencies of Settled calls.
	P50     time.Duration `json:"p50_ns"`
	P95     time.Duration `json:"p95_ns"`
	Settled int           `json:"settled"`
	// Pending approvals now; Decided in the range.
	Pending   int        `json:"pending"`
	Decided   int        `json:"decided"`
	Budgets   []Budget   `json:"budgets,omitempty"`
	Upstreams []Upstream `json:"upstreams,omitempty"`
	// Truncated: the range held more rows than one overview reads.
	Truncated bool `json:"truncated,omitempty"`
}

// Bucket is one interval of an Overview.
type Bucket struct {
	Start  time.Time      `json:"start"`
	Counts map[string]int `json:"counts"`
}

// Upstream is one upstream MCP server.
type Upstream struct {
	Name     string `json:"name"`
	Required bool   `json:"required"`
	Up       bool   `json:"up"`
	Restarts int    `json:"restarts"`
	Error    string `json:"error,omitempty"`
	// Phase: up, starting (never connected yet; retried), restarting (it
	// went down and is being reconnected), or "" when unknown.
	Phase string `json:"phase,omitempty"`
	// Protocol is the MCP revision the connection speaks ("" while down).
	Protocol string `json:"protocol,omitempty"`
	// Tools counts its tools in the catalog.
	Tools int `json:"tools"`
	// Refused, when its validator refuses some of its tools: which, the
	// keywords at fault, and the line that accepts them.
	Refused *RefusedServer `json:"refused,omitempty"`
}

// RefusedServer is a server whose validator refuses some of its tools
// (as serve's summary and tools list report it).
type RefusedServer struct {
	Server     string        `json:"server"`
	Line       string        `json:"line"` // FILE:LINE of the server's entry
	Validator  string        `json:"validator"`
	Tools      int           `json:"tools"`
	Refused    []RefusedTool `json:"refused"`
	Fix        string        `json:"fix"` // the line to set: "validator: draft2020-12"
	FixAccepts int           `json:"fix_accepts"`
}

// RefusedTool is a tool every call of which its server's validator
// refuses, with every keyword at fault.
type RefusedTool struct {
	Name         string   `json:"name"`
	Keywords     []string `json:"keywords"`
	OtherAccepts bool     `json:"other_accepts"`
}

// Budget is the use of one budget scope and key.
type Budget struct {
	Scope  string `json:"scope"`
	Key    string `json:"key"`
	Window string `json:"window,omitempty"`
	Used   int64  `json:"used"`
	Quota  int64  `json:"quota,omitempty"` // 0: unknown
}

// Tool is one tool of the catalog.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Source      string          `json:"source,omitempty"` // builtin, command, an upstream's name
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// OutputSchema is the schema of its structured results, when it
	// declares one (the built-ins do; an upstream's from its descriptor).
	OutputSchema     json.RawMessage `json:"output_schema,omitempty"`
	ReadOnly         bool            `json:"read_only"`
	Idempotent       bool            `json:"idempotent"`
	RequiresApproval bool            `json:"requires_approval"`
	DefinitionHash   string          `json:"definition_hash,omitempty"`
	Pin              *Pin            `json:"pin,omitempty"`
	// Down, for an upstream's tool, says why its server is down (its
	// calls fail until it is back); empty while it is up.
	Down string `json:"down,omitempty"`
}

// Pin is the recorded definition of a tool from a source the gateway does
// not control.
type Pin struct {
	AcceptedHash string    `json:"accepted_hash"`
	SeenHash     string    `json:"seen_hash"`
	AcceptedBy   string    `json:"accepted_by,omitempty"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
}

// Held reports whether the newest definition waits for an operator.
func (p *Pin) Held() bool { return p != nil && p.SeenHash != p.AcceptedHash }

// Health is the state of the gateway, for the health page.
type Health struct {
	// OK is false exactly when /readyz answers 503 (a store check fails,
	// or a server marked required is down): the page answers 503 then.
	OK bool `json:"ok"`
	// State is the worst of the checks' states: ok, degraded, not_ready
	// or failing.
	State  string        `json:"state"`
	Checks []HealthCheck `json:"checks"`
	Facts  []Fact        `json:"facts,omitempty"`
}

// HealthCheck is one check of the health page.
type HealthCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	// State is what the check's outcome means: ok, degraded (an upstream
	// not marked required is down; uncertain calls to resolve), not_ready
	// (a required upstream is down) or failing (the store).
	State string `json:"state"`
}

// Fact is one line of the health page's description of the process.
type Fact struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Auth maps tokens to who holds them.
type Auth interface {
	// Operator returns the operator whose token this is.
	Operator(token string) (name string, ok bool)
	// IsCaller reports whether token is a caller's (refused with 403).
	IsCaller(token string) bool
	// Blocked reports whether token starts like tokens that failed too
	// often, and for how long it is refused unchecked; Fail counts a
	// wrong token (at the login form and as a bearer). One count for
	// every front end handed the same Auth (see internal/auththrottle).
	Blocked(token string) (time.Duration, bool)
	Fail(token string) bool
}

// Options configure a Console. A nil *Options, and every zero field, means
// the default.
type Options struct {
	// Logger receives the console's own log. Default: discard.
	Logger *slog.Logger
	// AllowedHosts are the host names (without port) requests may name in
	// their Host header. Default: loopback names only (localhost,
	// 127.0.0.1, ::1). A single "*" allows any host (a server deliberately
	// exposed beyond loopback).
	AllowedHosts []string
	// TrustedOrigins are browser origins ("https://ops.example") besides
	// the console's own from which state-changing requests are accepted
	// (http.CrossOriginProtection.AddTrustedOrigin); their hosts are
	// allowed hosts too.
	TrustedOrigins []string
	// SessionTTL is how long a login lasts. Default 12h.
	SessionTTL time.Duration
	// MaxSessions caps the logins kept; the oldest goes first. Default 256.
	MaxSessions int
	// PollInterval is how often pending approvals are read while a browser
	// watches them live. Default 1s.
	PollInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// SecureCookies marks the login cookie Secure whatever the request:
	// set it when browsers reach the console over https through a proxy
	// that terminates TLS (serve.public_url), where the request the
	// console sees is plain HTTP. Without it, the cookie is Secure only on
	// a request that came over TLS.
	SecureCookies bool
	// Sessions, when set, lists the gateway's open MCP HTTP sessions for
	// the sessions page (the server holds them, not the gateway: serve
	// passes the server's list). Unset: the page says none are tracked.
	Sessions func() []Session
}

// Session is one open MCP HTTP session of a caller. ID is only the start
// of the session id: enough to tell sessions apart on a page.
type Session struct {
	Caller     string    `json:"caller"`
	ID         string    `json:"id_prefix"`
	Opened     time.Time `json:"opened"`
	LastActive time.Time `json:"last_active"`
	// InFlight counts its requests, streams and calls in progress: a
	// session with none may be closed to make room for a new one of the
	// same caller (serve.max_sessions_per_caller).
	InFlight int `json:"in_flight"`
}

// Defaults.
const (
	DefaultSessionTTL   = 12 * time.Hour
	DefaultMaxSessions  = 256
	DefaultPollInterval = time.Second
	// PageSize is how many entries a journal page shows.
	PageSize = 50
	// maxOffset bounds journal paging.
	maxOffset = 100000
	// maxFormBytes bounds a form or JSON body.
	maxFormBytes = 64 << 10
	// maxReason bounds the reason given with a decision.
	maxReason = 2000
)

// Prefix is where the console is mounted.
const Prefix = "/ui"
