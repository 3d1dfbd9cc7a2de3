package jsonstring_test

// The references are the standard library's encoders themselves:
// encoding/json's Marshal for HTML, log/slog's JSONHandler for Slog.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/internal/jsonstring"
)

// slogString is s as slog's JSONHandler writes it as an attribute's value.
func slogString(t testing.TB, s string) string {
	var buf bytes.Buffer
	drop := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey {
			return slog.Attr{}
		}
		return a
	}
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: drop})
	r := slog.Record{}
	r.AddAttrs(slog.String("s", s))
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	out, ok := bytes.CutPrefix(buf.Bytes(), []byte(`{"s":`))
	if out, ok2 := bytes.CutSuffix(out, []byte("}\n")); ok && ok2 {
		return string(out)
	}
	t.Fatalf("slog wrote %q", buf.Bytes())
	return ""
}

func marshalString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// check compares both escapings of s, as a string and as bytes, with their
// references, after what dst already held.
func check(t testing.TB, s string) {
	t.Helper()
	for _, c := range []struct {
		e    jsonstring.Escaping
		name string
		want string
	}{{jsonstring.Slog, "Slog", slogString(t, s)}, {jsonstring.HTML, "HTML", marshalString(s)}} {
		if got := string(c.e.Append([]byte("x"), s)); got != "x"+c.want {
			t.Errorf("%s.Append(%q) = %s, want x%s", c.name, s, got, c.want)
		}
		if got := string(c.e.AppendBytes(nil, []byte(s))); got != c.want {
			t.Errorf("%s.AppendBytes(%q) = %s, want %s", c.name, s, got, c.want)
		}
	}
}

func TestEscapings(t *testing.T) {
	for _, s := range []string{
		"", "plain text", `quote " backslash \`, "\b\f\n\r\t\x00\x1f\x7f", "</script>&amp;",
		"\u2028\u2029", "é 日本 😀", "\xff\xfe bad", "a\xe2\x80", "\xed\xa0\x80 surrogate", "\U0010ffff",
	} {
		check(t, s)
	}
	for b := range 256 { // every byte alone, and between plain text
		check(t, string(rune(b)))
		check(t, "ab"+string([]byte{byte(b)})+"cd")
	}
}

// The two escapings differ only where the package doc says.
func TestEscapingsDiffer(t *testing.T) {
	for s, want := range map[string][2]string{
		"<>&":  {`"<>&"`, `"\u003c\u003e\u0026"`},
		"\b\f": {`"\u0008\u000c"`, `"\b\f"`},
	} {
		if got := [2]string{string(jsonstring.Slog.Append(nil, s)), string(jsonstring.HTML.Append(nil, s))}; got != want {
			t.Errorf("%q: Slog, HTML write %q, want %q", s, got, want)
		}
	}
}

func FuzzEscapings(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\\n\b<&>\u2028\xff", "日本\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { check(t, s) })
}

func TestAppendAllocatesNothing(t *testing.T) {
	dst := make([]byte, 0, 256)
	s := "a line of text with \"quotes\", a tab\t and <html> & é"
	b := []byte(s)
	if n := testing.AllocsPerRun(100, func() {
		jsonstring.Slog.Append(dst, s)
		jsonstring.HTML.AppendBytes(dst, b)
	}); n != 0 {
		t.Errorf("%v allocations, want none into a buffer large enough", n)
	}
}

// A string written in pieces with AppendEscaped, cut at any character's
// boundary and quoted by hand, is the string Append writes whole.
func TestAppendEscapedPieces(t *testing.T) {
	s := "a<b>\"c\\d\n\x01é\u2028\xff&z"
	for _, e := range []jsonstring.Escaping{jsonstring.Slog, jsonstring.HTML} {
		want := string(e.Append(nil, s))
		for cut := 0; cut <= len(s); cut++ {
			if !utf8.RuneStart(s[min(cut, len(s)-1)]) && cut < len(s) {
				continue
			}
			got := append([]byte{'"'}, e.AppendEscaped(nil, []byte(s[:cut]))...)
			got = append(e.AppendEscaped(got, []byte(s[cut:])), '"')
			if string(got) != want {
				t.Errorf("escaping %d, cut at %d: %s, want %s", e, cut, got, want)
			}
		}
	}
}
