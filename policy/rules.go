package policy

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bmatcuk/doublestar/v4"
)

// Options configure [Compile]. A nil *Options means the defaults.
type Options struct {
	// MainArgs name the main argument of tools beyond the built-in ones
	// (see [BuiltinMainArgs], which they override). A key may be a
	// path.Match glob ("srv.*": every tool of an upstream server).
	MainArgs map[string]MainArg
	// Workspace is the absolute root path arguments are taken relative to
	// (more than one when the root has another spelling, such as its
	// symlink-resolved path). Empty: absolute paths always escape.
	Workspace []string
	// KnownTool, when set, must accept every exact (non-glob) tool name an
	// entry names: an entry for an unknown tool could never match.
	KnownTool func(name string) bool
	// CostLimit bounds one CEL evaluation. Default [DefaultCostLimit].
	CostLimit uint64
}

// DefaultCostLimit bounds one CEL evaluation (in cel-go's cost units: about
// one per operation, and per element of a list or character of a string
// walked).
const DefaultCostLimit = 100_000

// Error is a rule that cannot be compiled, at the line it is written on.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// entry is one compiled list entry or condition.
type entry struct {
	text     string // as written
	quoted   string // text, quoted for reasons
	tool     string // exact name or path.Match glob
	toolGlob bool
	effect   Effect
	source   string
	// With a pattern: the main argument must match it.
	hasPat bool
	kind   ArgKind
	field  string
	pat    string
	// patFold is a KindPath pattern folded as paths are (foldPath).
	patFold string
	domain  string // url_fetch(domain:HOST)
	// A CEL condition.
	cond *condition
}

type compiledRule struct {
	caller     string
	callerGlob bool
	entries    []*entry
}

// Rules is a Policy built by [Compile]; immutable, safe for concurrent use.
type Rules struct {
	rules     []compiledRule
	mainArgs  map[string]MainArg
	globKeys  []string // the mainArgs keys that are globs, sorted
	workspace []string
	// Source rules, kept for explain and check.
	src []Rule

	cache  sync.Map // cacheKey -> []*entry
	cached atomic.Int64
}

