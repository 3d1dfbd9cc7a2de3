package termtext_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/internal/termtext"
)

// The expected outputs are written by hand from the package documentation.
func TestLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"git status", "git status"},
		{"", ""},
		{"rm -r -f ../ws/src # \x1b[2K\r git status \x1b[4A", `rm -r -f ../ws/src # \x1b[2K\x0d git status \x1b[4A`},
		{"a\nb\tc", `a\x0ab\x09c`},
		{"\x7f\x00", `\x7f\x00`},
		{"x\u0085y\u009b", `x\u0085y\u009b`},
		{"abc\u202edcba", `abc\u202edcba`},
		{"\u200b\u200c\u200d\u200e\u200f", `\u200b\u200c\u200d\u200e\u200f`},
		{"\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`},
		{"\u2028\u2029\ufeff", `\u2028\u2029\ufeff`},
		{"tag\U000e0041", `tag\U000e0041`},
		{"bad\xff\x9bbyte", `bad\xff\x9bbyte`},
		{"héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
		// Backslashes: doubled only where they would read as an escape.
		{`echo a\ b; printf 'a\n'; C:\dir`, `echo a\ b; printf 'a\n'; C:\dir`},
		{`\x1b`, `\\x1b`},
		{`\u202e`, `\\u202e`},
		{`\\`, `\\\`},
		{`\`, `\`},
		{`\x1`, `\x1`},
		{`\U0010ffff`, `\\U0010ffff`},
	} {
		if got := termtext.Line(c.in); got != c.want {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestBlockKeepsNewlinesAndTabsOnly(t *testing.T) {
	in := "line one\nline two\r\n\x1b[4Aline three\t\u202e\v\f\n"
	want := "line one\nline two\\x0d\n\\x1b[4Aline three\t\\u202e\\x0b\\x0c\n"
	if got := termtext.Block(in); got != want {
		t.Errorf("Block(%q) = %q, want %q", in, got, want)
	}
}

// A diff of indented code shows its tabs as tabs, on a terminal (Block)
// and on a page (Markup), never as \x09; a table cell (Line) still
// escapes them, and a text that spells \x09 still reads apart from a tab.
func TestTabsInDiffs(t *testing.T) {
	diff := "--- a/main.go\n+++ b/main.go\n@@ -1,2 +1,2 @@\n func f() {\n-\treturn 1\n+\treturn 2\n"
	if got := termtext.Block(diff); got != diff {
		t.Errorf("Block(%q) = %q: the diff is changed", diff, got)
	}
	page := "<pre class=\"diff\">" + diff + "</pre>"
	if got := string(termtext.Markup([]byte(page))); got != page {
		t.Errorf("Markup(%q) = %q: the diff is changed", page, got)
	}
	if got := termtext.Line("a\tb"); got != `a\x09b` {
		t.Errorf("Line(a<TAB>b) = %q, want a\\x09b", got)
	}
	spelled := termtext.Block(`a\x09b`)
	if spelled == termtext.Block("a\tb") || spelled != `a\\x09b` {
		t.Errorf("Block of the text a\\x09b = %q, of a<TAB>b = %q: they must differ", spelled, termtext.Block("a\tb"))
	}
	if got := termtext.Block("\\\t"); got != "\\\t" {
		t.Errorf("Block(backslash, tab) = %q: a backslash before a kept tab is not an escape", got)
	}
}

func TestJSON(t *testing.T) {
	b, err := json.Marshal(map[string]string{"cmd": "rm\x1b[2K\r\u202e\x7f\u0085\U000e0041"})
	if err != nil {
		t.Fatal(err)
	}
	got := string(termtext.JSON(append(b, '\n')))
	want := `{"cmd":"rm\u001b[2K\r\u202e\u007f\u0085\udb40\udc41"}` + "\n"
	if got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

// unescape reverses Line and Block: the proof that they are injective.
func unescape(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			i++
			continue
		}
		rest := s[i+1:]
		digits := 0
		switch {
		case strings.HasPrefix(rest, `\`):
			b.WriteByte('\\')
			i += 2
			continue
		case strings.HasPrefix(rest, "x"):
			digits = 2
		case strings.HasPrefix(rest, "u"):
			digits = 4
		case strings.HasPrefix(rest, "U"):
			digits = 8
		}
		if digits == 0 || len(rest) < 1+digits {
			b.WriteByte('\\')
			i++
			continue
		}
		v, err := strconv.ParseUint(rest[1:1+digits], 16, 32)
		if err != nil {
			b.WriteByte('\\')
			i++
			continue
		}
		if digits == 2 {
			b.WriteByte(byte(v))
		} else {
			if !termtext.Unsafe(rune(v)) {
				return "", false // never written escaped: not this package's output
			}
			b.WriteRune(rune(v))
		}
		i += 2 + digits
	}
	return b.String(), true
}

// FuzzEscape: no control, format or separator character and no byte
// outside UTF-8 survives Line or Block ('\n' and '\t' only in Block), and the
// escaping reverses exactly, so two different texts never print the same.
// JSON keeps the value and writes none of them raw either; neither does
// Markup.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"git status", "rm -rf x\x1b[2K\rgit status\x1b[4A", "a\u202eb\n", `\x1b\\u202e\`, "\xff\xfe\x9b", "\U000e0041\u2066", "\u0085\u009f\u00ad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, mode := range []struct {
			name   string
			escape func(string) string
			block  bool // '\n' and '\t' kept
		}{{"Line", termtext.Line, false}, {"Block", termtext.Block, true}} {
			out := mode.escape(s)
			if !utf8.ValidString(out) {
				t.Fatalf("%s(%q) = %q: not UTF-8", mode.name, s, out)
			}
			for _, r := range out {
				if termtext.Unsafe(r) && !((r == '\n' || r == '\t') && mode.block) {
					t.Fatalf("%s(%q) = %q: %U survived", mode.name, s, out, r)
				}
			}
			back, ok := unescape(out)
			if !ok || back != s {
				t.Fatalf("%s(%q) = %q, which reads back as %q", mode.name, s, out, back)
			}
		}
		// JSON and Markup, on any bytes: nothing unsafe survives, '\n'
		// aside (and '\t' in Markup).
		for name, out := range map[string][]byte{"JSON": termtext.JSON([]byte(s)), "Markup": termtext.Markup([]byte(s))} {
			if !utf8.Valid(out) {
				t.Fatalf("%s(%q) = %q: not UTF-8", name, s, out)
			}
			for _, r := range string(out) {
				if r != '\n' && !(r == '\t' && name == "Markup") && termtext.Unsafe(r) {
					t.Fatalf("%s(%q) = %q: %U survived", name, s, out, r)
				}
			}
		}
		if !utf8.ValidString(s) {
			return // encoding/json would have replaced the stray bytes
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		out := termtext.JSON(b)
		for _, r := range string(out) {
			if termtext.Unsafe(r) {
				t.Fatalf("JSON(%s) = %s: %U survived", b, out, r)
			}
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil || back != s {
			t.Fatalf("JSON(%s) = %s, which reads back as %q (%v)", b, out, back, err)
		}
	})
}

func TestMarkupLeavesBackslashes(t *testing.T) {
	in := "<pre>a\x1b[2K\rb \u202e</pre>\n<script>var s = \"\\u001b\\\\\";</script>"
	want := "<pre>a\\x1b[2K\\x0db \\u202e</pre>\n<script>var s = \"\\u001b\\\\\";</script>"
	if got := string(termtext.Markup([]byte(in))); got != want {
		t.Errorf("Markup(%q) = %q, want %q", in, got, want)
	}
}
