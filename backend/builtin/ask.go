package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

// The interaction channel is package backend's; these names are kept here
// for the hosts that wrote builtin.Asker.
type (
	Asker     = tool.Asker
	AskerFunc = tool.AskerFunc
	Question  = tool.Question
	Option    = tool.Option
	Answer    = tool.Answer
)

// Errors an Asker returns.
var (
	ErrDeclined  = tool.ErrDeclined
	ErrNoChannel = tool.ErrNoChannel
)

// askerOf returns the Asker of a call: the call's own ([tool.Call.Asker],
// the MCP session's elicitation), else the Set's ([Options.Asker]).
func (s *Set) askerOf(call *tool.Call) Asker {
	if call != nil && call.Asker != nil {
		return call.Asker
	}
	return s.asker
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

func (s *Set) ask(ctx context.Context, call *tool.Call) (*tool.Result, error) {
	var a askArgs
	if err := decode(call.Arguments, &a); err != nil {
		return nil, err
	}
	q := Question{Question: a.Question, AllowFreeform: a.AllowFreeform, Placeholder: a.Placeholder, Timeout: DefaultAskTimeout}
	for i, o := range a.Options {
		opt, err := parseOption(o)
		if err != nil {
			return nil, fail(tool.ClassValidation, "options[%d]: %v", i, err)
		}
		q.Options = append(q.Options, opt)
	}
	if len(q.Options) == 0 {
		q.AllowFreeform = true
	}
	if a.TimeoutMS != nil {
		if *a.TimeoutMS < 1000 {
			return nil, fail(tool.ClassValidation, "timeout_ms %d must be at least 1000", *a.TimeoutMS)
		}
		if *a.TimeoutMS >= MaxAskTimeout.Milliseconds() {
			q.Timeout = MaxAskTimeout
		} else {
			q.Timeout = time.Duration(*a.TimeoutMS) * time.Millisecond
		}
	}
	asker := s.askerOf(call)
	if asker == nil {
		return nil, fail(tool.ClassUnsupported,
			"there is no interaction channel to ask the user through (no MCP elicitation, no terminal); decide without asking, or say what you need in your reply")
	}
	actx, cancel := context.WithTimeout(ctx, q.Timeout)
	defer cancel()
	ans, err := asker.Ask(actx, q)
	switch {
	case err == nil:
	case errors.Is(err, ErrNoChannel):
		return nil, fail(tool.ClassUnsupported, "the interaction channel cannot ask the user now: %v", err)
	case errors.Is(err, ErrDeclined):
		return nil, fail(tool.ClassCancelled, "the user declined to answer")
	case ctx.Err() != nil:
		return nil, fmt.Errorf("ask_user_question: the call ended while the question was open: %w", ctx.Err())
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		return nil, fail(tool.ClassTimeout, "no answer within %v", q.Timeout)
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
			return nil, fmt.Errorf("%w: ask_user_question: the answer %q is none of the options and is not marked free-form", tool.ErrMalformedResult, ans.Value)
		}
	} else if !q.AllowFreeform {
		return nil, fmt.Errorf("%w: ask_user_question: a free-form answer came back to a question that allows none", tool.ErrMalformedResult)
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
