package policy

import "strings"

// nestingOver reports whether the shell text s nests more than limit
// levels deep, by a scan that runs before the parser does: the parser
// recurses once per level of (, $(, ${, $((, $[, backticks, double quotes
// and braces, and once per operator of a chain (a | b | c, a && b,
// 1+2+3), so a text of 64 KiB could cost it 128 MB of stack and a second.
//
// The scan follows quotes, comments and here-documents as bash does, so
// that a quoted or commented bracket does not count. Where it reads the
// text differently from the parser, what is parsed is still bounded by
// maxShellBytes, and the walk after the parse by maxShellTreeDepth; the
// scan only has to be right for the texts that would cost the parser
// much, and a closing bracket it cannot pair is ignored, never taken
// off a level it did not count.
func nestingOver(s string, limit int) bool { return scanNesting(s, limit, false) }

// scanNesting is nestingOver; body scans an unquoted here-document body,
// which bash expands as inside double quotes (but a '"' is a character).
func scanNesting(s string, limit int, body bool) bool {
	if limit < 0 {
		return true
	}
	type frame struct {
		kind byte // '(' paren or $(, '{' brace or ${, '"', '`', 'a' arithmetic, 'h' here-document body
		ops  int  // operators of the chain at this level
		// funcs are the NAME () of the declaration at this level whose
		// body has not begun: newlines may stand between them.
		funcs int
	}
	var stack []frame
	depth := 0 // len(stack) plus every frame's ops
	push := func(k byte) bool {
		stack = append(stack, frame{kind: k})
		depth++
		return depth > limit
	}
	if body {
		stack = append(stack, frame{kind: 'h'}) // never popped, not counted
	}
	top := func() byte {
		if len(stack) == 0 {
			return 0
		}
		return stack[len(stack)-1].kind
	}
	endFuncs := func() {
		if len(stack) > 0 {
			depth -= stack[len(stack)-1].funcs
			stack[len(stack)-1].funcs = 0
		}
	}
	pop := func(kinds string) {
		if len(stack) > 0 && strings.IndexByte(kinds, top()) >= 0 && top() != 'h' {
			f := stack[len(stack)-1]
			depth -= 1 + f.ops + f.funcs
			stack = stack[:len(stack)-1]
			if f.kind == '{' || f.kind == '(' {
				endFuncs() // a body ended: its declarations are complete
			}
		}
	}
	op := func() bool {
		if len(stack) == 0 {
			stack = append(stack, frame{kind: 0}) // the top level's chain
		}
		stack[len(stack)-1].ops++
		depth++
		return depth > limit
	}
	endChain := func() {
		if len(stack) > 0 {
			depth -= stack[len(stack)-1].ops
			stack[len(stack)-1].ops = 0
		}
	}
	var pending []hereDoc
	wordStart := true // the previous byte ends a word: '#' starts a comment
	for i := 0; i < len(s); i++ {
		c := s[i]
		k := top()
		inQuote := k == '"' || k == 'h'
		switch {
		case c == '\\':
			i++ // the next byte is literal
			wordStart = false
			continue
		case c == '$' && i+1 < len(s) && (s[i+1] == '(' || s[i+1] == '{' || s[i+1] == '['):
			i++
			kind := byte('(')
			switch {
			case s[i] == '{':
				kind = '{'
			case s[i] == '[' || i+1 < len(s) && s[i+1] == '(':
				kind = 'a'
			}
			if push(kind) {
				return true
			}
			if kind == 'a' && s[i] == '(' {
				i++ // $(( opens one arithmetic level, closed by ))
			}
			wordStart = true
			continue
		case c == '`':
			if k == '`' {
				pop("`")
			} else if push('`') {
				return true
			}
			wordStart = true
			continue
		case inQuote:
			if c == '"' && k == '"' {
				pop(`"`)
			}
			continue
		case c == '"':
			if push('"') {
				return true
			}
			continue
		case c == '$' && i+1 < len(s) && s[i+1] == '\'' && !inQuote && k != 'a':
			// $'...', whose backslashes escape (\' too): nothing in it
			// counts. (An escaped \$ never gets here: '\\' skips it.)
			for i += 2; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			wordStart = false
			continue
		case c == '\'' && !inQuote && k != 'a':
			// Single quotes: to the next quote; nothing in them counts.
			if j := strings.IndexByte(s[i+1:], '\''); j >= 0 {
				i += j + 1
			} else {
				i = len(s)
			}
			wordStart = false
			continue
		case c == '#' && wordStart && k != 'a' && k != '{':
			for i+1 < len(s) && s[i+1] != '\n' {
				i++
			}
			continue
		}
		// Code, a parameter expansion or arithmetic.
		switch c {
		case '(':
			if k != 'a' && i+1 < len(s) && s[i+1] == ')' {
				// NAME (): a function whose body may be another
				// declaration, f() g() h() { ...; }, one level each.
				i++
				if len(stack) == 0 {
					stack = append(stack, frame{kind: 0})
				}
				stack[len(stack)-1].funcs++
				depth++
				if depth > limit {
					return true
				}
				break
			}
			kind := byte('(')
			if k == 'a' {
				kind = 'a'
			} else if i+1 < len(s) && s[i+1] == '(' && wordStart {
				kind = 'a' // (( ... )): an arithmetic command
			}
			if push(kind) {
				return true
			}
			if kind == 'a' && k != 'a' {
				i++
			}
		case ')':
			if k == 'a' && i+1 < len(s) && s[i+1] == ')' && (len(stack) < 2 || stack[len(stack)-2].kind != 'a') {
				i++ // the )) that closes $(( or ((
			}
			pop("(a")
		case '{':
			if push('{') {
				return true
			}
		case '}':
			pop("{")
		case '|', '&':
			if k == 'a' {
				if op() {
					return true
				}
				break
			}
			if c == '&' && (i+1 >= len(s) || s[i+1] != '&') && (i == 0 || s[i-1] != '>' && s[i-1] != '<') {
				endChain() // a & b: two lists
				endFuncs()
				break
			}
			if i+1 < len(s) && (s[i+1] == '|' || s[i+1] == '&') {
				i++
			}
			if op() {
				return true
			}
		case ';', '\n':
			if k == 'a' {
				break // for (( ; ; )): three expressions
			}
			endChain()
			if c == ';' {
				endFuncs()
			}
			if c == '\n' {
				// The bodies of the here-documents begun on this line.
				for _, h := range pending {
					end := skipBody(s, i+1, h)
					if !h.quoted && scanNesting(s[i+1:end], limit-depth-1, true) {
						return true
					}
					i = end - 1
				}
				pending = pending[:0]
			}
		case '<':
			if k != 'a' && strings.HasPrefix(s[i:], "<<") && !strings.HasPrefix(s[i:], "<<<") {
				h, end := readDelim(s, i+2)
				pending = append(pending, h)
				i = end - 1
			}
		case '+', '-', '*', '/', '%', '^', '!', '~', '?', ':', ',', '=', '>':
			if k == 'a' && (i == 0 || strings.IndexByte("+-*/%^!~?:,=<>|&", s[i-1]) < 0) {
				if op() {
					return true
				}
			}
		}
		// Metacharacters end words; { and } do not (}#x is a word).
		wordStart = strings.IndexByte(" \t\n;&|()<>", c) >= 0
	}
	return false
}

