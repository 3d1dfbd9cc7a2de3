package policy

import (
	"fmt"
	"path"
	"strings"
)

// Finding is one problem [Rules.Lint] sees in a policy.
type Finding struct {
	// Rule is where the entry is written (file:line).
	Rule string `json:"rule"`
	// Entry is the entry as written.
	Entry   string `json:"entry"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Finding kinds.
const (
	FindingShadowed    = "shadowed_by_deny"
	FindingUnknownTool = "unknown_tool"
	FindingAlwaysAsks  = "allow_needs_approval"
	FindingNoOperator  = "no_operator"
	// FindingPathAsText: a pattern on a path-like argument (by its name,
	// see PathLike) that is matched as text, so spellings of one file
	// (".env", "./.env", the absolute path) are decided apart.
	FindingPathAsText = "path_matched_as_text"
)

// LintOptions describe the catalog the policy is checked against.
type LintOptions struct {
	// Tools are the registered tools' names.
	Tools []string
	// RequiresApproval reports a tool whose safety flags demand an
	// approval for every call (an allow cannot waive it).
	RequiresApproval func(tool string) bool
	// CanDecide, when set, reports whether someone may decide approvals
	// for the caller pattern and tool; an approve entry no one can decide
	// is reported.
	CanDecide func(caller, tool string) bool
}

// Lint lists entries that can never decide (shadowed by an unconditional
// deny of the same caller), entries naming no registered tool, allows
// that will ask anyway because of the tool's safety flags, approve
// entries no one can decide (when o.CanDecide is set), and patterns on a
// path-like argument matched as text.
func (r *Rules) Lint(o LintOptions) []Finding {
	var out []Finding
	add := func(e *entry, kind, format string, a ...any) {
		out = append(out, Finding{Rule: e.source, Entry: e.text, Kind: kind, Message: fmt.Sprintf(format, a...)})
	}
	for i := range r.rules {
		cr := &r.rules[i]
		for _, e := range cr.entries {
			if e.effect != EffectDeny {
				if d := r.shadowingDeny(cr, e); d != nil {
					add(e, FindingShadowed, "%s %q can never decide: %q at %s denies everything it matches", e.effect, e.text, d.text, d.source)
				}
			}
			matched := 0
			for _, t := range o.Tools {
				if e.matchesTool(t) {
					matched++
					if e.effect == EffectAllow && o.RequiresApproval != nil && o.RequiresApproval(t) {
						add(e, FindingAlwaysAsks, "tool %s requires approval by its safety flags, so calls this allows still need an approval (set requires_approval: false on the tool to let the policy decide)", t)
					}
					if e.effect == EffectApprove && o.CanDecide != nil && !o.CanDecide(cr.caller, t) {
						add(e, FindingNoOperator, "no operator may decide approvals of %s for caller %s", t, cr.caller)
					}
				}
			}
			if matched == 0 {
				add(e, FindingUnknownTool, "no registered tool matches %s", e.tool)
			}
			if e.hasPat && e.kind == KindText && PathLike(e.field) {
				add(e, FindingPathAsText, "the argument %s of %s is matched as text (main_arg match: text), so %q decides its spelling, not the file: \".env\", \"./.env\" and the absolute path are decided apart; use match: path unless the argument is not a path", e.field, e.tool, e.pat)
			}
		}
	}
	return out
}

// shadowingDeny finds an unconditional deny, in a rule covering cr's
// caller, that matches everything e matches.
func (r *Rules) shadowingDeny(cr *compiledRule, e *entry) *entry {
	for i := range r.rules {
		dr := &r.rules[i]
		if !covers(dr.caller, cr.caller) {
			continue
		}
		for _, d := range dr.entries {
			if d.effect != EffectDeny || d.cond != nil || !covers(d.tool, e.tool) {
				continue
			}
			if !d.hasPat || d.matchesAll() || (e.hasPat && d.pat == e.pat && d.kind == e.kind) {
				return d
			}
		}
	}
	return nil
}

// covers reports whether the glob (or name) a matches every name b
// matches, as far as a string test can tell: equal, or b read as a name
// matches a.
func covers(a, b string) bool {
	if a == b {
		return true
	}
	ok, _ := path.Match(a, b)
	return ok
}

// matchesAll reports a pattern that matches every main argument.
func (e *entry) matchesAll() bool {
	switch {
	case e.domain != "":
		return false
	case e.kind == KindPath:
		return e.pat == "**"
	}
	return strings.Trim(e.pat, "*") == ""
}
