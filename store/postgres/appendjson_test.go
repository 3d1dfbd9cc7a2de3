package postgres

import (
	"bytes"
	"encoding/json"
	"testing"
)

// marshalName is appendJSONString as it was written before it used
// jsonstring: plain names copied, any other through encoding/json's
// Marshal. The reservations column must keep the same bytes.
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
// a session id: any text): plain names, the characters JSON and HTML
// escape, every byte alone and beside them, non-ASCII and invalid UTF-8.
func nameCorpus() []string {
	out := []string{"", "caller", "session", "alice", "mcp_7K2QZ", "a<b>&c", "<&>", "quote\"d", "back\\slash",
		"tab\there", "line\nbreak", "cr\r", "\b\f", "\x00", "é", "日本語", "\u2028\u2029", "a\u2028<", "\x7f",
		"\xff", "\xc3", "a\xffb<c", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\uFFFD", "<\n>&\t\"", "emoji 🙂 &"}
	for c := range 256 {
		out = append(out, string(rune(c)), string([]byte{byte(c)}), "x<"+string([]byte{byte(c)})+"&>")
	}
	return out
}

// TestAppendJSONStringBytes: appendJSONString writes, for every name,
// the bytes it wrote with encoding/json, which decode to the name.
func TestAppendJSONStringBytes(t *testing.T) {
	for _, s := range nameCorpus() {
		got, want := appendJSONString([]byte("["), s), marshalName([]byte("["), s)
		if !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(got[1:], &back); err != nil || back != withReplacement(s) {
			t.Errorf("appendJSONString(%q) = %s decodes to %q, %v; want %q", s, got, back, err, withReplacement(s))
		}
	}
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

// TestAppendJSONStringAllocates: a name that needs escaping is appended
// in place, without an allocation of its own (encoding/json's Marshal
// made one per name).
func TestAppendJSONStringAllocates(t *testing.T) {
	buf := make([]byte, 0, 256)
	for _, s := range []string{"plain", "a\tb", "é", "\xff<"} {
		if n := testing.AllocsPerRun(100, func() { buf = appendJSONString(buf[:0], s) }); n != 0 {
			t.Errorf("appendJSONString(%q): %v allocations, want 0", s, n)
		}
	}
}
