package draft2020

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// numberCheck converts strictly decoded values into the ones the library
// expects (jsonstrict.Number becomes json.Number, the same literal text) and
// finds the number literals beyond the bounds, keeping the first one by
// pointer order so that the report does not depend on map order.
type numberCheck struct {
	path    []string
	bad     string // literal of the first out-of-range number, "" if none
	badPath []string
}

// convert rewrites x in place (it is freshly decoded, owned by the caller)
// and returns it.
func (c *numberCheck) convert(x any) any {
	switch x := x.(type) {
	case map[string]any:
		for k, val := range x {
			c.path = append(c.path, k)
			x[k] = c.convert(val)
			c.path = c.path[:len(c.path)-1]
		}
		return x
	case []any:
		for i, val := range x {
			c.path = append(c.path, strconv.Itoa(i))
			x[i] = c.convert(val)
			c.path = c.path[:len(c.path)-1]
		}
		return x
	case jsonstrict.Number:
		if !numberInBounds(string(x)) && (c.bad == "" || compareTokens(c.path, c.badPath) < 0) {
			c.bad = string(x)
			c.badPath = append([]string(nil), c.path...)
		}
		return json.Number(x)
	}
	return x
}

func (c *numberCheck) pointer() string { return pointerOf(c.badPath) }

// numberInBounds reports whether a JSON number literal has at most
// maxNumberDigits digits before its exponent and an exponent within
// ±maxNumberExponent.
func numberInBounds(s string) bool {
	i, digits := 0, 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, digits = i+1, digits+1
		}
	}
	if digits > maxNumberDigits {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := strings.TrimLeft(s[i:], "0")
		if len(exp) > 6 {
			return false
		}
		n, err := strconv.Atoi("0" + exp)
		return err == nil && n <= maxNumberExponent
	}
	return true
}

func numberMessage(lit string) string {
	if len(lit) > 40 {
		lit = lit[:40] + "..."
	}
	return fmt.Sprintf("number %s is beyond what this validator evaluates (at most %d digits and an exponent within ±%d)",
		lit, maxNumberDigits, maxNumberExponent)
}

func numberDetails() map[string]any {
	return map[string]any{"reason": "number_out_of_range", "max_digits": maxNumberDigits, "max_exponent": maxNumberExponent}
}

// ---- pointers and paths ----

// escapeToken escapes one RFC 6901 reference token.
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func unescapeToken(s string) string {
	if !strings.Contains(s, "~") {
		return s
	}
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
}

func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

// tokensOf splits an RFC 6901 pointer into unescaped tokens.
func tokensOf(ptr string) []string {
	if ptr == "" {
		return nil
	}
	parts := strings.Split(ptr[1:], "/")
	for i, p := range parts {
		parts[i] = unescapeToken(p)
	}
	return parts
}

// lookup returns the value at ptr in a decoded document.
func lookup(doc any, ptr string) (any, bool) {
	cur := doc
	for _, t := range tokensOf(ptr) {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != t {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// displayPath renders an instance location in the display form of D17
// ($arguments.options[1].label, $arguments["a.b"]). Whether a token is an
// array index or a member name is read from the instance itself.
func displayPath(inst any, ptr string) string {
	var b strings.Builder
	b.WriteString("$arguments")
	cur := inst
	for _, t := range tokensOf(ptr) {
		switch c := cur.(type) {
		case []any:
			b.WriteString("[" + t + "]")
			if i, err := strconv.Atoi(t); err == nil && i >= 0 && i < len(c) {
				cur = c[i]
			} else {
				cur = nil
			}
			continue
		case map[string]any:
			cur = c[t]
		default:
			cur = nil
		}
		if isIdentifier(t) {
			b.WriteString("." + t)
		} else {
			q, _ := json.Marshal(t)
			b.WriteString("[" + string(q) + "]")
		}
	}
	return b.String()
}

// isIdentifier is inputschema's rule for names written with a dot.
func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

// comparePointers orders RFC 6901 pointers token by token; tokens that are
// both array-index shaped compare as numbers (so /a/2 < /a/10), others by
// bytes (D11), and a pointer sorts before its extensions.
func comparePointers(a, b string) int {
	if a == b {
		return 0
	}
	// Token by token without splitting: this runs inside sorts of up to
	// millions of entries.
	for a != "" && b != "" {
		var ta, tb string
		ta, a = nextToken(a)
		tb, b = nextToken(b)
		if c := compareToken(ta, tb); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

// nextToken splits the first token, unescaped, off a non-empty pointer.
func nextToken(p string) (tok, rest string) {
	p = p[1:]
	if i := strings.IndexByte(p, '/'); i >= 0 {
		tok, rest = p[:i], p[i:]
	} else {
		tok = p
	}
	return unescapeToken(tok), rest
}

func compareTokens(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareToken(a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

func compareToken(a, b string) int {
	if isIndex(a) && isIndex(b) {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
	}
	return strings.Compare(a, b)
}

func isIndex(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
