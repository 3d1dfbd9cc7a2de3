package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// Shell commands are parsed with mvdan.cc/sh (bash syntax) and split into
// the parts bash may execute. syntax.Walk reaches every node, including
// those inside &&, ||, ;, pipes, subshells, blocks, if/for/while/case,
// function bodies, $(...), backticks, <(...) and >(...), and here-documents.
// A part is:
//
//   - each simple command (and declaration, let, bare writing redirection),
//     decided on its words; it matches no allow when a word is not literal
//     or a plain $VAR / ${VAR} (a command's output, an arithmetic
//     expansion, a parameter operator), or when the command evaluates its
//     arguments as code, arithmetic or variable names (see evaluating);
//   - each [[ ]] and (( )) command, and each C-style for header, decided on
//     its text; it matches no allow unless every operand is an inert
//     literal (numbers where bash does arithmetic);
//   - each expansion bash evaluates, wherever it stands (a for list, a case
//     word, a here-document): parameter operators, arithmetic with names,
//     array subscripts; decided on its text, never allowed;
//   - deny-only parts: the commands inside text bash may run later, which
//     the parser sees as a string ('a[$(id)]' becomes code in arithmetic,
//     "${x@P}" or a declare), and inside the arguments of commands that run
//     their arguments (eval, bash -c, sudo, find -exec). Only deny entries
//     are matched against them: a deny pattern sees "rm -rf x" however it
//     is wrapped, while a literal string that merely looks like code does
//     not need an allow of its own.
//
// Where bash reads the text differently from the parser, the splitter
// follows bash or refuses: time after a | is the program time; a
// here-document inside a substitution matches no allow (bash 5.2 joins the
// commands after it); a here-document whose parsed body holds its own
// delimiter line is refused (bash ends the body there and runs the rest).
// The differential test against bash (shell_bash_test.go) found these.
//
// Work is bounded before and while parsing (see the limits below): a
// command over a limit is denied (an error wrapping ErrUnparsable), never
// decided on a part of it.

const (
	// maxShellBytes bounds the command the parser is given. A longer one is
	// one subject (its whole text) that no allow matches: a deny pattern
	// still applies to it, and an approve lets a person decide.
	maxShellBytes = 64 << 10
	// maxShellParts bounds the parts of one command; more are one subject,
	// the whole text, that no allow matches.
	maxShellParts = 1000
	// maxShellNesting bounds the nesting a scan of the text counts before
	// the parser sees it (nestingOver): the parser recurses once per
	// level, and 30,000 levels of "(" cost it 128 MB of stack.
	maxShellNesting = 64
	// maxShellTreeDepth bounds the depth of the parsed tree, checked as
	// the tree is walked (the walk stops there): it is what bounds the
	// recursion of the walk, whatever the scan missed.
	maxShellTreeDepth = 512
	// maxShellWork bounds the work of one decision: nodes visited, bytes
	// parsed (here-documents and strings parsed again as hidden code), and
	// bytes of part text made. "$(" x 21,000 once cost 13 s.
	maxShellWork = 2 << 20
	// maxHiddenDepth bounds how many strings deep hidden code is looked
	// for ('"$(...)"' inside a string inside a string ...).
	maxHiddenDepth = 3
	// maxHiddenArgs bounds the arguments of one command whose suffixes
	// are parsed as hidden commands.
	maxHiddenArgs = 16
	// parseCost is the work charged for starting one parse.
	parseCost = 64
)

// errTooComplex is wrapped by the errors of commands over a work limit.
var errTooComplex = errors.New("it is too complex to decide")

// opaque are commands that run code given to them as arguments or that
// run another command named in their arguments: an allow pattern cannot
// see what they will do, so none matches them. Their arguments are parsed
// as hidden commands, for deny patterns.
var opaque = map[string]bool{
	"eval": true, "exec": true, "source": true, ".": true, "command": true, "builtin": true,
	"env": true, "xargs": true, "sudo": true, "doas": true, "su": true, "nohup": true,
	"nice": true, "ionice": true, "timeout": true, "time": true, "setsid": true, "stdbuf": true,
	"chroot": true, "unshare": true, "nsenter": true, "watch": true, "parallel": true,
	"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"fish": true, "csh": true, "tcsh": true, "busybox": true, "coproc": true, "trap": true,
	// Builtins that define code run later or elsewhere: alias (with
	// expand_aliases), enable -f (a shared object), fc -s (history),
	// complete -C / compgen -C -F -W (commands, functions, expanded words),
	// bind -x, hash -p (what a later name runs).
	"alias": true, "enable": true, "fc": true, "complete": true, "compgen": true,
	"bind": true, "hash": true,
}

