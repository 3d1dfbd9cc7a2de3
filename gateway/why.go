package gateway

// Why an approval request asks: the policy's decision on the request's
// call as the policy in force decides it now (the rule, each part of a
// shell command), the tool's own flag, the sandbox the call will run in,
// and who may decide. For approval cards.

import (
	"fmt"
	"slices"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// ApprovalWhy says why a request asks for a decision, and what deciding
// it lets run.
type ApprovalWhy struct {
	// Effect, Rule and Reason are the policy's decision on the call now:
	// Rule is the deciding rule's place (file:line), "" for the default.
	Effect string `json:"effect"`
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ToolAsks is set when the tool itself requires approval (it is not
	// marked read-only), whatever the policy says.
	ToolAsks bool `json:"tool_asks,omitempty"`
	// Parts are a shell command's simple commands, each with its decision.
	Parts []policy.Part `json:"parts,omitempty"`
	// Sandbox describes where the call runs, when its backend says (nil:
	// it runs in no process of Backplane's, e.g. an upstream's tool).
	Sandbox *SandboxView `json:"sandbox,omitempty"`
	// Source is where the tool comes from (an upstream server's name for
	// a pinned tool, else "").
	Source string `json:"source,omitempty"`
	// Deciders are who may decide: the rule's approvers, or every
	// configured operator when the rule names none; SelfApprove lets the
	// caller's own person decide (elicitation).
	Deciders    []string `json:"deciders,omitempty"`
	AnyOperator bool     `json:"any_operator,omitempty"`
	SelfApprove bool     `json:"self_approve,omitempty"`
}

// SandboxView is the sandbox a tool's process runs in.
type SandboxView struct {
	Sandboxed bool     `json:"sandboxed"`
	Network   string   `json:"network,omitempty"`
	Write     []string `json:"write,omitempty"`
	Read      []string `json:"read,omitempty"`
}

// WhyApproval explains request a (see ApprovalWhy). The tool may be gone:
// the decision is then the policy's on its name alone.
func (g *Gateway) WhyApproval(a *store.Approval) *ApprovalWhy {
	w := &ApprovalWhy{}
	req := policy.Request{Caller: a.Caller, Session: a.Session, Tool: a.Tool}
	if len(a.Arguments) > 0 {
		if v, err := jsonstrict.Decode(a.Arguments, &jsonstrict.Options{MaxDepth: g.limits.MaxDepth, MaxBytes: g.limits.MaxArgumentBytes}); err == nil {
			req.Args = v
		}
	}
	g.mu.RLock()
	t, ok := g.tools[a.Tool]
	g.mu.RUnlock()
	if ok {
		w.ToolAsks = t.Safety.RequiresApproval
		w.Source, _ = tool.SourceServer(t.Source)
		if pr, ok := t.Backend.(tool.PathResolver); ok && len(a.Arguments) > 0 {
			if rp, err := pr.ResolvePath(a.Arguments); err == nil && rp != nil {
				req.RealPath = rp.Real
			}
		}
		if au, ok := t.Backend.(tool.Auditor); ok {
			w.Sandbox = sandboxView(au.AuditAttrs())
		}
	}
	d := g.policy.Decide(req)
	w.Effect, w.Rule, w.Reason, w.Parts = string(d.Effect), d.Source, d.Reason, d.Parts
	if d.Err != nil {
		w.Reason = d.Err.Error()
	}
	rule := g.approverRule(a.Caller, a.Tool)
	w.SelfApprove = rule.SelfApprove
	if len(rule.Approvers) == 0 {
		w.AnyOperator, w.Deciders = true, g.Operators()
	} else {
		for _, op := range g.Operators() {
			if rule.MayApprove(op) {
				w.Deciders = append(w.Deciders, op)
			}
		}
		if len(w.Deciders) == 0 {
			// No configured operator matches: the rule's names still say
			// who may.
			w.Deciders = slices.Clone(rule.Approvers)
		}
	}
	return w
}

// sandboxView reads a backend's audit attributes (internal/sandbox's
// AuditAttrs: sandboxed, sandbox_rules) as a SandboxView; nil when they
// say nothing of a sandbox.
func sandboxView(attrs []any) *SandboxView {
	var v *SandboxView
	for i := 0; i+1 < len(attrs); i += 2 {
		switch attrs[i] {
		case "sandboxed":
			if v == nil {
				v = &SandboxView{}
			}
			v.Sandboxed, _ = attrs[i+1].(bool)
		case "sandbox_rules":
			rules, ok := attrs[i+1].(map[string]any)
			if !ok {
				continue
			}
			if v == nil {
				v = &SandboxView{}
			}
			v.Network = fmt.Sprint(rules["network"])
			v.Write, _ = rules["write"].([]string)
			v.Read, _ = rules["read"].([]string)
		}
	}
	return v
}
