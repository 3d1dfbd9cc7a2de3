package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/tool"
)

// Decider decides one call without running it: *gateway.Gateway is one.
type Decider interface {
	Decide(ctx context.Context, req gateway.DecideRequest) (*gateway.DecideResult, error)
}

// Pending is what a Claude Code hook answers while an approval is pending.
type Pending string

const (
	PendingDeny  Pending = "deny"  // deny, naming the request: ask again once approved
	PendingAsk   Pending = "ask"   // Claude Code's own prompt asks its user
	PendingDefer Pending = "defer" // a -p run stops, to be resumed
)

// ParsePending returns the Pending named s ("" is PendingDeny).
func ParsePending(s string) (Pending, error) {
	switch Pending(s) {
	case "", PendingDeny:
		return PendingDeny, nil
	case PendingAsk, PendingDefer:
		return Pending(s), nil
	}
	return "", fmt.Errorf("hook: pending answer %q: want deny, ask or defer", s)
}

// Options configure Evaluate. A nil *Options is not enough: the caller and
// the workspace are required.
type Options struct {
	Caller string
	MapOptions
	// Wait is how long a decision waits for an operator's approval (0:
	// not at all).
	Wait time.Duration
}

// Outcome is a verdict's kind.
type Outcome string

const (
	Allow   Outcome = "allow"
	Deny    Outcome = "deny"
	Approve Outcome = "approval_required" // an operator must decide first
)

// Verdict is the decision of one tool use.
type Verdict struct {
	Outcome Outcome `json:"outcome"`
	// Reason says, for the model and for people, what is refused and why,
	// or what to do (an approval).
	Reason string `json:"reason,omitempty"`
	// ApprovalIDs are the pending requests of an approval_required verdict.
	ApprovalIDs []string `json:"approval_ids,omitempty"`
	// CallIDs are the decision-only journal entries of an allow.
	CallIDs []string `json:"call_ids,omitempty"`
}

// ErrDecide is a failure to decide (the store, a timeout, a cancelled
// context): the hook must block, and say it could not decide.
var ErrDecide = errors.New("hook: the decision failed")

// Evaluate decides the tool use in data (the agent's hook input). It
// always returns a verdict; with an error (bad input, no mapping, outside
// the workspace, a failed decision) the verdict is Deny with the error as
// its reason, so a caller that prints it fails closed.
func Evaluate(ctx context.Context, agent Agent, data []byte, d Decider, opts *Options) (Verdict, error) {
	v, err := evaluate(ctx, agent, data, d, opts)
	if err != nil {
		return Verdict{Outcome: Deny, Reason: "Backplane blocked this tool use: " + err.Error()}, err
	}
	return v, nil
}

func evaluate(ctx context.Context, agent Agent, data []byte, d Decider, opts *Options) (Verdict, error) {
	if opts == nil || opts.Caller == "" {
		return Verdict{}, fmt.Errorf("%w: no caller is configured for the hook", ErrDecide)
	}
	in, err := Parse(agent, data)
	if err != nil {
		return Verdict{}, err
	}
	calls, err := Map(in, &opts.MapOptions)
	if err != nil {
		if errors.Is(err, ErrUnmapped) || errors.Is(err, ErrOutsideWorkspace) {
			// A decision, not a failure: default deny, said to the model.
			return Verdict{Outcome: Deny, Reason: "Backplane denied this tool use: " + err.Error()}, nil
		}
		return Verdict{}, err
	}
	req := func(c Call, preview bool, w time.Duration) gateway.DecideRequest {
		return gateway.DecideRequest{Caller: opts.Caller, Session: in.Session, Tool: c.Tool, Arguments: c.Arguments, ApprovalWait: &w, Preview: preview}
	}
	wait := opts.Wait
	if len(calls) > 1 {
		// Every part first, consuming nothing: the strictest answer wins,
		// and every approval the tool use needs is requested at once. The
		// wait is one for the whole tool use, not one per part: each round
		// waits (what is left of it) on the first part still pending, then
		// looks at every part again.
		deadline := time.Now().Add(wait)
		for {
			var pending, msgs []string
			var first *Call
			for i, c := range calls {
				_, err := d.Decide(ctx, req(c, true, 0))
				v, ferr := verdictOf(c, err)
				switch {
				case ferr != nil:
					return Verdict{}, ferr
				case v.Outcome == Deny:
					return v, nil
				case v.Outcome == Approve:
					pending = append(pending, v.ApprovalIDs...)
					msgs = append(msgs, v.Reason)
					if first == nil {
						first = &calls[i]
					}
				}
			}
			left := time.Until(deadline)
			if len(pending) == 0 {
				break
			}
			if left <= 0 {
				return Verdict{Outcome: Approve, ApprovalIDs: pending, Reason: strings.Join(msgs, "\n")}, nil
			}
			_, err := d.Decide(ctx, req(*first, true, left))
			if v, ferr := verdictOf(*first, err); ferr != nil {
				return Verdict{}, ferr
			} else if v.Outcome == Deny {
				return v, nil
			}
		}
		wait = 0 // every part is approved or needs none: nothing left to wait for
	}
	var ids []string
	for _, c := range calls {
		res, err := d.Decide(ctx, req(c, false, wait))
		v, ferr := verdictOf(c, err)
		if ferr != nil {
			return Verdict{}, ferr
		}
		if v.Outcome != Allow {
			return v, nil // lost a race since the preview (an approval used, a budget spent)
		}
		ids = append(ids, res.CallID)
	}
	return Verdict{Outcome: Allow, CallIDs: ids}, nil
}

