// Package jsonstringtest checks, for the tests of the stores, a function
// that appends a name (a budget's scope or key, a caller, a session id) as
// a JSON string the way the stores' hand-written JSON columns do: plain
// names copied, any other escaped as encoding/json's Marshal writes it
// (jsonstring.HTML). Only _test.go files import it: it imports package
// testing, and the product binary must not depend on it.
package jsonstringtest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// CheckNames checks that appendName writes, for every name of the corpus
// (plain names, the characters JSON and HTML escape, every byte alone and
// beside them, non-ASCII and invalid UTF-8), the bytes Marshal wrote
// before it was used, which decode to the name; and that it appends a
// name needing escapes in place, without an allocation of its own
// (Marshal made one per name).
func CheckNames(t *testing.T, appendName func([]byte, string) []byte) {
	t.Helper()
	for _, s := range nameCorpus() {
		got, want := appendName([]byte("["), s), marshalName([]byte("["), s)
		if !bytes.Equal(got, want) {
			t.Errorf("append(%q) = %s, want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(got[1:], &back); err != nil || back != withReplacement(s) {
			t.Errorf("append(%q) = %s decodes to %q, %v; want %q", s, got, back, err, withReplacement(s))
		}
	}
	buf := make([]byte, 0, 256)
	for _, s := range []string{"plain", "a\tb", "é", "\xff<"} {
		if n := testing.AllocsPerRun(100, func() { buf = appendName(buf[:0], s) }); n != 0 {
			t.Errorf("append(%q): %v allocations, want 0", s, n)
		}
	}
}

// marshalName is how the stores wrote a name before they used jsonstring:
// plain names copied, any other through encoding/json's Marshal. Their
// JSON columns must keep the same bytes.
func marshalName(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// nameCorpus is what a budget's scope and key can hold (a caller's name,
// a session id: any text).
func nameCorpus() []string {
	out := []string{"", "caller", "session", "alice", "mcp_7K2QZ", "a<b>&c", "<&>", "quote\"d", "back\\slash",
		"tab\there", "line\nbreak", "cr\r", "\b\f", "\x00", "é", "日本語", "\u2028\u2029", "a\u2028<", "\x7f",
		"\xff", "\xc3", "a\xffb<c", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\uFFFD", "<\n>&\t\"", "emoji 🙂 &"}
	for c := range 256 {
		out = append(out, string(rune(c)), string([]byte{byte(c)}), "x<"+string([]byte{byte(c)})+"&>")
	}
	return out
}

// withReplacement is s with each byte of invalid UTF-8 replaced by
// U+FFFD, as JSON encoders write it.
func withReplacement(s string) string {
	var rs []rune
	for _, r := range s { // an invalid byte ranges as one RuneError
		rs = append(rs, r)
	}
	return string(rs)
}