// storing are builtins that assign to variable names taken from their
// arguments or input: a name with a subscript ('a[$(id)]') is evaluated
// as arithmetic, which runs the command substitution in it.
var storing = map[string]bool{
	"let": true, "read": true, "mapfile": true, "readarray": true, "getopts": true,
}

// declaring are the declaration builtins; they parse their arguments as
// assignments (subscripts, compound arrays) and -i makes values arithmetic,
// -n makes a name an alias of another.
var declaring = map[string]bool{
	"declare": true, "typeset": true, "local": true, "export": true, "readonly": true, "nameref": true,
}

// splitter walks one command and collects its parts.
type splitter struct {
	src      string // the text the current tree was parsed from
	parts    []subject
	work     int
	parsed   int // bytes given to the parser
	depth    int // of the current walk
	hidden   int // strings deep, while a hidden text is walked
	denyOnly bool
	tooMany  bool
	err      error
	// pending are argument lists to parse as hidden commands once the
	// statement naming them is a part (so parts stay in source order).
	pending [][]string
	// substs counts the command and process substitutions the walk is in.
	substs int
	// kinds marks, per level of the walk, the nodes that are
	// substitutions, so that leaving one is seen.
	kinds []bool
}

// splitShell parses cmd into its parts. A command that does not parse, or
// is over a work limit, is an error wrapping ErrUnparsable.
func splitShell(cmd string) ([]subject, error) {
	parts, _, err := split(cmd)
	return parts, err
}

// splitStats count the work of one split, for tests of its bounds.
type splitStats struct {
	work   int // the units charged against maxShellWork
	parsed int // bytes given to the parser
}

func split(cmd string) (parts []subject, st splitStats, err error) {
	if len(cmd) > maxShellBytes {
		return []subject{{text: cmd, noAllow: fmt.Sprintf("the command is longer than %d bytes", maxShellBytes)}}, st, nil
	}
	if !utf8.ValidString(cmd) || strings.ContainsRune(cmd, 0) {
		return nil, st, fmt.Errorf("%w: it is not valid UTF-8 text", ErrUnparsable)
	}
	sp := &splitter{}
	defer func() {
		st = splitStats{work: sp.work, parsed: sp.parsed}
		if p := recover(); p != nil {
			parts, err = nil, fmt.Errorf("%w: %v", ErrUnparsable, p)
		}
	}()
	f, err := sp.parse(cmd, false)
	if err != nil {
		return nil, st, err
	}
	sp.walk(cmd, f)
	if sp.err != nil {
		return nil, st, sp.err
	}
	if sp.tooMany {
		return []subject{{text: cmd, noAllow: fmt.Sprintf("the command has more than %d parts", maxShellParts)}}, st, nil
	}
	if len(sp.parts) == 0 {
		// Only comments or blanks: nothing runs; decided as the empty command.
		return []subject{{}}, st, nil
	}
	return sp.parts, st, nil
}

// parse parses src as a program, or as the body of a here-document (text
// as bash expands it inside double quotes) when doc is set.
func (sp *splitter) parse(src string, doc bool) (syntax.Node, error) {
	// A parse costs about a hundred nodes' work before its first byte.
	if sp.charge(parseCost + len(src)) {
		return nil, sp.err
	}
	if nestingOver(src, maxShellNesting) {
		return nil, fmt.Errorf("%w: %w: it nests more than %d levels deep", ErrUnparsable, errTooComplex, maxShellNesting)
	}
	sp.parsed += len(src)
	parser := parsers.Get().(*syntax.Parser)
	var n syntax.Node
	var err error
	if doc {
		var w *syntax.Word
		w, err = parser.Document(strings.NewReader(src))
		if w != nil {
			n = w
		}
	} else {
		var f *syntax.File
		f, err = parser.Parse(strings.NewReader(src), "")
		n = f
	}
	parsers.Put(parser)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnparsable, err)
	}
	if n == nil {
		return nil, fmt.Errorf("%w: nothing was parsed", ErrUnparsable)
	}
	return n, nil
}

