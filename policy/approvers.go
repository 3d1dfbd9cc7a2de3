package policy

import (
	"path"
	"time"
)

// MaxSelfApproveTimeout bounds how long the person at a caller's own client
// may be given to answer an approval put to them (approvals:
// self_approve_timeout, gateway.ApprovalOptions.SelfApproveTimeout): the
// configuration checks it and the gateway clamps to it.
const MaxSelfApproveTimeout = 10 * time.Minute

// ApproverRule says who may decide the approval requests of one (caller,
// tool).
type ApproverRule struct {
	// Approvers are operator names or path.Match globs; empty means any
	// operator.
	Approvers []string
	// SelfApprove lets the person at the caller's own client decide,
	// through MCP elicitation.
	SelfApprove bool
}

// Approvers is implemented by policies that say who decides approvals. A
// policy that does not implement it leaves decisions to any operator and
// never to the caller.
type Approvers interface {
	ApproverRule(caller, tool string) ApproverRule
}

// ApproverRule gathers, from the caller's rules with an approve entry (a
// list entry or a CEL rule) naming tool (or, when none has, an allow entry:
// a tool can require approval by its own flag), the union of their
// approvers; SelfApprove only when such a rule opts in. An entry's pattern
// and condition are not looked at: who decides depends on the rule, not on
// the arguments.
func (r *Rules) ApproverRule(caller, tool string) ApproverRule {
	var out ApproverRule
	for _, effect := range []Effect{EffectApprove, EffectAllow} {
		found := false
		for i := range r.rules {
			cr := &r.rules[i]
			if !cr.matchesCaller(caller) || !cr.names(effect, tool) {
				continue
			}
			found = true
			out.Approvers = append(out.Approvers, r.src[i].Approvers...)
			out.SelfApprove = out.SelfApprove || r.src[i].SelfApprove
		}
		if found {
			break
		}
	}
	return out
}

// names reports whether an entry of the rule with effect names tool.
func (cr *compiledRule) names(effect Effect, tool string) bool {
	for _, e := range cr.entries {
		if e.effect == effect && e.matchesTool(tool) {
			return true
		}
	}
	return false
}

// MayApprove reports whether operator matches one of the approvers (any
// operator when there are none).
func (a ApproverRule) MayApprove(operator string) bool {
	if len(a.Approvers) == 0 {
		return true
	}
	for _, p := range a.Approvers {
		if ok, _ := path.Match(p, operator); ok {
			return true
		}
	}
	return false
}
