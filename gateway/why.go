package gateway

// Why an approval request asks: the policy's decision on the request's
// call as the policy in force decides it now (the rule, each part of a
// shell command), the tool's own flag, the sandbox the call will run in,
// and who may decide. For approval cards.

import (
	"fmt"
	"slices"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// WhyApproval explains request a (see ApprovalWhy). The tool may be gone:
// the decision is then the policy's on its name alone.
func (g *Gateway) WhyApproval(a *store.Approval) *opsview.ApprovalWhy {
	w := &opsview.ApprovalWhy{}
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
func sandboxView(attrs []any) *opsview.Sandbox {
	var v *opsview.Sandbox
	for i := 0; i+1 < len(attrs); i += 2 {
		switch attrs[i] {
		case "sandboxed":
			if v == nil {
				v = &opsview.Sandbox{}
			}
			v.Sandboxed, _ = attrs[i+1].(bool)
		case "sandbox_rules":
			rules, ok := attrs[i+1].(map[string]any)
			if !ok {
				continue
			}
			if v == nil {
				v = &opsview.Sandbox{}
			}
			v.Network = fmt.Sprint(rules["network"])
			v.Write, _ = rules["write"].([]string)
			v.Read, _ = rules["read"].([]string)
		}
	}
	return v
}