// charge counts n units of work; true when the bound is passed (sp.err
// then says so).
func (sp *splitter) charge(n int) bool {
	sp.work += n
	if sp.work > maxShellWork && sp.err == nil {
		sp.err = fmt.Errorf("%w: %w: deciding it takes more than %d steps", ErrUnparsable, errTooComplex, maxShellWork)
	}
	return sp.err != nil
}

// walk visits every node of n, parsed from src.
func (sp *splitter) walk(src string, n syntax.Node) {
	oldSrc, oldDepth, oldKinds, oldSubsts := sp.src, sp.depth, sp.kinds, sp.substs
	sp.src, sp.depth, sp.kinds, sp.substs = src, 0, nil, 0
	syntax.Walk(n, sp.visit)
	sp.src, sp.depth, sp.kinds, sp.substs = oldSrc, oldDepth, oldKinds, oldSubsts
}

func (sp *splitter) visit(n syntax.Node) bool {
	if n == nil {
		sp.depth--
		if last := len(sp.kinds) - 1; last >= 0 {
			if sp.kinds[last] {
				sp.substs--
			}
			sp.kinds = sp.kinds[:last]
		}
		return true
	}
	if sp.err != nil || sp.tooMany || sp.charge(1) {
		return false
	}
	sp.depth++
	if sp.depth > maxShellTreeDepth {
		sp.err = fmt.Errorf("%w: %w: its syntax tree is more than %d levels deep", ErrUnparsable, errTooComplex, maxShellTreeDepth)
		return false
	}
	subst := false
	switch n.(type) {
	case *syntax.CmdSubst, *syntax.ProcSubst:
		subst = true
		sp.substs++
	}
	sp.kinds = append(sp.kinds, subst)
	switch n := n.(type) {
	case *syntax.Stmt:
		if s, ok := sp.stmtSubject(n); ok {
			sp.add(s)
		}
		pending := sp.pending
		sp.pending = nil
		for _, args := range pending {
			sp.hiddenArgs(args)
		}
	case *syntax.BinaryCmd:
		// echo 'cmd' | bash: the text piped into a command that runs its
		// input is a hidden command, for deny patterns.
		if n.Op == syntax.Pipe || n.Op == syntax.PipeAll {
			// time is a keyword only at the start of a pipeline: after a
			// |, bash runs the program time, which runs its arguments.
			// The parser reads the keyword there; the command it times is
			// a part already, and this one says what bash really runs.
			y := n.Y
			for {
				b, ok := y.Cmd.(*syntax.BinaryCmd)
				if !ok || (b.Op != syntax.Pipe && b.Op != syntax.PipeAll) {
					break
				}
				y = b.X
			}
			if _, ok := y.Cmd.(*syntax.TimeClause); ok {
				sp.add(subject{text: sp.text(y), noAllow: "after a |, time is the program time, which runs the command in its arguments"})
			}
			if y, ok := n.Y.Cmd.(*syntax.CallExpr); ok && len(y.Args) > 0 {
				if name, lit := literal(y.Args[0]); lit && opaque[baseName(name)] {
					if x, ok := n.X.Cmd.(*syntax.CallExpr); ok && len(x.Args) > 1 {
						sp.hiddenArgs(sp.literals(x.Args[1:]))
					}
				}
			}
		}
	case *syntax.ParamExp:
		if !plainParam(n) {
			sp.add(subject{text: sp.text(n), noAllow: fmt.Sprintf("the parameter expansion %s may assign, evaluate or run its text", sp.text(n))})
		}
	case *syntax.ArithmExp:
		if !numeric(n.X) {
			sp.add(subject{text: sp.text(n), noAllow: fmt.Sprintf("the arithmetic %s evaluates variables, which may hold code", sp.text(n))})
		}
	case *syntax.CStyleLoop:
		// A part, as an (( )) command is: bash evaluates each of the three.
		s := subject{text: "for " + sp.text(n)}
		if !numeric(n.Init) || !numeric(n.Cond) || !numeric(n.Post) {
			s.noAllow = "the arithmetic of the for loop evaluates variables, which may hold code"
		}
		sp.add(s)
	case *syntax.Assign:
		if n.Index != nil && !numeric(n.Index) {
			sp.add(subject{text: sp.text(n), noAllow: fmt.Sprintf("the subscript of %s is evaluated as arithmetic", sp.text(n))})
		}
	case *syntax.ArrayElem:
		if n.Index != nil && !numeric(n.Index) {
			sp.add(subject{text: sp.text(n), noAllow: fmt.Sprintf("the subscript of %s is evaluated as arithmetic", sp.text(n))})
		}
	case *syntax.Redirect:
		if n.N != nil && strings.HasPrefix(n.N.Value, "{") {
			sp.add(subject{text: sp.text(n), noAllow: "the redirection assigns a descriptor to a variable name"})
		}
		if n.Hdoc != nil && sp.substs > 0 {
			// bash 5.2 re-reads a substitution that holds a here-document
			// and runs "a; b" on the line after it as "a b".
			sp.add(subject{text: sp.redirText(n), noAllow: "bash 5.2 may join the commands after a here-document inside a substitution"})
		}
		if n.Hdoc != nil && sp.hidden == 0 && sp.hdocEndsEarly(n) {
			// bash ends a here-document at the first line that is its
			// delimiter, whatever $(...) the body opened; the parser
			// read past one (a here-document inside a substitution
			// inside a here-document). The lines after it are commands to
			// bash and text to the parser: nothing can be decided.
			sp.err = fmt.Errorf("%w: the here-document %s has a line that ends it for bash where the parser reads on", ErrUnparsable, sp.redirText(n))
			return false
		}
	case *syntax.Lit:
		sp.hiddenText(n.Value, true)
	case *syntax.SglQuoted:
		sp.hiddenText(n.Value, true)
	}
	return sp.err == nil && !sp.tooMany
}

