package policy

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// Shell commands are parsed with mvdan.cc/sh (bash syntax) and split into
// their simple commands: syntax.Walk reaches every statement, including
// those inside &&, ||, ;, pipes, subshells, blocks, if/for/while/case,
// function bodies, $(...), backticks, <(...) and >(...), and here-documents.

const (
	// maxShellBytes bounds the command the parser is given. A longer one is
	// one subject (its whole text) that no allow matches: a deny pattern
	// still applies to it, and an approve lets a person decide.
	maxShellBytes = 64 << 10
	// maxShellParts bounds the simple commands of one command.
	maxShellParts = 1000
)

// opaque are commands that run code given to them as arguments or that
// run another command named in their arguments: an allow pattern cannot
// see what they will do, so none matches them.
var opaque = map[string]bool{
	"eval": true, "exec": true, "source": true, ".": true, "command": true, "builtin": true,
	"env": true, "xargs": true, "sudo": true, "doas": true, "su": true, "nohup": true,
	"nice": true, "ionice": true, "timeout": true, "time": true, "setsid": true, "stdbuf": true,
	"chroot": true, "unshare": true, "nsenter": true, "watch": true, "parallel": true,
	"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"fish": true, "csh": true, "tcsh": true, "busybox": true, "coproc": true, "trap": true,
}

// splitShell parses cmd into its simple commands. A command that does not
// parse is an error wrapping ErrUnparsable.
func splitShell(cmd string) (parts []subject, err error) {
	if len(cmd) > maxShellBytes {
		return []subject{{text: cmd, noAllow: fmt.Sprintf("the command is longer than %d bytes", maxShellBytes)}}, nil
	}
	if !utf8.ValidString(cmd) || strings.ContainsRune(cmd, 0) {
		return nil, fmt.Errorf("%w: it is not valid UTF-8 text", ErrUnparsable)
	}
	defer func() {
		if p := recover(); p != nil {
			parts, err = nil, fmt.Errorf("%w: %v", ErrUnparsable, p)
		}
	}()
	parser := parsers.Get().(*syntax.Parser)
	f, err := parser.Parse(strings.NewReader(cmd), "")
	parsers.Put(parser)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnparsable, err)
	}
	tooMany := false
	syntax.Walk(f, func(n syntax.Node) bool {
		if tooMany {
			return false
		}
		st, ok := n.(*syntax.Stmt)
		if !ok {
			return true
		}
		if s, ok := stmtSubject(st); ok {
			if len(parts) == maxShellParts {
				tooMany = true
				return false
			}
			parts = append(parts, s)
		}
		return true
	})
	if tooMany {
		return []subject{{text: cmd, noAllow: fmt.Sprintf("the command has more than %d simple commands", maxShellParts)}}, nil
	}
	if len(parts) == 0 {
		// Only comments or blanks: nothing runs; decided as the empty command.
		parts = []subject{{}}
	}
	return parts, nil
}

// stmtSubject describes one statement, when it is a simple command (or a
// declaration, or a bare redirection that writes).
func stmtSubject(st *syntax.Stmt) (subject, bool) {
	var s subject
	var words []string
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		for _, a := range c.Assigns {
			words = append(words, printNode(a))
		}
		for i, w := range c.Args {
			text, lit := literal(w)
			if !lit {
				text = printNode(w)
			}
			if i == 0 {
				switch {
				case !lit:
					s.noAllow = fmt.Sprintf("the command name %s is not a literal", text)
				case strings.ContainsAny(text, "*?[{"):
					s.noAllow = fmt.Sprintf("the command name %s would be expanded", text)
				case opaque[baseName(text)]:
					s.noAllow = fmt.Sprintf("%s runs code its arguments give it", text)
				}
			}
			words = append(words, text)
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
			words = append(words, printNode(a))
		}
	case *syntax.LetClause:
		words = append(words, printNode(c))
	case nil:
		// A bare redirection ("> file") truncates or creates a file.
	default:
		// A compound command: its statements are parts of their own; a
		// redirection on the whole still writes.
		if w := writeRedirect(st.Redirs); w != "" {
			return subject{text: w, noAllow: "it writes to a file through a redirection"}, true
		}
		return s, false
	}
	for _, r := range st.Redirs {
		words = append(words, redirText(r))
	}
	s.text = strings.Join(words, " ")
	if s.noAllow == "" {
		if w := writeRedirect(st.Redirs); w != "" {
			s.noAllow = fmt.Sprintf("it writes to a file through a redirection (%s)", w)
		}
	}
	if st.Cmd == nil && s.text == "" {
		return s, false
	}
	return s, true
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
func writeRedirect(rs []*syntax.Redirect) string {
	for _, r := range rs {
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrInOut, syntax.RdrClob, syntax.AppClob,
			syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob:
			if t, lit := literal(r.Word); lit && t == "/dev/null" {
				continue
			}
			return redirText(r)
		case syntax.DplOut:
			if t, lit := literal(r.Word); lit && (t == "-" || isDigits(t)) {
				continue
			}
			return redirText(r)
		}
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

func redirText(r *syntax.Redirect) string {
	t := r.Op.String()
	if r.N != nil {
		t = r.N.Value + t
	}
	if r.Word != nil {
		t += printNode(r.Word)
	}
	return t
}

// Parsers and printers are reused: making one costs more than most
// commands take to parse. A parser is only put back after a parse that
// returned (a panic leaves it to the collector).
var (
	parsers  = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }}
	printers = sync.Pool{New: func() any { return syntax.NewPrinter(syntax.Minify(true)) }}
)

func printNode(n syntax.Node) string {
	if w, ok := n.(*syntax.Word); ok {
		if lit := w.Lit(); lit != "" {
			return lit
		}
	}
	var b strings.Builder
	pr := printers.Get().(*syntax.Printer)
	err := pr.Print(&b, n)
	printers.Put(pr)
	if err != nil {
		return fmt.Sprintf("%T", n)
	}
	return strings.TrimSpace(b.String())
}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }
