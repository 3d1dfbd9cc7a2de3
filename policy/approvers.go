package policy

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

// ApproverRule gathers, from the caller's rules that list tool under
// approve (or, when none does, that allow it: a tool can require approval
// by its own flag), the union of their approvers; SelfApprove only when
// such a rule opts in.
func (r *Rules) ApproverRule(caller, tool string) ApproverRule {
	var out ApproverRule
	var rules []Rule
	for _, rule := range r.byCaller[caller] {
		if _, ok := match(rule.Approve, tool); ok {
			rules = append(rules, rule)
		}
	}
	if len(rules) == 0 {
		for _, rule := range r.byCaller[caller] {
			if _, ok := match(rule.Allow, tool); ok {
				rules = append(rules, rule)
			}
		}
	}
	for _, rule := range rules {
		out.Approvers = append(out.Approvers, rule.Approvers...)
		out.SelfApprove = out.SelfApprove || rule.SelfApprove
	}
	return out
}

// MayApprove reports whether operator matches one of the approvers (any
// operator when there are none).
func (a ApproverRule) MayApprove(operator string) bool {
	if len(a.Approvers) == 0 {
		return true
	}
	_, ok := match(a.Approvers, operator)
	return ok
}