func (sp *splitter) add(s subject) {
	if sp.charge(len(s.text)) {
		return
	}
	if len(sp.parts) == maxShellParts {
		sp.tooMany = true
		return
	}
	s.denyOnly = sp.denyOnly
	sp.parts = append(sp.parts, s)
}

// hiddenText looks for commands in text that bash may run later although
// the parser sees a string: parsed as a here-document body (doc) or as a
// program. What it finds are deny-only parts; text that does not parse
// hides nothing bash would run the same way.
func (sp *splitter) hiddenText(text string, doc bool) {
	if sp.hidden >= maxHiddenDepth || sp.err != nil || sp.tooMany {
		return
	}
	if doc && !runsCommand(text) {
		return
	}
	n, err := sp.parse(text, doc)
	if err != nil {
		if errors.Is(err, errTooComplex) {
			sp.err = err
		}
		return
	}
	oldDeny := sp.denyOnly
	sp.hidden++
	sp.denyOnly = true
	sp.walk(text, n)
	sp.hidden--
	sp.denyOnly = oldDeny
}

// hdocEndsEarly reports a here-document body, as parsed, holding a line
// that is its delimiter: bash would have ended the body there.
func (sp *splitter) hdocEndsEarly(r *syntax.Redirect) bool {
	delim, ok := literal(r.Word)
	if !ok {
		delim = sp.text(r.Word) // bash does not expand a delimiter
	}
	// The parsed body ends with its delimiter line: only the lines
	// before it count.
	lines := strings.Split(sp.text(r.Hdoc), "\n")
	for _, line := range lines[:len(lines)-1] {
		if r.Op == syntax.DashHdoc {
			line = strings.TrimLeft(line, "\t")
		}
		if line == delim {
			return true
		}
	}
	return false
}

// runsCommand reports text that can hold a command when expanded: a
// command or process substitution. Other text ($x, ${x}) runs nothing,
// whatever evaluates it, and is not worth a parse.
func runsCommand(text string) bool {
	return strings.Contains(text, "$(") || strings.ContainsRune(text, '`') ||
		strings.Contains(text, "<(") || strings.Contains(text, ">(")
}

// hiddenArgs parses each literal argument, and each run of arguments to
// the end, as a program: the command an opaque command (or find -exec)
// runs, for deny patterns.
func (sp *splitter) hiddenArgs(args []string) {
	if len(args) > maxHiddenArgs {
		args = args[len(args)-maxHiddenArgs:]
	}
	for i := range args {
		sp.hiddenText(args[i], false)
		if i+1 < len(args) {
			sp.hiddenText(strings.Join(args[i:], " "), false)
		}
	}
}

// text is n's source text.
func (sp *splitter) text(n syntax.Node) string {
	a, b := int(n.Pos().Offset()), int(n.End().Offset())
	if n.Pos().IsValid() && n.End().IsValid() && 0 <= a && a <= b && b <= len(sp.src) {
		return sp.src[a:b]
	}
	return fmt.Sprintf("%T", n)
}

