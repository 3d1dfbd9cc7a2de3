package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/schematool"
)

// batchLine is one decoded output line; id stays raw to check the echo.
type batchLine struct {
	raw   map[string]json.RawMessage
	id    string // raw JSON text of id
	ok    bool
	error map[string]any
}

// runBatchBinary runs "schema validate --batch" and decodes every output
// line, checking the exact shape of each: {"id","ok"} or {"id","ok","error"}.
func runBatchBinary(t *testing.T, input string) []batchLine {
	t.Helper()
	r := runBinary(t, input, "schema", "validate", "--batch")
	r.wantCode(t, exitOK) // processed, whatever the verdicts
	if r.stderr != "" {
		t.Errorf("stderr: %s", r.stderr)
	}
	return decodeBatchOutput(t, r.stdout)
}

func decodeBatchOutput(t *testing.T, out string) []batchLine {
	t.Helper()
	var lines []batchLine
	for text := range strings.Lines(out) {
		if !strings.HasSuffix(text, "\n") {
			t.Errorf("output line without newline: %q", text)
		}
		var l batchLine
		if err := json.Unmarshal([]byte(text), &l.raw); err != nil {
			t.Fatalf("output line is not a JSON object: %v: %q", err, text)
		}
		l.id = string(l.raw["id"])
		if err := json.Unmarshal(l.raw["ok"], &l.ok); err != nil {
			t.Fatalf("ok is not a boolean: %q", text)
		}
		keys := make([]string, 0, len(l.raw))
		for k := range l.raw {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := []string{"error", "id", "ok"}
		if l.ok {
			want = []string{"id", "ok"}
		}
		if !slices.Equal(keys, want) {
			t.Errorf("output members %v, want %v: %q", keys, want, text)
		}
		if !l.ok {
			l.error = checkErrorObject(t, decodeObject(t, string(l.raw["error"])))
		}
		lines = append(lines, l)
	}
	return lines
}

// jsonString quotes text as a JSON string, for the *_text members.
func jsonString(text string) string {
	b, _ := json.Marshal(text)
	return string(b)
}

const (
	objectSchema  = `{"type":"object"}`
	minimumSchema = `{"type":"object","properties":{"n":{"type":"integer","minimum":150}},"required":["n"]}`
)

// TestBatchOrder: many lines, one answer each, in input order; the verdict
// of line i follows from the schema (valid iff n >= 150).
func TestBatchOrder(t *testing.T) {
	const count = 400
	var in strings.Builder
	for i := range count {
		fmt.Fprintf(&in, `{"id":%d,"schema":%s,"arguments":{"n":%d}}`+"\n", i, minimumSchema, i)
	}
	lines := runBatchBinary(t, in.String())
	if len(lines) != count {
		t.Fatalf("%d output lines, want %d", len(lines), count)
	}
	for i, l := range lines {
		if l.id != fmt.Sprint(i) {
			t.Fatalf("line %d: id %s, want %d", i, l.id, i)
		}
		if l.ok != (i >= 150) {
			t.Errorf("line %d: ok %v, want %v", i, l.ok, i >= 150)
		}
		if !l.ok {
			wantFields(t, l.error, map[string]string{"class": "validation", "stage": "arguments", "keyword": "minimum", "path": "$arguments.n", "pointer": "/n"})
		}
	}
}

func TestBatchIDEcho(t *testing.T) {
	input := strings.Join([]string{
		`{"id":"call-1","schema":{"type":"object"},"arguments":{}}`,
		`{"id":2.50,"schema":{"type":"object"},"arguments":{}}`,
		`{"schema":{"type":"object"},"arguments":{}}`,
		`{"id":{"run":7,"tags":["a"]},"schema":{"type":"object"},"arguments":[]}`,
		`{"id":null,"schema":{"type":"object"},"arguments":{}}`,
		`{"arguments":{},"schema":{"type":"object"},"id":"last member"}`,
	}, "\n")
	want := []struct {
		id string
		ok bool
	}{
		{`"call-1"`, true},
		{`2.50`, true}, // the literal, not a float's rendering
		{`null`, true}, // absent
		{`{"run":7,"tags":["a"]}`, false},
		{`null`, true},
		{`"last member"`, true},
	}
	lines := runBatchBinary(t, input)
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for i, w := range want {
		if lines[i].id != w.id || lines[i].ok != w.ok {
			t.Errorf("line %d: id %s ok %v, want id %s ok %v", i, lines[i].id, lines[i].ok, w.id, w.ok)
		}
	}
	// D2: array arguments fail at $arguments.
	wantFields(t, lines[3].error, map[string]string{"stage": "arguments", "class": "validation", "path": "$arguments"})
}

func TestBatchTextForms(t *testing.T) {
	input := strings.Join([]string{
		// Both documents as text: same verdict as the raw forms.
		`{"id":1,"schema_text":` + jsonString(minimumSchema) + `,"arguments_text":` + jsonString(`{"n":200}`) + `}`,
		`{"id":2,"schema_text":` + jsonString(minimumSchema) + `,"arguments_text":` + jsonString(`{"n":2}`) + `}`,
		// D3: arguments that are not valid JSON, a duplicate member.
		`{"id":3,"schema":{"type":"object"},"arguments_text":` + jsonString(`{"a":1,"a":2}`) + `}`,
		// D3: a schema text with a duplicate member fails at stage schema.
		`{"id":4,"schema_text":` + jsonString(`{"type":"object","type":"object"}`) + `,"arguments":{}}`,
		// Trailing data in an argument text.
		`{"id":5,"schema":{"type":"object"},"arguments_text":` + jsonString(`{} {}`) + `}`,
		// A lone surrogate escape inside the text (D3).
		`{"id":6,"schema":{"type":"object"},"arguments_text":` + jsonString(`{"a":"\ud800"}`) + `}`,
		// A text member that is not a string.
		`{"id":7,"schema":{"type":"object"},"arguments_text":{}}`,
	}, "\n")
	lines := runBatchBinary(t, input)
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7", len(lines))
	}
	if !lines[0].ok {
		t.Errorf("line 1: %v, want ok", lines[0].error)
	}
	wantFields(t, lines[1].error, map[string]string{"stage": "arguments", "keyword": "minimum", "pointer": "/n"})
	for i, stage := range map[int]string{2: "arguments", 3: "schema", 4: "arguments", 5: "arguments", 6: "input"} {
		if lines[i].ok {
			t.Errorf("line %d: ok, want stage %s error", i+1, stage)
			continue
		}
		wantFields(t, lines[i].error, map[string]string{"class": "validation", "stage": stage})
	}
}