// Compile checks every rule and builds the policy: a malformed glob, a
// TOOL(PATTERN) for a tool without a main argument, a tool KnownTool
// refuses, or CEL that does not compile to a boolean is an [*Error] with
// its line, never a silent non-match later.
func Compile(rules []Rule, opts *Options) (*Rules, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.CostLimit == 0 {
		o.CostLimit = DefaultCostLimit
	}
	r := &Rules{mainArgs: map[string]MainArg{}, src: rules}
	for k, v := range BuiltinMainArgs {
		r.mainArgs[k] = v
	}
	for k, v := range o.MainArgs {
		if err := validGlob(k); err != nil {
			return nil, &Error{Msg: fmt.Sprintf("main argument of %q: bad tool pattern: %v", k, err)}
		}
		r.mainArgs[k] = v
	}
	for k := range r.mainArgs {
		if isGlob(k) {
			r.globKeys = append(r.globKeys, k)
		}
	}
	slices.Sort(r.globKeys)
	for _, w := range o.Workspace {
		r.workspace = append(r.workspace, path.Clean(foldPath(strings.ReplaceAll(w, `\`, "/"))))
	}
	var env *celEnv
	for i, rule := range rules {
		errAt := func(line int, format string, a ...any) error {
			if line == 0 {
				line = rule.Pos.Line
			}
			msg := fmt.Sprintf(format, a...)
			if line == 0 {
				msg = fmt.Sprintf("policy rule %d (caller %s): %s", i+1, rule.Caller, msg)
			}
			return &Error{File: rule.Pos.File, Line: line, Msg: msg}
		}
		if rule.Caller == "" {
			return nil, errAt(0, "caller is required")
		}
		if err := validGlob(rule.Caller); err != nil {
			return nil, errAt(0, "bad caller pattern %q: %v", rule.Caller, err)
		}
		for _, a := range rule.Approvers {
			if a == "" {
				return nil, errAt(0, "approvers: an empty operator name")
			}
			if err := validGlob(a); err != nil {
				return nil, errAt(0, "approvers: bad pattern %q: %v", a, err)
			}
		}
		for _, list := range []struct {
			key      string
			patterns []string
			lines    []int
		}{{"resources", rule.Resources, rule.Pos.Resources}, {"prompts", rule.Prompts, rule.Pos.Prompts}} {
			for j, p := range list.patterns {
				if err := validGlob(p); err != nil {
					line := 0
					if j < len(list.lines) {
						line = list.lines[j]
					}
					return nil, errAt(line, "%s: bad pattern %q: %v", list.key, p, err)
				}
			}
		}
		cr := compiledRule{caller: rule.Caller, callerGlob: isGlob(rule.Caller)}
		for _, list := range []struct {
			effect  Effect
			entries []string
			lines   []int
		}{
			{EffectAllow, rule.Allow, rule.Pos.Allow},
			{EffectApprove, rule.Approve, rule.Pos.Approve},
			{EffectDeny, rule.Deny, rule.Pos.Deny},
		} {
			for j, text := range list.entries {
				line := 0
				if j < len(list.lines) {
					line = list.lines[j]
				}
				e, err := r.compileEntry(text, list.effect, o.KnownTool)
				if err != nil {
					return nil, errAt(line, "%s: %v", list.effect, err)
				}
				e.source = rule.Pos.at(list.lines, j, i)
				cr.entries = append(cr.entries, e)
			}
		}
		for _, c := range rule.Conditions {
			if c.Effect != EffectAllow && c.Effect != EffectApprove && c.Effect != EffectDeny {
				return nil, errAt(c.Line, "a rule's effect is allow, approve or deny, not %q", c.Effect)
			}
			e, err := r.compileEntry(c.Tool, c.Effect, o.KnownTool)
			if err != nil {
				return nil, errAt(c.Line, "%s: %v", c.Effect, err)
			}
			if env == nil {
				if env, err = newCELEnv(o.CostLimit); err != nil {
					return nil, err
				}
			}
			if e.cond, err = env.compile(c.If); err != nil {
				return nil, errAt(c.Line, "if: %v", err)
			}
			e.source = rule.Pos.source(c.Line, i)
			e.text = fmt.Sprintf("%s: %s if %s", c.Effect, c.Tool, c.If)
			e.quoted = strconv.Quote(e.text)
			cr.entries = append(cr.entries, e)
		}
		r.rules = append(r.rules, cr)
	}
	return r, nil
}

// DecideContent allows caller the resource (kind KindResource, by URI) or
// prompt (KindPrompt, by name) when a rule naming the caller lists it under
// resources or prompts; else default deny. Tool entries (allow, approve,
// deny, CEL rules) play no part: content is granted only by these lists.
func (r *Rules) DecideContent(caller, kind, name string) Decision {
	for i := range r.rules {
		if !r.rules[i].matchesCaller(caller) {
			continue
		}
		rule := &r.src[i]
		list := rule.Prompts
		if kind == KindResource {
			list = rule.Resources
		}
		for _, p := range list {
			if ok, _ := path.Match(p, name); ok {
				return Decision{Allow: true, Effect: EffectAllow,
					Reason: fmt.Sprintf("caller %s allowed %s %q", caller, kind, p),
					Source: rule.Pos.source(rule.Pos.Line, i)}
			}
		}
	}
	return Decision{Effect: EffectDeny, Reason: fmt.Sprintf("no policy rule allows caller %q the %s %q (default deny)", caller, kind, name)}
}

func isGlob(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// compileEntry parses "TOOL" or "TOOL(PATTERN)".
func (r *Rules) compileEntry(text string, effect Effect, known func(string) bool) (*entry, error) {
	e := &entry{text: text, quoted: strconv.Quote(text), tool: text, effect: effect}
	if i := strings.IndexByte(text, '('); i >= 0 {
		if !strings.HasSuffix(text, ")") {
			return nil, fmt.Errorf("entry %q: TOOL(PATTERN) must end with ')'", text)
		}
		e.tool, e.pat, e.hasPat = text[:i], text[i+1:len(text)-1], true
	}
	if e.tool == "" {
		return nil, fmt.Errorf("entry %q names no tool", text)
	}
	if err := validGlob(e.tool); err != nil {
		return nil, fmt.Errorf("bad pattern %q: %v", text, err)
	}
	e.toolGlob = isGlob(e.tool)
	if !e.toolGlob && known != nil && !known(e.tool) {
		return nil, fmt.Errorf("entry %q: no tool is named %s, so it can never match", text, e.tool)
	}
	if !e.hasPat {
		return e, nil
	}
	ma, ok := r.mainArgFor(e.tool)
	if !ok {
		return nil, fmt.Errorf("entry %q: tool %s has no main argument to match a pattern against (name one with main_arg)", text, e.tool)
	}
	e.kind, e.field = ma.Kind, ma.Field
	if e.pat == "" {
		return nil, fmt.Errorf("entry %q: an empty pattern", text)
	}
	switch e.kind {
	case KindPath:
		if !doublestar.ValidatePattern(e.pat) {
			return nil, fmt.Errorf("entry %q: bad path pattern %q", text, e.pat)
		}
		e.patFold = foldPath(e.pat)
	case KindURL:
		if d, ok := strings.CutPrefix(e.pat, "domain:"); ok {
			d = strings.TrimSuffix(strings.ToLower(d), ".")
			if d == "" || strings.ContainsAny(d, "/:@*? ") {
				return nil, fmt.Errorf("entry %q: domain:%s is not a host name", text, d)
			}
			e.domain = d
		}
	}
	return e, nil
}

// mainArgFor finds a tool's main argument: an exact key first, then globs
// in a stable order.
func (r *Rules) mainArgFor(tool string) (MainArg, bool) {
	if m, ok := r.mainArgs[tool]; ok {
		return m, true
	}
	for _, k := range r.globKeys {
		if ok, _ := path.Match(k, tool); ok {
			return r.mainArgs[k], true
		}
	}
	return MainArg{}, false
}

func (r *compiledRule) matchesCaller(caller string) bool {
	if !r.callerGlob {
		return r.caller == caller
	}
	ok, _ := path.Match(r.caller, caller)
	return ok
}

func (e *entry) matchesTool(tool string) bool {
	if !e.toolGlob {
		return e.tool == tool
	}
	ok, _ := path.Match(e.tool, tool)
	return ok
}

// maxCached bounds the (caller, tool) pairs whose entries are remembered.
const maxCached = 4096

// entriesFor lists the entries naming the caller and the tool, in rule
// order; the answer is cached (the rules never change).
func (r *Rules) entriesFor(caller, tool string) []*entry {
	key := cacheKey{caller, tool}
	if v, ok := r.cache.Load(key); ok {
		return v.([]*entry)
	}
	out := r.findEntries(caller, tool)
	if r.cached.Load() < maxCached {
		if _, loaded := r.cache.LoadOrStore(key, out); !loaded {
			r.cached.Add(1)
		}
	}
	return out
}

type cacheKey struct{ caller, tool string }

func (r *Rules) findEntries(caller, tool string) []*entry {
	var out []*entry
	for i := range r.rules {
		cr := &r.rules[i]
		if !cr.matchesCaller(caller) {
			continue
		}
		for _, e := range cr.entries {
			if e.matchesTool(tool) {
				out = append(out, e)
			}
		}
	}
	return out
}

// Visible reports whether some arguments could be allowed or approved: an
// allow or approve entry names the tool and no unconditional deny does.
// A tool that is not visible looks, to the caller, like no tool at all.
func (r *Rules) Visible(caller, tool string) bool {
	may := false
	for _, e := range r.entriesFor(caller, tool) {
		if e.effect == EffectDeny && !e.hasPat && e.cond == nil {
			return false
		}
		if e.effect != EffectDeny {
			may = true
		}
	}
	return may
}

// ReadsArgs implements [ArgsReader]: a decision on caller calling tool
// reads the arguments only where a rule that applies has a condition or
// an argument pattern.
func (r *Rules) ReadsArgs(caller, tool string) bool {
	for _, e := range r.entriesFor(caller, tool) {
		if e.cond != nil || e.hasPat {
			return true
		}
	}
	return false
}

// Decide decides one call; see the package documentation for the order.
func (r *Rules) Decide(req Request) (d Decision) {
	defer func() {
		// Deciding must never take the gateway down; a bug here denies.
		if p := recover(); p != nil {
			d = Decision{Effect: EffectDeny, Reason: fmt.Sprintf("the policy failed on these arguments (denied): %v", p)}
		}
	}()
	entries := r.entriesFor(req.Caller, req.Tool)
	if len(entries) == 0 {
		return defaultDeny(req)
	}
	// The CEL conditions, once for the call; an error denies.
	var celVars map[string]any
	matched := make([]bool, len(entries)) // conditions that hold
	needArg := false
	for i, e := range entries {
		if e.cond == nil {
			needArg = needArg || e.hasPat
			continue
		}
		if celVars == nil {
			args, err := celValue(req.Args, 0)
			if err != nil {
				return celFailure(e, err)
			}
			celVars = map[string]any{"caller": req.Caller, "session": req.Session, "tool": req.Tool, "args": args}
		}
		ok, err := e.cond.eval(celVars)
		if err != nil {
			return celFailure(e, err)
		}
		matched[i] = ok
		needArg = needArg || (ok && e.hasPat)
	}
	parts := []subject{{}}
	var shell bool
	if needArg {
		ma, _ := r.mainArgFor(req.Tool)
		var err error
		parts, err = r.subjects(ma, req.Args, req.RealPath)
		if err != nil {
			return Decision{Effect: EffectDeny, Err: err, Reason: err.Error()}
		}
		shell = ma.Kind == KindShell
	}
	var out Decision
	worst := -1
	counted := 0
	if shell && !slices.ContainsFunc(parts, func(s subject) bool { return !s.denyOnly }) {
		// Only hidden commands (case 'a[$(x)]' in esac): decided as the
		// empty command, as a command of comments is, and with them.
		parts = append(parts, subject{})
	}
	for _, s := range parts {
		p := decidePart(entries, matched, s)
		if s.denyOnly && !(p.explicit && p.Effect == EffectDeny) {
			continue
		}
		counted++
		if shell {
			out.Parts = append(out.Parts, p.Part)
		}
		if rk := p.rank(); rk > worst {
			worst = rk
			out.Effect, out.Source, out.Reason = p.Effect, p.Source, p.Reason
			switch {
			case shell:
				out.Reason = fmt.Sprintf("%q: %s", p.Text, p.Reason)
			case rk == 3 && s.noAllow == "":
				out.Reason = defaultDeny(req).Reason
			}
			if s.label != "" {
				out.Reason = s.label + ": " + out.Reason
			}
		}
	}
	switch out.Effect {
	case EffectAllow:
		out.Allow = true
	case EffectApprove:
		out.Allow, out.RequireApproval = true, true
	}
	if shell && counted > 1 {
		out.Reason += fmt.Sprintf(" (the strictest of %d commands)", counted)
	}
	return out
}

type partDecision struct {
	Part
	explicit bool
}

// rank orders part decisions: allow, approve, explicit deny, default deny
// (the default deny is reported first: no rule spoke for that part).
func (p partDecision) rank() int {
	if p.Effect == EffectDeny && !p.explicit {
		return 3
	}
	return p.Effect.rank()
}

// outranks says whether e decides over best: a deny over everything; then
// an entry that looks at the arguments (a pattern other than only '*', or a
// condition) over one that names only the tool; then approve over allow.
// So "approve: [bash(*)]" asks for every command that a more specific
// "allow: [bash(git status)]" does not allow, while "approve: [write]"
// still needs an approval for what a bare "allow: [write]" allows.
func outranks(e, best *entry) bool {
	if (e.effect == EffectDeny) != (best.effect == EffectDeny) {
		return e.effect == EffectDeny
	}
	if e.specific() != best.specific() {
		return e.specific()
	}
	return e.effect.rank() > best.effect.rank()
}

func (e *entry) specific() bool {
	return e.cond != nil || (e.hasPat && strings.Trim(e.pat, "*") != "")
}

func decidePart(entries []*entry, matched []bool, s subject) partDecision {
	var best *entry
	for i, e := range entries {
		if e.cond != nil && !matched[i] {
			continue
		}
		if s.denyOnly && e.effect != EffectDeny {
			continue
		}
		if e.hasPat && !e.matches(s) {
			continue
		}
		if e.effect == EffectAllow && e.hasPat && s.noAllow != "" {
			// Only a pattern is blind to what makes the part opaque; an
			// entry naming the bare tool allows every argument, as it
			// always did, whatever other entries the tool has.
			continue
		}
		if best == nil || outranks(e, best) {
			best = e
		}
	}
	p := partDecision{Part: Part{Text: s.text}}
	if best == nil {
		p.Effect = EffectDeny
		p.Reason = "no rule allows it (default deny)"
		if s.noAllow != "" {
			p.Reason = s.noAllow + ", so no allow applies (default deny)"
		}
		return p
	}
	p.explicit = true
	p.Effect, p.Source = best.effect, best.source
	// Concatenation, not Sprintf: this runs for every part of every call.
	switch best.effect {
	case EffectAllow:
		p.Reason = "allowed by " + best.quoted + " at " + best.source
	case EffectApprove:
		p.Reason = "needs approval by " + best.quoted + " at " + best.source
	default:
		p.Reason = "denied by " + best.quoted + " at " + best.source
	}
	return p
}

func defaultDeny(req Request) Decision {
	return Decision{Effect: EffectDeny, Reason: fmt.Sprintf("no policy rule allows caller %q to call %q (default deny)", req.Caller, req.Tool)}
}

func celFailure(e *entry, err error) Decision {
	return Decision{Effect: EffectDeny, Source: e.source,
		Reason: fmt.Sprintf("the condition at %s failed to evaluate, so the call is denied: %v", e.source, err)}
}