// wordText is a word as matched: its value when literal, else its source.
func (sp *splitter) wordText(w *syntax.Word) (string, bool) {
	if t, ok := literal(w); ok {
		return t, true
	}
	return sp.text(w), false
}

// stmtSubject describes one statement, when it is a simple command (or a
// declaration, a let, a test or arithmetic command, or a bare redirection
// that writes).
func (sp *splitter) stmtSubject(st *syntax.Stmt) (subject, bool) {
	var s subject
	var words []string
	// why records the first reason the part may not be allowed.
	why := func(format string, a ...any) {
		if s.noAllow == "" {
			s.noAllow = fmt.Sprintf(format, a...)
		}
	}
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		for _, a := range c.Assigns {
			words = append(words, sp.text(a))
			if r := assignHazard(a); r != "" {
				why("the assignment %s %s", sp.text(a), r)
			}
		}
		name := ""
		for i, w := range c.Args {
			text, lit := sp.wordText(w)
			if i == 0 {
				name = text
				switch {
				case !lit:
					why("the command name %s is not a literal", text)
				case strings.ContainsAny(text, "*?[{") && text != "[":
					why("the command name %s would be expanded", text)
				case opaque[baseName(text)]:
					why("%s runs code its arguments give it", text)
				case storing[text]:
					why("%s evaluates its arguments as arithmetic or variable names", text)
				}
			} else {
				if r := wordHazard(w); r != "" {
					why("the argument %s is %s", text, r)
				}
				if lit && i+1 < len(c.Args) && (text == "-exec" || text == "-execdir" || text == "-ok" || text == "-okdir") {
					sp.pending = append(sp.pending, sp.literals(c.Args[i+1:min(len(c.Args), i+1+maxHiddenArgs)]))
				}
			}
			words = append(words, text)
		}
		evalWhy := evaluating(name, c.Args)
		if evalWhy != "" {
			why("%s", evalWhy)
		}
		if len(c.Args) > 0 && (opaque[baseName(name)] || storing[name] || evalWhy != "") {
			// What it may run is in its arguments (mapfile -C, trap, eval,
			// sudo), or its input (bash <<< 'cmd'): for deny patterns.
			args := sp.literals(c.Args[max(1, len(c.Args)-maxHiddenArgs):])
			if name == "alias" {
				// alias x='cmd': the command is the value.
				for i, a := range args {
					if _, v, ok := strings.Cut(a, "="); ok {
						args[i] = v
					}
				}
			}
			sp.pending = append(sp.pending, args)
			for _, r := range st.Redirs {
				switch {
				case r.Hdoc != nil:
					sp.pending = append(sp.pending, sp.literals([]*syntax.Word{r.Hdoc}))
				case r.Op == syntax.WordHdoc && r.Word != nil:
					sp.pending = append(sp.pending, sp.literals([]*syntax.Word{r.Word}))
				}
			}
		}
		if len(c.Args) == 0 && len(c.Assigns) > 0 && len(st.Redirs) == 0 {
			// Assignments alone: their values' substitutions are parts of
			// their own; the assignment is decided as its text.
			s.text = strings.Join(words, " ")
			return s, true
		}
	case *syntax.DeclClause:
		words = append(words, c.Variant.Value)
		for _, a := range c.Args {
			words = append(words, sp.text(a))
			if r := declHazard(a); r != "" {
				why("%s %s: %s", c.Variant.Value, sp.text(a), r)
			}
		}
	case *syntax.LetClause:
		words = append(words, sp.text(c))
		why("let evaluates its arguments as arithmetic")
	case *syntax.TestClause:
		words = append(words, sp.text(c))
		if r := testHazard(c.X); r != "" {
			why("in %s, %s", sp.text(c), r)
		}
	case *syntax.ArithmCmd:
		words = append(words, sp.text(c))
		if !numeric(c.X) {
			why("%s evaluates variables as arithmetic, which may hold code", sp.text(c))
		}
	case nil:
		// A bare redirection ("> file") truncates or creates a file.
	default:
		// A compound command: its statements are parts of their own; a
		// redirection on the whole still writes.
		if w := sp.writeRedirect(st.Redirs); w != "" {
			return subject{text: w, noAllow: "it writes to a file through a redirection"}, true
		}
		if r := sp.readRedirect(st.Redirs); r != "" {
			return subject{text: r, noAllow: "it reads a file through a redirection"}, true
		}
		return s, false
	}
	for _, r := range st.Redirs {
		words = append(words, sp.redirText(r))
		if r.Word != nil {
			if h := wordHazard(r.Word); h != "" {
				why("the redirection %s is to %s", sp.redirText(r), h)
			}
		}
	}
	s.text = strings.Join(words, " ")
	if w := sp.writeRedirect(st.Redirs); w != "" {
		why("it writes to a file through a redirection (%s)", w)
	}
	if r := sp.readRedirect(st.Redirs); r != "" {
		why("it reads a file through a redirection (%s), which an allow pattern's text cannot confine", r)
	}
	if st.Cmd == nil && s.text == "" {
		return s, false
	}
	return s, true
}