// verdictOf turns one decision into a verdict; the error is a failure to
// decide.
func verdictOf(c Call, err error) (Verdict, error) {
	if err == nil {
		return Verdict{Outcome: Allow}, nil
	}
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		return Verdict{}, fmt.Errorf("%w: %s: %v", ErrDecide, c.Tool, err)
	}
	what := c.Tool + subjectOf(c)
	switch ge.Class {
	case tool.ClassApprovalRequired:
		id, _ := ge.Details["approval_id"].(string)
		return Verdict{Outcome: Approve, ApprovalIDs: []string{id}, Reason: fmt.Sprintf(
			"Backplane needs an operator's approval for %s: %s", what, ge.Message)}, nil
	case tool.ClassForbidden, tool.ClassNotFound, tool.ClassValidation, tool.ClassUnsupported, tool.ClassBudgetExceeded:
		return Verdict{Outcome: Deny, Reason: fmt.Sprintf("Backplane denied %s (%s): %s", what, ge.Class, ge.Message)}, nil
	}
	return Verdict{}, fmt.Errorf("%w: %s: %s: %s", ErrDecide, c.Tool, ge.Class, ge.Message)
}

// subjectOf names what a call is about, for its reason: the path or URL
// of its arguments (" of PATH"), "" for anything else (a command is in the
// policy's own reason).
func subjectOf(c Call) string {
	var a struct {
		Path string `json:"path"`
		URL  string `json:"url"`
	}
	if json.Unmarshal(c.Arguments, &a) != nil {
		return ""
	}
	switch {
	case a.URL != "":
		return " of " + a.URL
	case a.Path != "":
		return " of " + a.Path
	}
	return ""
}

// hookOutput is the hookSpecificOutput both agents read.
type hookOutput struct {
	HookSpecificOutput struct {
		HookEventName            string `json:"hookEventName"`
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason,omitempty"`
	} `json:"hookSpecificOutput"`
}

// Output is what the hook prints on stdout for v (exit 0): nil when the
// agent is to be told nothing (a Codex allow). pending says how a Claude
// Code hook answers an approval_required verdict.
func Output(agent Agent, v Verdict, pending Pending) ([]byte, error) {
	decision := ""
	switch agent {
	case ClaudeCode:
		switch v.Outcome {
		case Allow:
			decision = "allow"
		case Approve:
			decision = string(pending)
			if decision == "" {
				decision = string(PendingDeny)
			}
		default:
			decision = "deny"
		}
	case Codex:
		if v.Outcome == Allow {
			return nil, nil // Codex treats an allow as unsupported; silence lets it run
		}
		decision = "deny"
	case Gemini:
		// Gemini CLI's BeforeTool reads a top-level decision; its reason is
		// sent to the model as the tool's error.
		g := struct {
			Decision string `json:"decision"`
			Reason   string `json:"reason,omitempty"`
		}{Decision: "deny", Reason: v.Reason}
		if v.Outcome == Allow {
			g.Decision = "allow"
		}
		b, err := json.Marshal(g)
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	case Cursor:
		return cursorOutput(v, pending)
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownAgent, agent)
	}
	var o hookOutput
	o.HookSpecificOutput.HookEventName = "PreToolUse"
	o.HookSpecificOutput.PermissionDecision = decision
	o.HookSpecificOutput.PermissionDecisionReason = v.Reason
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
