package tool

import (
	"context"
	"encoding/json"
	"errors"
)

// Call is one admitted call, as the backend sees it.
type Call struct {
	CallID  string
	Tool    string
	Caller  string
	Session string
	// CallerToken is the bearer token that named the caller when it is a
	// JWT access token verified against serve.oauth ("" otherwise: a
	// static serve.tokens entry is the gateway's own secret and never
	// leaves it). A secret: a backend may exchange it for a token of its
	// own (RFC 8693) and must never log it, record it or send it on.
	CallerToken string
	// Arguments are the exact bytes that were validated (D18).
	Arguments json.RawMessage
	// Asker, when set, is this call's channel to the person behind it (the
	// MCP session's elicitation, a terminal prompt); a backend that asks
	// questions uses it before any channel of its own.
	Asker Asker
	// Client, when set, is the client behind the call, to which a backend
	// relays what arrives during the call (an upstream MCP server's
	// progress, log messages and requests).
	Client Client
	// Input, when set, is the retry of a call whose backend answered
	// *InputRequiredError: the client's answers and the state it echoes
	// (see [InputDeferrer]).
	Input *InputAnswers
	// Trace is the W3C trace context of this invocation, empty when the
	// call is not traced: a backend passes it on to what it calls.
	Trace TraceContext
	// Path is what the backend's [PathResolver] returned for these
	// arguments when the gateway authorized the call: the policy decided on
	// its Real path, so the backend must use that very file or fail (see
	// PathResolver). nil when the backend resolves no path.
	Path *ResolvedPath
	// PathDenied, set with Path, says whether the policy explicitly denies
	// this caller this tool on a workspace-relative real path: a backend
	// that walks a folder (glob, grep) leaves out what it says is denied.
	PathDenied func(real string) bool
}

// PathResolver is implemented by a backend whose main argument names a file
// or folder of a workspace it owns (the built-in read, write, edit, ls,
// glob, grep). A path rule must be decided on the file the call will use,
// not on the text a caller wrote ("src/link" may be a symbolic link to
// ".env"): the gateway calls ResolvePath before it decides, decides on the
// real path (and on the text, the stricter wins), and hands the result to
// Invoke in [Call.Path]. The backend then uses the file it resolved or
// fails closed: its identity (device and inode) must be the one recorded
// here, so a file swapped between the decision and the use is refused,
// never used.
//
// ResolvePath must not change anything. A path that leads out of the
// workspace is an error wrapping [ErrPathRefused]; any other error is a
// path that cannot be resolved (a loop of links): the gateway then decides
// on the text alone and sets [ResolvedPath.Err], and the backend refuses.
// A path that does not exist (yet) resolves as far as it exists, the rest
// taken by name.
type PathResolver interface {
	ResolvePath(args json.RawMessage) (*ResolvedPath, error)
}

// ResolvedPath is a path argument resolved inside a workspace.
type ResolvedPath struct {
	// Field is the argument resolved ("path").
	Field string
	// Real is the path relative to the workspace with every symbolic link
	// resolved, clean and slash-separated; "." is the workspace itself.
	Real string
	// ID is the backend's own record of what it resolved (the file's
	// identity): opaque to the gateway, passed back in Call.Path.
	ID any
	// Err is set by the gateway when ResolvePath failed: the policy then
	// decided on the text alone, and the backend must refuse the call
	// (it meets the same escape when it opens the path; should the path
	// open after all, it was not what the policy decided on).
	Err error
}

// TraceContext is a W3C trace context (https://www.w3.org/TR/trace-context/)
// as its two header values.
type TraceContext struct {
	Parent string // traceparent
	State  string // tracestate
}

// Env is the trace context as the environment variables TRACEPARENT and
// TRACESTATE, for a program the call runs; none when it is empty.
func (t TraceContext) Env() []string {
	var env []string
	if t.Parent != "" {
		env = append(env, "TRACEPARENT="+t.Parent)
		if t.State != "" {
			env = append(env, "TRACESTATE="+t.State)
		}
	}
	return env
}

// Meta is the trace context as MCP _meta members (traceparent, tracestate),
// for an upstream MCP server; nil when it is empty.
func (t TraceContext) Meta() map[string]any {
	if t.Parent == "" {
		return nil
	}
	m := map[string]any{"traceparent": t.Parent}
	if t.State != "" {
		m["tracestate"] = t.State
	}
	return m
}

