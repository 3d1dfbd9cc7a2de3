package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzAuditStepsJSON: the steps list is valid JSON for any attribute
// text, and reads back as the strings written (invalid UTF-8 as U+FFFD,
// as encoding/json writes it).
func FuzzAuditStepsJSON(f *testing.F) {
	for _, s := range []string{"", "plain", "quote \" backslash \\ newline \n tab \t", "\x00\x1f\x7f", "\xff\xfe bad utf-8", "\u2028\u2029", "é 日本 😀", "</script>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		steps := auditSteps{{step: s, outcome: "ok", attrs: []any{"reason", s, "n", 3, "ok", true, "wait", 2 * time.Second}, dur: 1500 * time.Microsecond}}
		b, err := steps.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var got []map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("not JSON: %v: %s", err, b)
		}
		want, _ := json.Marshal(s)
		var ws string
		if err := json.Unmarshal(want, &ws); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0]["step"] != ws || got[0]["reason"] != ws {
			t.Fatalf("read back %v, want %q", got, ws)
		}
		if got[0]["n"] != json.Number("3") || got[0]["ok"] != true || got[0]["wait"] != json.Number("2000000000") || got[0]["duration_ms"] != json.Number("1.5") {
			t.Fatalf("values read back as %v", got[0])
		}
	})
}