// hereDoc is a here-document whose body starts after the current line.
type hereDoc struct {
	delim  string
	quoted bool // its body is literal
	tabs   bool // <<-: leading tabs are stripped from its lines
}

// readDelim reads the delimiter word of a here-document from s[i:] (after
// "<<"), removing quotes; end is the index after it.
func readDelim(s string, i int) (h hereDoc, end int) {
	if i < len(s) && s[i] == '-' {
		h.tabs = true
		i++
	}
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	var b strings.Builder
	for ; i < len(s) && strings.IndexByte(" \t\n;&|()<>", s[i]) < 0; i++ {
		switch c := s[i]; c {
		case '\'', '"':
			h.quoted = true
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				b.WriteString(s[i+1:])
				return h, len(s)
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case '\\':
			h.quoted = true
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	h.delim = b.String()
	return h, i
}

// skipBody returns the index after the body of h starting at s[i:]: after
// the line that is its delimiter, or len(s).
func skipBody(s string, i int, h hereDoc) int {
	for i < len(s) {
		j := strings.IndexByte(s[i:], '\n')
		line, next := s[i:], len(s)
		if j >= 0 {
			line, next = s[i:i+j], i+j+1
		}
		if h.tabs {
			line = strings.TrimLeft(line, "\t")
		}
		if line == h.delim {
			return next
		}
		i = next
	}
	return len(s)
}
