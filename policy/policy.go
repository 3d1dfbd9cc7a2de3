// Package policy decides which callers may call which tools, with which
// arguments, and which calls need a person's approval first. The default is
// deny: a caller no rule names may call nothing.
//
// What it promises:
//
//   - An entry is a tool name or glob ("fs.*"), or TOOL(PATTERN), which
//     matches only when the tool's main argument matches PATTERN (see
//     [MainArg]). Rules may add CEL conditions (see [Condition]).
//   - Order: a matching deny forbids; else a matching approve needs an
//     approval; else a matching allow allows; else default deny. Between
//     approve and allow, an entry that looks at the arguments (a PATTERN
//     other than "*", or a CEL condition) outranks one that names only the
//     tool: approve "bash(*)" with allow "bash(git status)" allows
//     "git status" and asks for the rest, while approve "write" with allow
//     "write" still asks (see outranks).
//   - A shell command (a [KindShell] main argument) is parsed, never matched
//     as text: each part bash may execute, including those in &&, ||, ;,
//     pipes, subshells, $(...), backticks and process substitutions, is
//     decided alone and the call gets the strictest decision of its parts.
//     A part is a simple command, a [[ ]] or (( )) command, a C-style for
//     header, or an expansion bash evaluates (a parameter operator,
//     arithmetic with a name, a subscript). An allow pattern matches only
//     a simple command whose name and arguments are literals or plain
//     $VAR / ${VAR}, which does not evaluate its arguments (eval, sh -c,
//     let, declare -i, printf -v, read, mapfile, test -v, ...) and does not
//     write to a file through a redirection, and a [[ ]] or (( )) of
//     literals (numbers where bash does arithmetic); a bare tool name still
//     allows everything. Commands written inside text that bash may run
//     later ('a[$(x)]' evaluated as arithmetic, the arguments of eval,
//     sudo or find -exec) are matched against deny entries too.
//   - Deciding a shell command is bounded: a command nested more than 64
//     levels (by a scan before the parser), with a syntax tree deeper than
//     512, or costing more than about 2 M steps, is refused with
//     [ErrUnparsable], as is a command that does not parse.
//   - A path ([KindPath]) is cleaned and made relative to the workspace;
//     given the real path the backend resolved ([Request.RealPath]), it is
//     decided on both and the stricter decision wins. Paths and patterns
//     are compared regardless of case on macOS and Windows, and '\' is a
//     separator on Windows.
//   - CEL conditions are compiled and type-checked by [Compile]; their
//     evaluation is bounded by a cost limit, and an evaluation error decides
//     deny (fail closed).
//   - Every Decision names the rule that decided it (file:line when the
//     rule came from a file). Decide never panics on any argument value.
package policy

import (
	"errors"
	"fmt"
	"path"
	"sync/atomic"
)

// Effect is what a matching entry does.
type Effect string

// The effects, from the most permissive to the strictest.
const (
	EffectAllow   Effect = "allow"
	EffectApprove Effect = "approve"
	EffectDeny    Effect = "deny"
)

func (e Effect) rank() int {
	switch e {
	case EffectAllow:
		return 0
	case EffectApprove:
		return 1
	}
	return 2
}

// Request is one call to decide: who calls which tool with which (already
// validated) arguments.
type Request struct {
	Caller  string
	Session string
	Tool    string
	// Args are the decoded arguments: map[string]any, []any, string, bool,
	// nil, and numbers as jsonstrict.Number, json.Number, int64 or float64.
	// nil means none (a tool listing decides on the tool alone).
	Args any
	// RealPath, when set, is the [KindPath] main argument resolved by the
	// backend: relative to the workspace, every symbolic link followed,
	// slash-separated ("." the workspace). The path is then decided on it
	// and on the text as written, and the stricter decision wins: a deny
	// that matches either denies, and an allow must match both.
	RealPath string
}

// Decision is the verdict for one Request.
type Decision struct {
	Allow           bool
	RequireApproval bool
	// Effect is allow, approve or deny (approve: Allow and RequireApproval).
	Effect Effect
	// Reason says which rule decided, for the audit log and error messages.
	Reason string
	// Source is the deciding rule's place, "file:line" (or "rule N" for
	// rules built without a file); "" for the default deny.
	Source string
	// Parts are the decisions of each simple command of a shell command,
	// in source order; nil for other tools.
	Parts []Part
	// Err is set when the arguments could not be decided at all (a shell
	// command that does not parse: wraps [ErrUnparsable]); Allow is false.
	Err error
}

// Part is the decision on one simple command of a shell command.
type Part struct {
	// Text is the command as matched: its words, unquoted, one space apart.
	Text   string `json:"text"`
	Effect Effect `json:"decision"`
	Source string `json:"rule,omitempty"`
	Reason string `json:"reason"`
}

// ErrUnparsable is wrapped by Decision.Err when a shell command does not
// parse; the gateway reports it as a validation error.
var ErrUnparsable = errors.New("the command does not parse")

// Policy decides calls. Implementations are safe for concurrent use.
type Policy interface {
	Decide(Request) Decision
}