// literals are the words' values as near as the text tells them: quotes
// removed, expansions left as written ("echo $v" for "echo $v"), which is
// what a deny pattern should see of a command held in a word.
func (sp *splitter) literals(ws []*syntax.Word) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		var b strings.Builder
		for _, p := range w.Parts {
			sp.approxPart(&b, p)
		}
		out = append(out, b.String())
	}
	return out
}

func (sp *splitter) approxPart(b *strings.Builder, p syntax.WordPart) {
	switch p := p.(type) {
	case *syntax.Lit:
		b.WriteString(unescape(p.Value, ""))
	case *syntax.SglQuoted:
		b.WriteString(p.Value)
	case *syntax.DblQuoted:
		for _, q := range p.Parts {
			if l, ok := q.(*syntax.Lit); ok {
				b.WriteString(unescape(l.Value, "$`\"\\\n"))
			} else {
				sp.approxPart(b, q)
			}
		}
	default:
		b.WriteString(sp.text(p))
	}
}

// evaluating says why a builtin called with these arguments may evaluate
// one of them as code, arithmetic or a variable name ("" when it cannot).
func evaluating(name string, args []*syntax.Word) string {
	if len(args) == 0 {
		return ""
	}
	args = args[1:]
	switch {
	case declaring[name]:
		for _, w := range args {
			t, ok := literal(w)
			if !ok {
				return name + " parses its arguments as assignments, and " + printWordKind(w) + " is not a literal"
			}
			if r := declWordHazard(t); r != "" {
				return name + " " + t + ": " + r
			}
		}
	case name == "printf":
		// printf -v NAME assigns, and NAME may hold a subscript. Options
		// end at the first word that is not one; a word that is not a
		// literal may expand to -v.
		for _, w := range args {
			t, ok := literal(w)
			switch {
			case !ok:
				return "printf -v assigns to a name, and an argument that is not a literal may be -v"
			case strings.HasPrefix(t, "-v"):
				return "printf -v assigns to a name, which may hold a subscript evaluated as arithmetic"
			case t == "--" || !strings.HasPrefix(t, "-"):
				return ""
			}
		}
	case name == "test" || name == "[":
		for _, w := range args {
			t, ok := literal(w)
			switch {
			case !ok:
				return name + " may evaluate an operand that is not a literal (-v, or arithmetic)"
			case t == "-v" || t == "-R":
				return name + " " + t + " evaluates a variable name, and its subscript as arithmetic"
			}
		}
	case name == "unset" || name == "wait":
		for _, w := range args {
			t, ok := literal(w)
			switch {
			case !ok:
				return name + " may evaluate an argument that is not a literal as a variable name"
			case strings.ContainsRune(t, '['):
				return name + " " + t + " evaluates the subscript as arithmetic"
			case name == "wait" && strings.HasPrefix(t, "-") && strings.ContainsRune(t, 'p'):
				return "wait -p assigns to a variable name"
			}
		}
	}
	return ""
}

func printWordKind(w *syntax.Word) string {
	if len(w.Parts) == 1 {
		if _, ok := w.Parts[0].(*syntax.ParamExp); ok {
			return "a variable"
		}
	}
	return "an argument"
}

// declWordHazard says why a literal argument of a declaration builtin is
// not inert: an option that makes values arithmetic (-i) or names aliases
// (-n), a subscript, or a compound array value.
func declWordHazard(t string) string {
	if strings.HasPrefix(t, "-") || strings.HasPrefix(t, "+") {
		if strings.ContainsAny(t, "in") {
			return "-i evaluates values as arithmetic and -n makes a name refer to another"
		}
		return ""
	}
	if strings.ContainsAny(t, "[(") {
		return "a subscript or a compound array value is evaluated"
	}
	if name, _, _ := strings.Cut(t, "="); codeVars[name] {
		return "it sets a variable whose value bash runs or expands as a prompt"
	}
	return ""
}