// TestBatchRawBytes: schema and arguments reach the validator byte for
// byte, so the validator's strictness (D3, D13) shows through the envelope.
func TestBatchRawBytes(t *testing.T) {
	input := strings.Join([]string{
		// D13: 0.99999999999999999999 is below 1; a float64 would round it to 1.
		`{"id":1,"schema":{"type":"object","properties":{"x":{"type":"number","minimum":1}}},"arguments":{"x":0.99999999999999999999}}`,
		// D3: a duplicate member inside the raw arguments.
		`{"id":2,"schema":{"type":"object"},"arguments":{"a":1,"a":2}}`,
		// D3: a lone surrogate inside the raw arguments.
		`{"id":3,"schema":{"type":"object"},"arguments":{"a":"\ud800"}}`,
		// D3: invalid UTF-8 inside the raw arguments.
		`{"id":4,"schema":{"type":"object"},"arguments":{"a":"` + "\xff" + `"}}`,
		// D3: a duplicate member inside the raw schema.
		`{"id":5,"schema":{"type":"object","properties":{},"properties":{}},"arguments":{}}`,
		// D4: a null schema is a missing schema.
		`{"id":6,"schema":null,"arguments":{}}`,
	}, "\n")
	lines := runBatchBinary(t, input)
	want := []map[string]string{
		{"class": "validation", "stage": "arguments", "keyword": "minimum", "pointer": "/x"},
		{"class": "validation", "stage": "arguments"},
		{"class": "validation", "stage": "arguments"},
		{"class": "validation", "stage": "arguments"},
		{"class": "validation", "stage": "schema"},
		{"class": "unsupported_capability", "stage": "schema"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for i, w := range want {
		if lines[i].ok {
			t.Errorf("line %d: ok, want %v", i+1, w)
			continue
		}
		wantFields(t, lines[i].error, w)
	}
}

func TestBatchInputErrors(t *testing.T) {
	cases := []struct {
		line string
		id   string // echoed id, null when the envelope cannot give one
	}{
		{`[1,2]`, `null`},
		{`"a string"`, `null`},
		{`not json at all`, `null`},
		{`{"id":1,"schema":{"type":"object"}`, `null`}, // cut short
		{`{"id":1,"schema":{"type":"object"},"schema_text":"{}","arguments":{}}`, `1`},
		{`{"id":2,"arguments":{}}`, `2`},
		{`{"id":3,"schema":{"type":"object"}}`, `3`},
		{`{"id":4,"schema":{"type":"object"},"arguments":{},"arguments_text":"{}"}`, `4`},
		{`{"id":5,"schema":{"type":"object"},"arguments":{},"arguments":{}}`, `5`},
		{`{"id":6,"schema":{"type":"object"},"schema":{"type":"object"},"arguments":{}}`, `6`},
		{`{"id":7,"id":8,"schema":{"type":"object"},"arguments":{}}`, `null`}, // which id?
		{`{"id":9,"schema":{"type":"object"},"arguments":{},"argument":{}}`, `9`},
		{`{"id":10,"schema":{"type":"object"},"arguments":{}} {}`, `null`}, // trailing data
	}
	var in strings.Builder
	for _, c := range cases {
		in.WriteString(c.line + "\n")
	}
	lines := runBatchBinary(t, in.String())
	if len(lines) != len(cases) {
		t.Fatalf("%d lines, want %d", len(lines), len(cases))
	}
	for i, c := range cases {
		l := lines[i]
		if l.ok {
			t.Errorf("%s: ok, want an input error", c.line)
			continue
		}
		if l.id != c.id {
			t.Errorf("%s: id %s, want %s", c.line, l.id, c.id)
		}
		wantFields(t, l.error, map[string]string{"class": "validation", "stage": "input"})
	}
}

// TestBatchBlankLinesSkipped: blank lines get no output line (documented in
// the help), other lines keep their order; CRLF endings are fine.
func TestBatchBlankLinesSkipped(t *testing.T) {
	input := "\n" + `{"id":1,"schema":{"type":"object"},"arguments":{}}` + "\r\n   \n\t\n" +
		`{"id":2,"schema":{"type":"object"},"arguments":[]}` + "\n\n" +
		`{"id":3,"schema":{"type":"object"},"arguments":{}}` // no final newline
	lines := runBatchBinary(t, input)
	var ids []string
	for _, l := range lines {
		ids = append(ids, l.id)
	}
	if !slices.Equal(ids, []string{"1", "2", "3"}) {
		t.Errorf("ids %v, want [1 2 3]", ids)
	}
	if len(lines) == 3 && (!lines[0].ok || lines[1].ok || !lines[2].ok) {
		t.Errorf("verdicts %v %v %v, want true false true", lines[0].ok, lines[1].ok, lines[2].ok)
	}
	if got := runBatchBinary(t, ""); len(got) != 0 {
		t.Errorf("empty input gave %d lines", len(got))
	}
}

// TestBatchLongLine: a line over the bound is an input error, and the run
// goes on with the next line.
func TestBatchLongLine(t *testing.T) {
	long := `{"id":1,"schema":{"type":"object"},"arguments_text":"` + strings.Repeat("x", schematool.MaxBatchLine) + `"}`
	input := long + "\n" + `{"id":2,"schema":{"type":"object"},"arguments":{}}` + "\n"
	lines := runBatchBinary(t, input)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	if lines[0].ok || lines[0].id != "null" {
		t.Errorf("long line: ok %v id %s, want an input error with id null", lines[0].ok, lines[0].id)
	} else {
		wantFields(t, lines[0].error, map[string]string{"class": "validation", "stage": "input"})
	}
	if !lines[1].ok || lines[1].id != "2" {
		t.Errorf("line after the long one: ok %v id %s", lines[1].ok, lines[1].id)
	}
}

// countingCompile is inputschema.Compile counting its calls.
func countingCompile(n *int) func([]byte) (*inputschema.Schema, error) {
	return func(data []byte) (*inputschema.Schema, error) {
		*n++
		return inputschema.Compile(data, nil)
	}
}

// TestBatchCompilesEachSchemaOnce runs the batch in-process with a counting
// compile: identical texts, failures included, are compiled once.
func TestBatchCompilesEachSchemaOnce(t *testing.T) {
	var in strings.Builder
	for i := range 50 {
		fmt.Fprintf(&in, `{"id":%d,"schema":%s,"arguments":{"n":%d}}`+"\n", i, minimumSchema, i*10)
		fmt.Fprintf(&in, `{"id":"t%d","schema_text":%s,"arguments":{}}`+"\n", i, jsonString(objectSchema)) // same text as raw below
		fmt.Fprintf(&in, `{"id":"r%d","schema":%s,"arguments":{}}`+"\n", i, objectSchema)
		fmt.Fprintf(&in, `{"id":"bad%d","schema":{"type":"object","enum":[1]},"arguments":{}}`+"\n", i)
	}
	compiles := 0
	cache := schematool.NewCache(nil, countingCompile(&compiles))
	var out bytes.Buffer
	if err := schematool.RunBatch(strings.NewReader(in.String()), &out, cache); err != nil {
		t.Fatal(err)
	}
	if compiles != 3 {
		t.Errorf("%d compilations for 3 distinct schema texts", compiles)
	}
	lines := decodeBatchOutput(t, out.String())
	if len(lines) != 200 {
		t.Fatalf("%d lines, want 200", len(lines))
	}
	// The cached failure is reported on every line that uses it.
	for i := 3; i < len(lines); i += 4 {
		if lines[i].ok {
			t.Fatalf("line %d: ok for a schema with enum", i)
		}
		wantFields(t, lines[i].error, map[string]string{"class": "unsupported_capability", "stage": "schema", "keyword": "enum"})
	}
}

// With --config, schema validate checks arguments under the configuration's
// limits, as its gateway does; without it, under the defaults.
func TestValidateUnderConfiguredLimits(t *testing.T) {
	cfg := writeFile(t, "backplane.yaml", "limits: {max_argument_bytes: 16}\n")
	args := `{"text":"0123456789abcdef"}` // 27 bytes
	line := `{"id":1,"schema":{"type":"object"},"arguments":` + args + "}\n"

	if got := runBatchBinary(t, line); len(got) != 1 || !got[0].ok {
		t.Fatalf("default limits: %+v", got)
	}
	r := runBinary(t, line, "schema", "validate", "--batch", "--config", cfg)
	r.wantCode(t, exitOK)
	got := decodeBatchOutput(t, r.stdout)
	if len(got) != 1 || got[0].ok {
		t.Fatalf("max_argument_bytes 16: %+v", got)
	}
	wantFields(t, got[0].error, map[string]string{"class": "validation", "stage": "arguments"})

	schema := writeFile(t, "schema.json", `{"type":"object"}`)
	runBinary(t, args, "schema", "validate", "--schema", schema, "--args", "-").wantCode(t, exitOK)
	runBinary(t, args, "schema", "validate", "--schema", schema, "--args", "-", "--config", cfg).wantCode(t, exitNegative)
	runBinary(t, args, "schema", "validate", "--schema", schema, "--args", "-", "--config", cfg+".missing").wantUsageError(t)
}
