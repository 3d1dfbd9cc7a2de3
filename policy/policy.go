// Package policy decides which callers may call which tools, and which
// calls need a person's approval first. The default is deny: a caller no
// rule names may call nothing.
package policy

import (
	"fmt"
	"path"
)

// Decision is the verdict for one (caller, tool).
type Decision struct {
	Allow           bool
	RequireApproval bool
	// Reason says which rule decided, for the audit log and error messages.
	Reason string
}

// Policy decides calls. Implementations are safe for concurrent use.
type Policy interface {
	Decide(caller, tool string) Decision
}

// Rule grants one caller a set of tools. Tool entries are exact names or
// path.Match globs ("fs.*"); a glob's '*' does not cross a '/'.
type Rule struct {
	Caller string `json:"caller" yaml:"caller"`
	// Allow lists the tools the caller may call.
	Allow []string `json:"allow" yaml:"allow"`
	// Approve lists the allowed tools whose calls need an approval first.
	Approve []string `json:"approve,omitempty" yaml:"approve"`
	// Approvers names the operators (exact names or path.Match globs) who
	// may decide this rule's approvals; none means any operator. See
	// [Rules.ApproverRule].
	Approvers []string `json:"approvers,omitempty" yaml:"approvers"`
	// SelfApprove lets the person at the caller's own client decide this
	// rule's approvals through MCP elicitation. Default false: operators only.
	SelfApprove bool `json:"self_approve,omitempty" yaml:"self_approve"`
}

// Rules is a Policy: the union of the rules naming the caller. It is
// immutable once built by [NewRules].
type Rules struct {
	byCaller map[string][]Rule
}

// NewRules checks every pattern and builds the policy; a malformed glob is
// an error here, not a silent non-match later.
func NewRules(rules []Rule) (*Rules, error) {
	r := &Rules{byCaller: map[string][]Rule{}}
	for i, rule := range rules {
		if rule.Caller == "" {
			return nil, fmt.Errorf("policy rule %d: caller is required", i+1)
		}
		for _, list := range [][]string{rule.Allow, rule.Approve, rule.Approvers} {
			for _, p := range list {
				if _, err := path.Match(p, ""); err != nil {
					return nil, fmt.Errorf("policy rule %d (caller %s): bad pattern %q: %w", i+1, rule.Caller, p, err)
				}
			}
		}
		r.byCaller[rule.Caller] = append(r.byCaller[rule.Caller], rule)
	}
	return r, nil
}

// Decide allows the call when a rule for the caller allows the tool, and
// requires approval when any rule for the caller lists it under approve.
func (r *Rules) Decide(caller, tool string) Decision {
	var d Decision
	for _, rule := range r.byCaller[caller] {
		if p, ok := match(rule.Allow, tool); ok && !d.Allow {
			d.Allow, d.Reason = true, fmt.Sprintf("caller %s allowed %q", caller, p)
		}
		if _, ok := match(rule.Approve, tool); ok {
			d.RequireApproval = true
		}
	}
	if !d.Allow {
		d.Reason = fmt.Sprintf("no policy rule allows caller %q to call %q (default deny)", caller, tool)
		d.RequireApproval = false
	}
	return d
}

func match(patterns []string, tool string) (string, bool) {
	for _, p := range patterns {
		if ok, _ := path.Match(p, tool); ok {
			return p, true
		}
	}
	return "", false
}

// DenyAll refuses every call.
type DenyAll struct{}

func (DenyAll) Decide(caller, tool string) Decision {
	return Decision{Reason: "no policy configured (default deny)"}
}
