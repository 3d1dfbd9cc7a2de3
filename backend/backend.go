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

var (
	ErrNotStarted      = errors.New("backend: the call was not started")
	ErrMalformedResult = errors.New("backend: malformed result")
)

// Func adapts a function to a Backend.
type Func func(ctx context.Context, call *Call) (*Result, error)

func (f Func) Invoke(ctx context.Context, call *Call) (*Result, error) { return f(ctx, call) }