// Rule grants one caller a set of tools. Caller is an exact name or a
// path.Match glob. Entries are tool names or path.Match globs ("fs.*"; '*'
// does not cross a '/'), or TOOL(PATTERN) (see [MainArg]).
type Rule struct {
	Caller string `json:"caller" yaml:"caller"`
	// Allow lists what the caller may call.
	Allow []string `json:"allow" yaml:"allow"`
	// Approve lists what the caller may call after an approval.
	Approve []string `json:"approve,omitempty" yaml:"approve"`
	// Deny lists what the caller may never call; it wins over both.
	Deny []string `json:"deny,omitempty" yaml:"deny"`
	// Conditions are the CEL rules.
	Conditions []Condition `json:"rules,omitempty" yaml:"rules"`
	// Pos says where the rule and its entries are written, for decisions
	// and errors; zero when built by hand.
	Pos Pos `json:"-" yaml:"-"`
	// Approvers names the operators (exact names or path.Match globs) who
	// may decide this rule's approvals; none means any operator. See
	// [Rules.ApproverRule].
	Approvers []string `json:"approvers,omitempty" yaml:"approvers"`
	// SelfApprove lets the person at the caller's own client decide this
	// rule's approvals through MCP elicitation. Default false: operators only.
	SelfApprove bool `json:"self_approve,omitempty" yaml:"self_approve"`
	// Resources lists the upstream resources, by URI, the caller may list
	// and read; Prompts the upstream prompts, by name, it may list and get.
	// The same patterns as for tools; none: none (default deny).
	Resources []string `json:"resources,omitempty" yaml:"resources"`
	Prompts   []string `json:"prompts,omitempty" yaml:"prompts"`
}

// What a rule may grant besides tools (see [Rules.DecideContent]).
const (
	KindResource = "resource"
	KindPrompt   = "prompt"
)

// ContentPolicy decides which upstream resources and prompts a caller may
// see and read. Implementations are safe for concurrent use.
type ContentPolicy interface {
	DecideContent(caller, kind, name string) Decision
}

// Condition is a CEL rule: Effect applies to Tool (an entry as in the
// lists) when If, a CEL expression over caller, session, tool and args,
// evaluates to true.
type Condition struct {
	Effect Effect `json:"effect"`
	Tool   string `json:"tool"`
	If     string `json:"if"`
	// Line is where the condition is written (0: unknown).
	Line int `json:"-"`
}

// Pos is where a rule is written. The entry slices parallel the rule's
// lists; a missing line is 0.
type Pos struct {
	File                 string
	Line                 int
	Allow, Approve, Deny []int
	Resources, Prompts   []int
}

func (p Pos) at(lines []int, i, ruleIndex int) string {
	line := p.Line
	if i < len(lines) && lines[i] > 0 {
		line = lines[i]
	}
	return p.source(line, ruleIndex)
}

func (p Pos) source(line, ruleIndex int) string {
	switch {
	case p.File != "" && line > 0:
		return fmt.Sprintf("%s:%d", p.File, line)
	case line > 0:
		return fmt.Sprintf("line %d", line)
	}
	return fmt.Sprintf("rule %d", ruleIndex+1)
}

// NewRules builds the policy with the default [Options]: the built-in
// tools' main arguments, no workspace (paths are matched cleaned, absolute
// paths never match).
func NewRules(rules []Rule) (*Rules, error) {
	return Compile(rules, nil)
}

// ArgsReader is a Policy that can say, before deciding, whether its
// decision on caller calling tool reads Request.Args: where it does not,
// the gateway leaves Args nil and need not build the arguments as Go
// values. A Policy that is not one is always given them.
type ArgsReader interface {
	ReadsArgs(caller, tool string) bool
}

// DenyAll refuses every call.
type DenyAll struct{}

// ReadsArgs implements [ArgsReader]: DenyAll reads nothing.
func (DenyAll) ReadsArgs(caller, tool string) bool { return false }

func (DenyAll) Decide(Request) Decision {
	return Decision{Effect: EffectDeny, Reason: "no policy configured (default deny)"}
}

// Live is a Policy whose rules can be replaced while calls are decided: each
// call is decided by the policy in force when Decide is called. The zero
// Live denies everything.
type Live struct {
	p atomic.Pointer[Policy]
}

// NewLive returns a Live policy starting with p.
func NewLive(p Policy) *Live {
	l := &Live{}
	l.Store(p)
	return l
}

// Store replaces the policy in force.
func (l *Live) Store(p Policy) {
	if p == nil {
		p = DenyAll{}
	}
	l.p.Store(&p)
}

// Load returns the policy in force.
func (l *Live) Load() Policy {
	if p := l.p.Load(); p != nil {
		return *p
	}
	return DenyAll{}
}

func (l *Live) Decide(r Request) Decision { return l.Load().Decide(r) }

// Visible asks the policy in force (see [Visible]).
func (l *Live) Visible(caller, tool string) bool { return Visible(l.Load(), caller, tool) }

// ApproverRule asks the policy in force; one that does not say leaves
// decisions to any operator (see [Approvers]).
func (l *Live) ApproverRule(caller, tool string) ApproverRule {
	if a, ok := l.Load().(Approvers); ok {
		return a.ApproverRule(caller, tool)
	}
	return ApproverRule{}
}

// DecideContent asks the policy in force; one that does not say denies
// every resource and prompt (default deny).
func (l *Live) DecideContent(caller, kind, name string) Decision {
	if c, ok := l.Load().(ContentPolicy); ok {
		return c.DecideContent(caller, kind, name)
	}
	return Decision{Effect: EffectDeny, Reason: fmt.Sprintf("the policy in force grants no %ss (default deny)", kind)}
}

// validGlob reports whether p is a well-formed path.Match pattern.
func validGlob(p string) error {
	_, err := path.Match(p, "")
	return err
}

func (DenyAll) DecideContent(caller, kind, name string) Decision {
	return Decision{Effect: EffectDeny, Reason: "no policy configured (default deny)"}
}
