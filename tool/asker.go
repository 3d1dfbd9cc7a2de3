package tool

import (
	"context"
	"errors"
	"time"
)

// Asker is a host's interaction channel with the person at the other end of
// a call (an MCP elicitation, a terminal prompt). Ask presents q and
// returns the answer. It must honour ctx, whose deadline is q.Timeout.
//
// It travels in the call ([Call.Asker]), not in the context: a host with
// one channel per connection hands each call its own.
//
// Errors: wrap ErrDeclined when the person declined or dismissed the
// question, ErrNoChannel when the channel cannot ask now (a client without
// elicitation, no terminal). Any other error leaves it unknown whether the
// question was seen.
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}

// AskerFunc adapts a function to an Asker.
type AskerFunc func(ctx context.Context, q Question) (Answer, error)

func (f AskerFunc) Ask(ctx context.Context, q Question) (Answer, error) { return f(ctx, q) }

// Errors an Asker returns.
var (
	ErrDeclined  = errors.New("builtin: the question was declined")
	ErrNoChannel = errors.New("builtin: no interaction channel")
)

// Question is what is put to the person.
type Question struct {
	Question string
	// Options are the answers to pick from, in display order (none: a
	// free-form answer only).
	Options []Option
	// AllowFreeform says the person may type an answer of their own; it is
	// true when there are no options.
	AllowFreeform bool
	Placeholder   string
	// Timeout is how long the question waits for an answer.
	Timeout time.Duration
}

// Option is one answer to pick from.
type Option struct {
	Label       string
	Value       string // what the tool returns when it is chosen
	Description string
}

// Answer is the person's answer: the chosen option's Value (and Label), or
// their own text with Freeform set.
type Answer struct {
	Value    string
	Label    string
	Freeform bool
}