// declHazard is declWordHazard for a declaration's parsed argument.
func declHazard(a *syntax.Assign) string {
	if a.Naked && a.Name == nil {
		t, ok := literal(a.Value)
		if !ok {
			return "the argument is not a literal, and is parsed as an assignment"
		}
		return declWordHazard(t)
	}
	if a.Naked {
		return ""
	}
	return assignHazard(a)
}

// codeVars are variables whose value bash (or a bash it starts) runs or
// prompt-expands: PS4 at every traced command, BASH_ENV and ENV when a
// shell starts, SHELLOPTS and BASHOPTS turn on options (xtrace) in every
// child shell, PROMPT_COMMAND and PS0-PS3 in an interactive one.
var codeVars = map[string]bool{
	"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true, "PROMPT_COMMAND": true,
	"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true,
	// Where $"..." strings are translated from: the translation is
	// expanded as if double-quoted, $(...) and all.
	"TEXTDOMAIN": true, "TEXTDOMAINDIR": true,
}

// assignHazard says why an assignment is not inert: a variable whose value
// bash runs, a subscript, a compound array, or a value that is not literal
// or a plain variable.
func assignHazard(a *syntax.Assign) string {
	switch {
	case a.Name != nil && codeVars[a.Name.Value]:
		return "sets a variable whose value bash runs or expands as a prompt"
	case a.Index != nil && !numeric(a.Index):
		return "has a subscript, evaluated as arithmetic"
	case a.Array != nil:
		return "assigns an array, whose subscripts are evaluated as arithmetic"
	case a.Value != nil:
		if r := wordHazard(a.Value); r != "" {
			return "assigns " + r
		}
	}
	return ""
}

// wordHazard says why a word's expansion is not proven inert ("" when it
// is): literal text, quoted literals and plain $VAR / ${VAR} are.
func wordHazard(w *syntax.Word) string {
	for _, p := range w.Parts {
		if r := partHazard(p); r != "" {
			return r
		}
	}
	return ""
}

func partHazard(p syntax.WordPart) string {
	switch p := p.(type) {
	case *syntax.Lit, *syntax.SglQuoted, *syntax.ExtGlob, *syntax.BraceExp:
		return ""
	case *syntax.DblQuoted:
		if p.Dollar {
			// $"...": bash expands the translation it finds for the text.
			return "a translated string, whose translation bash expands"
		}
		for _, q := range p.Parts {
			if r := partHazard(q); r != "" {
				return r
			}
		}
		return ""
	case *syntax.ParamExp:
		if plainParam(p) {
			return ""
		}
		return "a parameter expansion with an operator"
	case *syntax.ArithmExp:
		if numeric(p.X) {
			return ""
		}
		return "an arithmetic expansion"
	case *syntax.CmdSubst:
		return "the output of a command"
	case *syntax.ProcSubst:
		return "a process substitution"
	}
	return fmt.Sprintf("an expansion (%T)", p)
}

// plainParam reports $NAME or ${NAME} with no operator, index or prefix.
func plainParam(p *syntax.ParamExp) bool {
	return p.Param != nil && p.Flags == nil && !p.Excl && !p.Length && !p.Width && !p.IsSet &&
		p.Split == syntax.OptUnset && p.GlobSubst == syntax.OptUnset && p.RcExpand == syntax.OptUnset &&
		p.NestedParam == nil && p.Index == nil && len(p.Modifiers) == 0 && p.Slice == nil &&
		p.Repl == nil && p.Names == 0 && p.Exp == nil
}

// numeric reports an arithmetic expression made of number literals and
// operators only: no name (bash evaluates a variable's value as
// arithmetic, recursively), no expansion. nil (an omitted part) is.
func numeric(x syntax.ArithmExpr) bool {
	switch x := x.(type) {
	case nil:
		return true
	case *syntax.Word:
		t, ok := literal(x)
		return ok && isNumber(t)
	case *syntax.BinaryArithm:
		return numeric(x.X) && numeric(x.Y)
	case *syntax.UnaryArithm:
		return numeric(x.X)
	case *syntax.ParenArithm:
		return numeric(x.X)
	}
	return false
}

