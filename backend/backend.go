// Package backend defines what runs a tool call once the gateway has
// admitted it: the command backend (backend/command), the built-in tools and
// MCP upstreams implement [Backend].
package backend

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
	// Trace is the W3C trace context of this invocation, empty when the
	// call is not traced: a backend passes it on to what it calls.
	Trace TraceContext
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
// settles the call failed (class invalid_result), keeps Result for the
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
)

// Func adapts a function to a Backend.
type Func func(ctx context.Context, call *Call) (*Result, error)

func (f Func) Invoke(ctx context.Context, call *Call) (*Result, error) { return f(ctx, call) }

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