// Result is what a tool returned. A tool-level error (the tool ran and
// reports a failure, such as "file not found") is a Result with IsError
// set, not a Go error: the call did run.
type Result struct {
	Content json.RawMessage // one JSON value
	IsError bool
}

// Auditor is implemented by a backend that adds attributes to the audit
// events that settle its calls (the sandbox its process ran in, say).
type Auditor interface {
	AuditAttrs() []any
}

// CallAuditor is implemented by a backend whose audit attributes depend
// on the caller (the upstream credential a call used belongs to its
// caller): the gateway adds CallAuditAttrs(caller) to the settle step
// beside Auditor's.
type CallAuditor interface {
	CallAuditAttrs(caller string) []any
}

// DetailedError is implemented by a backend's error that carries what
// the caller needs to act on it, such as the URL where it connects its
// account to an upstream server: the gateway puts ErrorDetails in the
// details of the error the caller gets, beside status. Details reach the
// caller only: they are not recorded in the journal or the audit, and
// Error() must not repeat them.
type DetailedError interface {
	error
	ErrorDetails() map[string]any
}

// Event is one audit event beside the calls' own: a request a front end
// refused before any call (a rate limit), a resource read or a prompt get,
// a request an upstream made of a call's client. Msg is the event's
// message, Attrs its key, value pairs as log/slog takes them; Warn writes
// it at warn level (a refusal), else at info.
type Event struct {
	Msg   string
	Warn  bool
	Attrs []any
}

// Recorder writes events into the one audit log, beside the calls'.
// *gateway.Gateway is one: it is the only writer of audit events, so that
// the log has one owner and one format. A [Registry] handed to a source of
// tools may be one too: the source records through it what it does
// beside its calls (backend/upstream: the requests it relays).
type Recorder interface {
	Record(ctx context.Context, e Event)
}

// Backend runs calls. Invoke must honour ctx's deadline and cancellation.
//
// The error tells the gateway what is known about the outcome:
//   - wrapping ErrNotStarted: the call provably did not run (the program
//     could not be started, the upstream refused the request before acting);
//     the intent settles failed and its budget is released.
//   - wrapping ErrMalformedResult: it ran but its answer cannot be read.
//   - anything else, including ctx errors: the outcome is unknown; the
//     intent settles uncertain and is never re-run automatically.
type Backend interface {
	Invoke(ctx context.Context, call *Call) (*Result, error)
}

// InvalidResultError is returned by a backend whose tool ran and answered
// a result that breaks the tool's declared output schema: the gateway
// settles the call succeeded with class invalid_result (it ran), keeps Result for the
// operator, and hands the caller Err's violations, never the result.
type InvalidResultError struct {
	Result json.RawMessage // the result as the tool answered it
	// Err is every violation: an *inputschema.ErrorList or
	// *inputschema.Error, pointers into the structured content.
	Err error
}

func (e *InvalidResultError) Error() string {
	return "the tool's structured result does not match its output schema: " + e.Err.Error()
}

func (e *InvalidResultError) Unwrap() error { return e.Err }

var (
	ErrNotStarted      = errors.New("backend: the call was not started")
	ErrMalformedResult = errors.New("backend: malformed result")
	// ErrPathRefused is wrapped by a PathResolver's error for a path that
	// leads out of the workspace.
	ErrPathRefused = errors.New("backend: the path leads out of the workspace")
)

// BackendFunc adapts a function to a Backend.
type BackendFunc func(ctx context.Context, call *Call) (*Result, error)

func (f BackendFunc) Invoke(ctx context.Context, call *Call) (*Result, error) { return f(ctx, call) }

// Checker is implemented by a backend that checks a call's arguments itself,
// beyond what the input schema can say (an integer the tool cannot hold, a
// timeout it cannot honour). The gateway calls Check after the schema
// validation and before anything is approved, reserved or recorded, and
// refuses the call as a validation error when it fails: a call the tool
// would refuse must cost nothing and never be put to a person.
type Checker interface {
	Check(args json.RawMessage) error
}

// Preview is what a call would do, shown to the person who decides its
// approval: a unified diff for a file edit, the command line for a shell.
type Preview struct {
	Diff    string `json:"diff,omitempty"`
	Command string `json:"command,omitempty"`
}

// Previewer is implemented by backends that can say what a call would do
// without doing it. Preview must not change anything.
type Previewer interface {
	Preview(ctx context.Context, call *Call) (*Preview, error)
}