// isNumber: decimal, octal or hex digits (no base#, whose digits may be
// letters bash could take for names).
func isNumber(s string) bool {
	s = strings.TrimSpace(s)
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		s = h
		if s == "" {
			return false
		}
		for _, c := range s {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	return isDigits(s)
}

// testHazard says why a [[ ]] expression may run code ("" when it cannot):
// an operand that is not a literal, an arithmetic operand that is not a
// number (a name's value is evaluated), -v or -R (a subscript is).
func testHazard(x syntax.TestExpr) string {
	switch x := x.(type) {
	case *syntax.Word:
		if _, ok := literal(x); !ok {
			return "an operand is not a literal"
		}
		return ""
	case *syntax.BinaryTest:
		switch x.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			for _, y := range []syntax.TestExpr{x.X, x.Y} {
				w, ok := y.(*syntax.Word)
				t, lit := literal(w)
				if !ok || !lit || !isInteger(t) {
					return x.Op.String() + " evaluates its operands as arithmetic, and one is not a number"
				}
			}
			return ""
		}
		if r := testHazard(x.X); r != "" {
			return r
		}
		return testHazard(x.Y)
	case *syntax.UnaryTest:
		if x.Op == syntax.TsVarSet || x.Op == syntax.TsRefVar {
			return x.Op.String() + " evaluates a variable name, and its subscript as arithmetic"
		}
		return testHazard(x.X)
	case *syntax.ParenTest:
		return testHazard(x.X)
	}
	return fmt.Sprintf("an unknown test (%T)", x)
}

func isInteger(s string) bool {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	return isDigits(s)
}

func baseName(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// writeRedirect returns the first redirection that writes to a file, as
// text; "" when none does. Writing to /dev/null and duplicating a file
// descriptor (2>&1) do not count.
func (sp *splitter) writeRedirect(rs []*syntax.Redirect) string {
	return sp.fileRedirect(rs, syntax.DplOut, syntax.RdrOut, syntax.AppOut, syntax.RdrInOut, syntax.RdrClob,
		syntax.AppClob, syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob)
}

// readRedirect returns the first redirection that reads a file, as text;
// "" when none does. A pattern such as "git status*" matches any text after
// the command, so "git status < /etc/shadow" would be allowed by it though
// the shell, not git, opens the file: a part that reads a file is never
// allowed by a pattern (it is decided by deny rules, then asks for
// approval). Reading /dev/null, duplicating a descriptor (<&0), here
// documents and here strings (text in the command itself) do not count.
func (sp *splitter) readRedirect(rs []*syntax.Redirect) string {
	return sp.fileRedirect(rs, syntax.DplIn, syntax.RdrIn)
}

// fileRedirect returns the first redirection with one of the file
// operators (but to /dev/null) or with the duplicating operator dup to
// anything but a descriptor number or "-", as text; "" when there is none.
func (sp *splitter) fileRedirect(rs []*syntax.Redirect, dup syntax.RedirOperator, file ...syntax.RedirOperator) string {
	for _, r := range rs {
		t, lit := literal(r.Word)
		switch {
		case r.Op == dup:
			if lit && (t == "-" || isDigits(t)) {
				continue
			}
		case slices.Contains(file, r.Op):
			if lit && t == "/dev/null" {
				continue
			}
		default:
			continue
		}
		return sp.redirText(r)
	}
	return ""
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// literal returns the value of a word that expands to exactly one fixed
// string: unquoted text, single quotes and double quotes without
// expansions, with their escapes removed.
func literal(w *syntax.Word) (string, bool) {
	if w == nil {
		return "", false
	}
	var b strings.Builder
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(p.Value, ""))
		case *syntax.SglQuoted:
			if p.Dollar && strings.ContainsRune(p.Value, '\\') {
				return "", false // $'...' escapes: not worth decoding here
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false // $"...": its translation, expanded
			}
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescape(l.Value, "$`\"\\\n"))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unescape removes the backslashes bash removes: before any character
// outside quotes (only), before the characters of only inside double
// quotes; a backslash-newline disappears.
func unescape(s, only string) string {
	if !strings.ContainsRune(s, '\\') {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && (only == "" || strings.IndexByte(only, s[i+1]) >= 0) {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func (sp *splitter) redirText(r *syntax.Redirect) string {
	t := r.Op.String()
	if r.N != nil {
		t = r.N.Value + t
	}
	if r.Word != nil {
		w, _ := sp.wordText(r.Word)
		t += w
	}
	return t
}

// Parsers are reused: making one costs more than most commands take to
// parse. A parser is only put back after a parse that returned (a panic
// leaves it to the collector); the trees it made do not refer to it.
var parsers = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }
