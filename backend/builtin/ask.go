package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/gateway"
)

// Asker is the host's interaction channel with the person at the other end
// (an MCP elicitation, a terminal prompt). Ask presents q and returns the
// answer. It must honour ctx, whose deadline is q.Timeout.
//
// Errors: wrap ErrDeclined when the person declined or dismissed the
// question, ErrNoChannel when the channel cannot ask now (a client without
// elicitation, no terminal). Any other error leaves it unknown whether the
// question was seen.
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}

// WithAsker returns a copy of ctx that carries a as the interaction channel
// of the ask_user_question calls made with it: the tool asks the context's
// Asker when there is one, else the Set's own ([Options.Asker]). A nil a
// leaves ctx as it is.
//
// This is how a host with one channel per call reaches the person behind
// that call (an MCP server puts each call's question to the client of the
// session the call came in on), while the Set is shared by every caller.
// The gateway hands the context given to [gateway.Gateway.Call] on to the
// backend, so the value set here reaches the tool.
func WithAsker(ctx context.Context, a Asker) context.Context {
	if a == nil {
		return ctx
	}
	return context.WithValue(ctx, askerKey{}, a)
}

// askerKey is the context key of WithAsker.
type askerKey struct{}

// askerOf returns the Asker of a call: the context's, else the Set's.
func (s *Set) askerOf(ctx context.Context) Asker {
	if a, ok := ctx.Value(askerKey{}).(Asker); ok {
		return a
	}
	return s.asker
}

// AskerFunc adapts a function to an Asker.
type AskerFunc func(ctx context.Context, q Question) (Answer, error)

func (f AskerFunc) Ask(ctx context.Context, q Question) (Answer, error) { return f(ctx, q) }

// Errors an Asker returns.
var (
	ErrDeclined  = errors.New("builtin: the question was declined")
	ErrNoChannel = errors.New("builtin: no interaction channel")
)

// Question is what ask_user_question puts to the person.
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

type askArgs struct {
	Question      string            `json:"question"`
	Options       []json.RawMessage `json:"options"`
	AllowFreeform bool              `json:"allow_freeform"`
	Placeholder   string            `json:"placeholder"`
	TimeoutMS     *int64            `json:"timeout_ms"`
}

type askResult struct {
	Answer   string `json:"answer"`
	Label    string `json:"label,omitempty"`
	Freeform bool   `json:"freeform"`
}

func (s *Set) ask(ctx context.Context, raw json.RawMessage) (*backend.Result, error) {
	var a askArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	q := Question{Question: a.Question, AllowFreeform: a.AllowFreeform, Placeholder: a.Placeholder, Timeout: DefaultAskTimeout}
	for i, o := range a.Options {
		opt, err := parseOption(o)
		if err != nil {
			return nil, fail(gateway.ClassValidation, "options[%d]: %v", i, err)
		}
		q.Options = append(q.Options, opt)
	}
	if len(q.Options) == 0 {
		q.AllowFreeform = true
	}
	if a.TimeoutMS != nil {
		if *a.TimeoutMS < 1000 {
			return nil, fail(gateway.ClassValidation, "timeout_ms %d must be at least 1000", *a.TimeoutMS)
		}
		if *a.TimeoutMS >= MaxAskTimeout.Milliseconds() {
			q.Timeout = MaxAskTimeout
		} else {
			q.Timeout = time.Duration(*a.TimeoutMS) * time.Millisecond
		}
	}
	asker := s.askerOf(ctx)
	if asker == nil {
		return nil, fail(gateway.ClassUnsupported,
			"there is no interaction channel to ask the user through (no MCP elicitation, no terminal); decide without asking, or say what you need in your reply")
	}
	actx, cancel := context.WithTimeout(ctx, q.Timeout)
	defer cancel()
	ans, err := asker.Ask(actx, q)
	switch {
	case err == nil:
	case errors.Is(err, ErrNoChannel):
		return nil, fail(gateway.ClassUnsupported, "the interaction channel cannot ask the user now: %v", err)
	case errors.Is(err, ErrDeclined):
		return nil, fail(gateway.ClassCancelled, "the user declined to answer")
	case ctx.Err() != nil:
		return nil, fmt.Errorf("ask_user_question: the call ended while the question was open: %w", ctx.Err())
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		return nil, fail(gateway.ClassTimeout, "no answer within %v", q.Timeout)
	default:
		return nil, fmt.Errorf("ask_user_question: %w", err)
	}
	if !ans.Freeform {
		found := false
		for _, o := range q.Options {
			if o.Value == ans.Value {
				found = true
				if ans.Label == "" {
					ans.Label = o.Label
				}
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: ask_user_question: the answer %q is none of the options and is not marked free-form", backend.ErrMalformedResult, ans.Value)
		}
	} else if !q.AllowFreeform {
		return nil, fmt.Errorf("%w: ask_user_question: a free-form answer came back to a question that allows none", backend.ErrMalformedResult)
	}
	return ok(askResult{Answer: ans.Value, Label: ans.Label, Freeform: ans.Freeform})
}

// parseOption reads an option: a plain string is its label and value; an
// object's value defaults to its label.
func parseOption(raw json.RawMessage) (Option, error) {
	var label string
	if err := json.Unmarshal(raw, &label); err == nil {
		return Option{Label: label, Value: label}, nil
	}
	var o struct {
		Label       *string `json:"label"`
		Value       *string `json:"value"`
		Description string  `json:"description"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return Option{}, fmt.Errorf("want a string or {label, value, description}: %v", err)
	}
	if o.Label == nil {
		return Option{}, errors.New("the option has no label")
	}
	opt := Option{Label: *o.Label, Value: *o.Label, Description: o.Description}
	if o.Value != nil {
		opt.Value = *o.Value
	}
	return opt, nil
}
