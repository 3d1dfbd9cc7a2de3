package draft2020

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const (
	draft07 = "http://json-schema.org/draft-07/schema#"
	draft4  = "http://json-schema.org/draft-04/schema#"
	draft6  = "http://json-schema.org/draft-06/schema#"
	d2019   = "https://json-schema.org/draft/2019-09/schema"
	d2020   = "https://json-schema.org/draft/2020-12/schema"
)

// withSchema adds "$schema": uri to a schema object given as JSON text.
func withSchema(schema, uri string) string {
	if uri == "" {
		return schema
	}
	return `{"$schema":` + quote(uri) + `,` + strings.TrimPrefix(schema, "{")
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// compileRecorded compiles and fails the test if the loader was asked for
// anything.
func compileRecorded(t *testing.T, schema string, opts *Options) *Validator {
	t.Helper()
	rec := &recorder{}
	v, err := compile([]byte(schema), opts, rec.seen)
	if err != nil {
		t.Fatalf("Compile(%s): %v", schema, err)
	}
	if urls := rec.all(); len(urls) != 0 {
		t.Fatalf("Compile(%s) asked the loader for %v", schema, urls)
	}
	return v
}

func errorList(t *testing.T, err error) []*inputschema.Error {
	t.Helper()
	var l *inputschema.ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("error %T %v is not an *inputschema.ErrorList", err, err)
	}
	return l.Errors
}

func schemaError(t *testing.T, err error) *inputschema.Error {
	t.Helper()
	var e *inputschema.Error
	if err == nil || !errors.As(err, &e) {
		t.Fatalf("error %T %v: want *inputschema.Error", err, err)
	}
	if e.Stage != inputschema.StageSchema {
		t.Errorf("error %v: stage %q, want schema", e, e.Stage)
	}
	return e
}

// want describes one expected violation.
type want struct {
	pointer, schemaPointer, keyword string
}

type mcpCase struct {
	name    string
	schema  string // without $schema; the dialect is added per run
	dialect []string
	valid   []string
	invalid map[string][]want
}

// Schemas in the style MCP servers publish, each outside the subset.
var mcpCases = []mcpCase{
	{
		name:   "enum",
		schema: `{"type":"object","properties":{"mode":{"type":"string","enum":["fast","slow"]}},"required":["mode"]}`,
		valid:  []string{`{"mode":"fast"}`, `{"mode":"slow","other":1}`},
		invalid: map[string][]want{
			`{"mode":"medium"}`: {{"/mode", "/properties/mode/enum", "enum"}},
			`{"mode":5}`:        {{"/mode", "/properties/mode/type", "type"}},
			`{}`:                {{"", "/required", "required"}},
		},
	},
	{
		name:   "const",
		schema: `{"properties":{"kind":{"const":"point"},"n":{"const":1}}}`,
		valid:  []string{`{"kind":"point"}`, `{"n":1.0}`, `{"n":1e0}`, `{}`},
		invalid: map[string][]want{
			`{"kind":"line"}`:          {{"/kind", "/properties/kind/const", "const"}},
			`{"n":1.0000000000000001}`: {{"/n", "/properties/n/const", "const"}},
		},
	},
	{
		name:   "pattern",
		schema: `{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+-[0-9]+$"}},"additionalProperties":false}`,
		valid:  []string{`{"id":"abc-12"}`, `{}`},
		invalid: map[string][]want{
			`{"id":"ABC-12"}`:        {{"/id", "/properties/id/pattern", "pattern"}},
			`{"id":"abc-12","x":""}`: {{"/x", "/additionalProperties", "additionalProperties"}},
		},
	},
	{
		name:   "minLength counts code points",
		schema: `{"type":"object","properties":{"name":{"type":"string","minLength":3,"maxLength":5}}}`,
		valid:  []string{`{"name":"日本語"}`, `{"name":"abcde"}`},
		invalid: map[string][]want{
			`{"name":"日本"}`:     {{"/name", "/properties/name/minLength", "minLength"}},
			`{"name":"abcdef"}`: {{"/name", "/properties/name/maxLength", "maxLength"}},
		},
	},
	{
		name:    "$defs and a local $ref",
		schema:  `{"type":"object","$defs":{"pos":{"type":"integer","minimum":1}},"properties":{"n":{"$ref":"#/$defs/pos"},"list":{"type":"array","items":{"$ref":"#/$defs/pos"}}}}`,
		dialect: []string{"", d2020, d2019},
		valid:   []string{`{"n":1}`, `{"list":[1,2,3]}`},
		invalid: map[string][]want{
			`{"n":0}`:                {{"/n", "/$defs/pos/minimum", "minimum"}},
			`{"list":[1,"2",0.5,0]}`: {{"/list/1", "/$defs/pos/type", "type"}, {"/list/2", "/$defs/pos/type", "type"}, {"/list/3", "/$defs/pos/minimum", "minimum"}},
		},
	},
	{
		name:    "definitions and a local $ref",
		schema:  `{"type":"object","definitions":{"pos":{"type":"integer","minimum":1}},"properties":{"n":{"$ref":"#/definitions/pos"}}}`,
		dialect: []string{"", d2020, draft07, draft6, draft4},
		valid:   []string{`{"n":1}`},
		invalid: map[string][]want{`{"n":0}`: {{"/n", "/definitions/pos/minimum", "minimum"}}},
	},
	{
		name:   "anyOf",
		schema: `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"integer","minimum":0}]}}}`,
		valid:  []string{`{"v":"x"}`, `{"v":3}`, `{}`},
		invalid: map[string][]want{
			`{"v":1.5}`: {{"/v", "/properties/v/anyOf", "anyOf"}},
			`{"v":-1}`:  {{"/v", "/properties/v/anyOf", "anyOf"}},
		},
	},
	{
		name:   "format uri is an annotation",
		schema: `{"type":"object","properties":{"u":{"type":"string","format":"uri"}}}`,
		valid:  []string{`{"u":"https://example.com/"}`, `{"u":"not a uri :: at all"}`, `{"u":""}`},
		invalid: map[string][]want{
			`{"u":5}`: {{"/u", "/properties/u/type", "type"}},
		},
	},
	{
		name: "a filesystem-style tool",
		schema: `{"type":"object","properties":{"path":{"type":"string"},"tail":{"type":"number","description":"last N lines"},` +
			`"edits":{"type":"array","items":{"type":"object","properties":{"oldText":{"type":"string"},"newText":{"type":"string"}},` +
			`"required":["oldText","newText"],"additionalProperties":false}}},"required":["path"],"additionalProperties":false}`,
		// Inside the subset but for the $schema every MCP reference server
		// declares (issue 5).
		dialect: []string{draft07, d2020},
		valid:   []string{`{"path":"/tmp/a"}`, `{"path":"a","tail":2.5,"edits":[{"oldText":"a","newText":"b"}]}`},
		invalid: map[string][]want{
			`{"path":"a","edits":[{"oldText":"a"},{"oldText":"a","newText":"b","x":1}],"q":0}`: {
				{"/edits/0", "/properties/edits/items/required", "required"},
				{"/edits/1/x", "/properties/edits/items/additionalProperties", "additionalProperties"},
				{"/q", "/additionalProperties", "additionalProperties"},
			},
		},
	},
}

func TestMCPStyleSchemas(t *testing.T) {
	for _, c := range mcpCases {
		dialects := c.dialect
		if dialects == nil {
			dialects = []string{"", draft07, d2020}
		}
		for _, d := range dialects {
			schema := withSchema(c.schema, d)
			name := c.name + "/" + d
			// The point of this boundary: the subset refuses these schemas.
			if _, err := inputschema.Compile([]byte(schema), nil); err == nil {
				t.Errorf("%s: the subset accepts %s; pick a schema outside it", name, schema)
			}
			v := compileRecorded(t, schema, nil)
			for _, a := range c.valid {
				if err := v.ValidateJSONAll([]byte(a)); err != nil {
					t.Errorf("%s: %s: %v, want valid", name, a, err)
				}
			}
			for a, ws := range c.invalid {
				err := v.ValidateJSONAll([]byte(a))
				if err == nil {
					t.Errorf("%s: %s: valid, want %v", name, a, ws)
					continue
				}
				errs := errorList(t, err)
				var got []want
				for _, e := range errs {
					got = append(got, want{e.Pointer, e.SchemaPointer, e.Keyword})
					if e.Class != inputschema.ClassValidation || e.Stage != inputschema.StageArguments {
						t.Errorf("%s: %s: %v: class %s stage %s", name, a, e, e.Class, e.Stage)
					}
				}
				if !reflect.DeepEqual(got, ws) {
					t.Errorf("%s: %s:\n got  %v\n want %v\n (%v)", name, a, got, ws, err)
				}
			}
		}
	}
}

func TestErrorContent(t *testing.T) {
	v := compileRecorded(t, `{"type":"object","$defs":{"pos":{"type":"integer","minimum":1}},
		"properties":{"a":{"type":"array","items":{"type":"object","properties":{"b.c":{"$ref":"#/$defs/pos"}}}},
		"v":{"oneOf":[{"type":"string"},{"type":"integer"}]},"w":{"oneOf":[{"type":"number"},{"type":"integer"}]}},
		"required":["z","y"]}`, nil)
	errs := errorList(t, v.ValidateJSONAll([]byte(`{"a":[{"b.c":0.5e1},{"b.c":0}],"v":true,"w":1}`)))
	type row struct {
		path, pointer, schemaPointer, keyword, message string
		details                                        map[string]any
	}
	want := []row{
		{"$arguments", "", "/required", "required", `missing required property "z"`, map[string]any{"property": "z"}},
		{"$arguments", "", "/required", "required", `missing required property "y"`, map[string]any{"property": "y"}},
		{`$arguments.a[1]["b.c"]`, `/a/1/b.c`, "/$defs/pos/minimum", "minimum", "must be at least 1",
			map[string]any{"minimum": json.Number("1"), "actual": json.Number("0"), "keyword_location": "/properties/a/items/properties/b.c/$ref/minimum"}},
		{"$arguments.v", "/v", "/properties/v/oneOf", "oneOf", "must match exactly one oneOf branch, but matches none",
			map[string]any{"matches": 0, "branches": []map[string]any{
				{"branch": 0, "message": "must be a string, not boolean", "pointer": "/v", "schema_pointer": "/properties/v/oneOf/0/type", "keyword": "type"},
				{"branch": 1, "message": "must be an integer, not boolean", "pointer": "/v", "schema_pointer": "/properties/v/oneOf/1/type", "keyword": "type"},
			}}},
		{"$arguments.w", "/w", "/properties/w/oneOf", "oneOf", "must match exactly one oneOf branch, but matches more than one (branches 0 and 1)",
			map[string]any{"matched_branches": []int{0, 1}}},
	}
	var got []row
	for _, e := range errs {
		got = append(got, row{e.Path, e.Pointer, e.SchemaPointer, e.Keyword, e.Message, e.Details})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%+v\nwant:\n%+v", got, want)
	}
	// 0.5e1 is 5, an integer; the literal is kept, not rewritten.
	for _, e := range errs {
		if e.Pointer == "/a/0/b.c" {
			t.Errorf("0.5e1 reported: %v", e)
		}
	}
	// The whole error list serialises (the gateway's wire form).
	if _, err := json.Marshal(&inputschema.ErrorList{Errors: errs}); err != nil {
		t.Errorf("json.Marshal: %v", err)
	}
}

func TestErrorOrderAndCap(t *testing.T) {
	v := compileRecorded(t, `{"type":"object","properties":{"xs":{"type":"array","items":{"type":"string"}}}}`, &Options{MaxErrors: 5})
	var items []string
	for i := 0; i < 12; i++ {
		items = append(items, "0")
	}
	err := v.ValidateJSONAll([]byte(`{"xs":[` + strings.Join(items, ",") + `]}`))
	var l *inputschema.ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("%T %v", err, err)
	}
	if !l.Truncated || len(l.Errors) != 5 {
		t.Fatalf("got %d errors, truncated %v; want 5, truncated", len(l.Errors), l.Truncated)
	}
	// Index order, numerically: 0..4, not 0, 1, 10, 11, 2.
	for i, e := range l.Errors {
		if want := fmt.Sprintf("/xs/%d", i); e.Pointer != want || e.Path != fmt.Sprintf("$arguments.xs[%d]", i) {
			t.Errorf("error %d at %q (%s), want %q", i, e.Pointer, e.Path, want)
		}
	}
	// The same arguments give the same list, every time (the library walks
	// Go maps; the order must not leak).
	schema := `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"string"}},"additionalProperties":false}`
	v = compileRecorded(t, schema, nil)
	args := []byte(`{"d":1,"c":1,"b":1,"a":1,"z":1,"y":1,"x":1}`)
	first := fmt.Sprint(errorList(t, v.ValidateJSONAll(args)))
	for i := 0; i < 50; i++ {
		if again := fmt.Sprint(errorList(t, v.ValidateJSONAll(args))); again != first {
			t.Fatalf("run %d: %s, first run %s", i, again, first)
		}
	}
	var ptrs []string
	for _, e := range errorList(t, v.ValidateJSONAll(args)) {
		ptrs = append(ptrs, e.Pointer)
	}
	if want := []string{"/a", "/b", "/c", "/d", "/x", "/y", "/z"}; !reflect.DeepEqual(ptrs, want) {
		t.Errorf("pointers %v, want %v", ptrs, want)
	}
}

// Schemas that need anything outside their own document fail closed, and
// nothing is read or fetched: the loader is the only way out of the
// document, and it is asked once, for exactly the reference.
func TestExternalReferencesRefused(t *testing.T) {
	dir := t.TempDir()
	// A real file next to a file: $id, so that a loader reading files would
	// succeed; the refusal must not depend on the file being absent.
	if err := os.WriteFile(filepath.Join(dir, "y.json"), []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fileBase := "file://" + filepath.ToSlash(dir) + "/main.json"
	cases := []struct {
		name, schema, keyword, mention, url string
	}{
		{"https", `{"properties":{"a":{"$ref":"https://example.com/s.json"}}}`, "$ref", "https://example.com/s.json", "https://example.com/s.json"},
		{"relative", `{"properties":{"a":{"$ref":"other.json"}}}`, "$ref", `"other.json"`, "inline:///other.json"},
		{"relative with pointer", `{"$ref":"other.json#/$defs/x"}`, "$ref", `"other.json#/$defs/x"`, "inline:///other.json"},
		{"file", `{"$ref":"file:///etc/passwd"}`, "$ref", "file:///etc/passwd", "file:///etc/passwd"},
		{"file beside a file $id", `{"$id":` + quote(fileBase) + `,"properties":{"a":{"$ref":"y.json"}}}`, "$ref", `"y.json"`, "file://" + filepath.ToSlash(dir) + "/y.json"},
		{"remote under an https $id", `{"$id":"https://example.com/root.json","$ref":"other.json"}`, "$ref", `"other.json"`, "https://example.com/other.json"},
		{"draft-07", withSchema(`{"definitions":{"x":{"$ref":"http://example.com/x.json"}},"properties":{"a":{"$ref":"#/definitions/x"}}}`, draft07), "$ref", "http://example.com/x.json", "http://example.com/x.json"},
		{"$dynamicRef", `{"$dynamicRef":"https://example.com/d.json#node"}`, "$dynamicRef", "https://example.com/d.json", "https://example.com/d.json"},
		{"nested custom metaschema", `{"$defs":{"x":{"$id":"https://example.com/x.json","$schema":"https://example.com/meta.json"}}}`, "$schema", "https://example.com/meta.json", "https://example.com/meta.json"},
	}
	for _, c := range cases {
		rec := &recorder{}
		v, err := compile([]byte(c.schema), nil, rec.seen)
		if v != nil {
			t.Errorf("%s: compiled %s", c.name, c.schema)
			continue
		}
		e := schemaError(t, err)
		if e.Class != inputschema.ClassUnsupported || e.Keyword != c.keyword || !strings.Contains(e.Message, c.mention) {
			t.Errorf("%s: %+v: want unsupported_capability, keyword %s, message mentioning %s", c.name, e, c.keyword, c.mention)
		}
		if strings.Contains(e.Message, baseURL) {
			t.Errorf("%s: message %q shows the private base URL", c.name, e.Message)
		}
		if urls := rec.all(); !reflect.DeepEqual(urls, []string{c.url}) {
			t.Errorf("%s: the loader was asked for %v, want exactly [%s]", c.name, urls, c.url)
		}
	}
}

// The drafts' metaschemas are embedded in the library: naming one, or even
// validating against one, asks the loader for nothing.
func TestMetaschemasNeedNoLoading(t *testing.T) {
	for _, d := range []string{d2020, d2019, draft07, draft6, draft4,
		"https://json-schema.org/draft/2020-12/schema#", "http://json-schema.org/draft-07/schema"} {
		compileRecorded(t, withSchema(`{"type":"object"}`, d), nil)
	}
	for _, meta := range []string{d2020, draft07} {
		v := compileRecorded(t, `{"$ref":`+quote(meta)+`}`, nil)
		if err := v.ValidateJSONAll([]byte(`{"type":"string","minLength":1}`)); err != nil {
			t.Errorf("against %s: a valid schema as arguments: %v", meta, err)
		}
		if err := v.ValidateJSONAll([]byte(`{"type":5}`)); err == nil {
			t.Errorf("against %s: {\"type\":5} accepted", meta)
		}
	}
}

// This package's dependencies hold no network client: the library cannot
// fetch even if asked to.
func TestNoNetworkPackagesLinked(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot list dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "net", "net/http", "crypto/tls", "os/exec":
			t.Errorf("package draft2020 links %s", dep)
		}
	}
}

func TestUnknownSchemaDialect(t *testing.T) {
	for _, s := range []string{
		"https://example.com/my-meta.json",
		"https://json-schema.org/schema", // "the latest": not a fixed draft
		"http://json-schema.org/draft-03/schema#",
		"https://json-schema.org/draft/2020-12/schema#/frag",
		"https://json-schema.org/draft/2021-01/schema",
		"",
	} {
		rec := &recorder{}
		_, err := compile([]byte(`{"$schema":`+quote(s)+`,"type":"object"}`), nil, rec.seen)
		e := schemaError(t, err)
		if e.Class != inputschema.ClassUnsupported || e.Keyword != "$schema" || e.SchemaPointer != "/$schema" || !strings.Contains(e.Message, quote(s)) {
			t.Errorf("$schema %q: %+v, want unsupported_capability at /$schema naming it", s, e)
		}
		if urls := rec.all(); len(urls) != 0 {
			t.Errorf("$schema %q: the loader was asked for %v", s, urls)
		}
	}
	// Not a string: the metaschema refuses it, and so fails closed.
	e := schemaError(t, func() error { _, err := Compile([]byte(`{"$schema":5}`), nil); return err }())
	if e.Class != inputschema.ClassUnsupported {
		t.Errorf("$schema 5: %+v", e)
	}
}

func TestOtherCompileFailuresFailClosed(t *testing.T) {
	cases := []struct {
		name, schema, keyword, pointer string
	}{
		// Valid ECMA-262, not compilable by Go's regexp: declined, never
		// skipped.
		{"lookbehind", `{"properties":{"x":{"type":"string","pattern":"(?<=a)b"}}}`, "pattern", "/properties/x/pattern"},
		{"pattern in patternProperties", `{"patternProperties":{"(?!x)":{}}}`, "patternProperties", "/patternProperties/(?!x)"},
		{"missing local pointer", `{"properties":{"x":{"$ref":"#/$defs/missing"}}}`, "$ref", ""},
		{"missing anchor", `{"properties":{"x":{"$ref":"#nowhere"}}}`, "$ref", ""},
		{"not valid against the metaschema", `{"properties":{"x":{"minLength":"three"}}}`, "minLength", "/properties/x/minLength"},
		{"required not a list", withSchema(`{"required":"a"}`, draft07), "required", "/required"},
	}
	for _, c := range cases {
		rec := &recorder{}
		v, err := compile([]byte(c.schema), nil, rec.seen)
		if v != nil {
			t.Errorf("%s: compiled", c.name)
			continue
		}
		e := schemaError(t, err)
		if e.Class != inputschema.ClassUnsupported || e.Keyword != c.keyword || (c.pointer != "" && e.SchemaPointer != c.pointer) {
			t.Errorf("%s: %+v, want unsupported_capability keyword %q at %q", c.name, e, c.keyword, c.pointer)
		}
		if strings.Contains(e.Message, baseURL) {
			t.Errorf("%s: message %q shows the private base URL", c.name, e.Message)
		}
		if urls := rec.all(); len(urls) != 0 {
			t.Errorf("%s: the loader was asked for %v", c.name, urls)
		}
	}
}

func TestSchemaRootAndStrictSchema(t *testing.T) {
	for _, s := range []string{``, `  `, `null`} {
		e := schemaError(t, func() error { _, err := Compile([]byte(s), nil); return err }())
		if e.Class != inputschema.ClassUnsupported || e.Message != "tool schema is required" {
			t.Errorf("schema %q: %+v", s, e)
		}
	}
	for _, s := range []string{`[]`, `"x"`, `5`} {
		e := schemaError(t, func() error { _, err := Compile([]byte(s), nil); return err }())
		if e.Class != inputschema.ClassValidation {
			t.Errorf("schema %s: %+v, want validation", s, e)
		}
	}
	// Boolean schemas are schemas: true accepts any object, false none.
	if err := compileRecorded(t, `true`, nil).ValidateJSONAll([]byte(`{"a":1}`)); err != nil {
		t.Errorf("true: %v", err)
	}
	if err := compileRecorded(t, `false`, nil).ValidateJSONAll([]byte(`{}`)); err == nil {
		t.Error("false accepted {}")
	}
	deep := strings.Repeat(`{"not":`, 10) + `{}` + strings.Repeat(`}`, 10)
	cases := []struct {
		schema string
		opts   *Options
		reason string
		offset int
	}{
		{`{"type":"object","type":"string"}`, nil, "duplicate_name", 17},
		{`{"properties":{"\u0061":{},"a":{}}}`, nil, "duplicate_name", 27},
		{"{\"description\":\"\xff\"}", nil, "invalid_utf8", 16},
		{`{"description":"\udc00"}`, nil, "lone_surrogate", 16},
		{`{} {}`, nil, "trailing_data", 3},
		{deep, &Options{MaxDepth: 5}, "too_deep", 35},
		{`{"description":"` + strings.Repeat("x", 100) + `"}`, &Options{MaxSchemaBytes: 64}, "too_large", 64},
	}
	for _, c := range cases {
		e := schemaError(t, func() error { _, err := Compile([]byte(c.schema), c.opts); return err }())
		if e.Class != inputschema.ClassValidation || e.Details["reason"] != c.reason || e.Details["offset"] != c.offset ||
			!strings.HasPrefix(e.Message, "the schema is not valid JSON: ") {
			t.Errorf("schema %.40q: %+v, want validation %s at offset %d", c.schema, e, c.reason, c.offset)
		}
	}
	// Within the limits, the same deep schema compiles.
	compileRecorded(t, deep, nil)
}

func TestStrictArguments(t *testing.T) {
	v := compileRecorded(t, `{"type":"object","properties":{"a":{"type":"integer"}}}`, &Options{MaxDepth: 4, MaxArgumentBytes: 64})
	cases := []struct {
		args, reason string
		offset       int
	}{
		{`{"a":1,"a":"x"}`, "duplicate_name", 7},
		{`{"a":1,"\u0061":1}`, "duplicate_name", 7},
		{"{\"b\":\"\xc3\"}", "invalid_utf8", 6},
		{`{"b":"\ud800"}`, "lone_surrogate", 6},
		{`{"a":1}x`, "trailing_data", 7},
		{`{"b":[[[[1]]]]}`, "too_deep", 8},
		{`{"b":"` + strings.Repeat("x", 80) + `"}`, "too_large", 64},
		{`{"a":01}`, "syntax", 6},
	}
	for _, c := range cases {
		errs := errorList(t, v.ValidateJSONAll([]byte(c.args)))
		e := errs[0]
		if len(errs) != 1 || e.Class != inputschema.ClassValidation || e.Stage != inputschema.StageArguments ||
			e.Path != "$arguments" || e.Pointer != "" || e.Details["reason"] != c.reason || e.Details["offset"] != c.offset {
			t.Errorf("%q: %+v, want one validation error at $arguments, reason %s offset %d", c.args, errs, c.reason, c.offset)
		}
	}
	// D2: the root must be an object, whatever the schema allows.
	any := compileRecorded(t, `{}`, nil)
	for _, a := range []string{`[]`, `"x"`, `1`, `null`, `true`} {
		errs := errorList(t, any.ValidateJSONAll([]byte(a)))
		e := errs[0]
		if len(errs) != 1 || e.Class != inputschema.ClassValidation || e.Path != "$arguments" || e.Keyword != "type" ||
			e.Details["type"] != "object" || e.SchemaPointer != "" {
			t.Errorf("%s: %+v", a, errs)
		}
	}
}

func TestNumbersAreExact(t *testing.T) {
	v := compileRecorded(t, `{"properties":{"n":{"type":"number","minimum":1,"maximum":1e400},"i":{"type":"integer"},
		"m":{"multipleOf":0.01},"c":{"const":12345678901234567890123}}}`, nil)
	valid := []string{`{"n":1}`, `{"n":1.00000000000000000001}`, `{"n":1e400}`, `{"i":1.0}`, `{"i":1e2}`, `{"i":-0}`,
		`{"i":123456789012345678901234567890}`, `{"m":19.99}`, `{"m":0.07}`, `{"c":12345678901234567890123}`, `{"c":1.2345678901234567890123e22}`}
	invalid := []string{`{"n":0.99999999999999999999}`, `{"n":1.0000000000000000000000001e400}`, `{"i":1.5}`, `{"i":1e-1}`,
		`{"i":1.0000000000000000001}`, `{"m":0.001}`, `{"c":12345678901234567890124}`}
	for _, a := range valid {
		if err := v.ValidateJSONAll([]byte(a)); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	for _, a := range invalid {
		if err := v.ValidateJSONAll([]byte(a)); err == nil {
			t.Errorf("%s: valid", a)
		}
	}
	errs := errorList(t, v.ValidateJSONAll([]byte(`{"n":0.99999999999999999999}`)))
	if d := errs[0].Details; d["minimum"] != json.Number("1") || d["actual"] != json.Number("0.99999999999999999999") {
		t.Errorf("details %v: want the literals", d)
	}
}

// Numbers whose exact comparison would cost without bound are declined, in
// the arguments and in the schema, quickly.
func TestNumberBounds(t *testing.T) {
	v := compileRecorded(t, `{"properties":{"xs":{"type":"array","items":{"type":"integer","minimum":0}}}}`, nil)
	ok := `{"xs":[1e1000,` + strings.Repeat("9", 1000) + `,1e-1000,-0.5e+999]}`
	if err := v.ValidateJSONAll([]byte(ok)); err == nil || len(errorList(t, err)) != 2 {
		t.Errorf("numbers within the bounds: %v, want the two violations of 1e-1000 and -0.5e+999", err)
	}
	for _, n := range []string{"1e1001", "1e-1001", "1E+999999999999", strings.Repeat("1", 1001), "0." + strings.Repeat("0", 1000) + "1"} {
		start := time.Now()
		errs := errorList(t, v.ValidateJSONAll([]byte(`{"xs":[1,2,`+n+`]}`)))
		e := errs[0]
		if len(errs) != 1 || e.Class != inputschema.ClassUnsupported || e.Stage != inputschema.StageArguments ||
			e.Pointer != "/xs/2" || e.Path != "$arguments.xs[2]" || e.Details["reason"] != "number_out_of_range" {
			t.Errorf("%.20s: %+v", n, errs)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%.20s: took %v", n, d)
		}
	}
	e := schemaError(t, func() error {
		_, err := Compile([]byte(`{"properties":{"n":{"minimum":1e999999}}}`), nil)
		return err
	}())
	if e.Class != inputschema.ClassUnsupported || e.SchemaPointer != "/properties/n/minimum" {
		t.Errorf("schema number: %+v", e)
	}
	// Many numbers within the bounds stay cheap.
	many := `{"xs":[` + strings.TrimSuffix(strings.Repeat("1e999,", 20000), ",") + `]}`
	start := time.Now()
	if err := v.ValidateJSONAll([]byte(many)); err != nil {
		t.Errorf("20000 × 1e999: %v", err)
	}
	t.Logf("20000 numbers of 1e999 validated in %v", time.Since(start))
}

// format is never asserted, in any draft and wherever it sits; the other
// keywords beside it still are.
func TestFormatIsAnnotation(t *testing.T) {
	schema := `{"type":"object","definitions":{"d":{"type":"string","format":"date-time"}},
		"properties":{"u":{"type":"string","format":"uri"},"e":{"items":{"format":"email"}},
		"r":{"$ref":"#/definitions/d"},"x":{"anyOf":[{"format":"ipv4"},{"format":"ipv6"}]},"re":{"format":"regex"},
		"n":{"type":"string","format":"uuid","maxLength":3}},"additionalProperties":{"format":"hostname"}}`
	args := `{"u":"::","e":["not an email"],"r":"yesterday","x":"999.1.1.1","re":"(","zzz":"-- not a host --"}`
	for _, d := range []string{"", d2020, d2019, draft07, draft6, draft4} {
		v := compileRecorded(t, withSchema(schema, d), nil)
		if err := v.ValidateJSONAll([]byte(args)); err != nil {
			t.Errorf("%q: %v", d, err)
		}
		errs := errorList(t, v.ValidateJSONAll([]byte(`{"n":"abcd"}`)))
		if len(errs) != 1 || errs[0].Keyword != "maxLength" {
			t.Errorf("%q: %v, want maxLength only", d, errs)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	v := compileRecorded(t, `{"type":"object","properties":{"a":{"type":"string","pattern":"^a+$"},"b":{"enum":[1,2]}},"required":["a"]}`, nil)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := v.ValidateJSONAll([]byte(`{"a":"aaa","b":2}`)); err != nil {
					t.Error(err)
					return
				}
				if errs := errorList(t, v.ValidateJSONAll([]byte(`{"a":"b","b":3}`))); len(errs) != 2 {
					t.Errorf("%v", errs)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestArgumentsAreNotModified(t *testing.T) {
	v := compileRecorded(t, `{"properties":{"a":{"default":5},"n":{"type":"number"}}}`, nil)
	args := []byte(`{"n":1.50}`)
	before := string(args)
	if err := v.ValidateJSONAll(args); err != nil {
		t.Fatal(err)
	}
	if string(args) != before {
		t.Errorf("arguments changed: %s", args)
	}
}

// Each keyword's violation is reported where D17 says: the value judged, the
// keyword in the schema document, the keyword's name.
func TestKeywordErrors(t *testing.T) {
	cases := []struct {
		dialect, schema, args string
		want                  []want
		details               map[string]any // of the first error, when set
	}{
		{"", `{"properties":{"a":{"not":{"type":"string"}}}}`, `{"a":"x"}`, []want{{"/a", "/properties/a/not", "not"}}, nil},
		{"", `{"properties":{"a":{"contains":{"type":"string"}}}}`, `{"a":[1,2]}`, []want{{"/a", "/properties/a/contains", "contains"}}, nil},
		{"", `{"properties":{"a":{"contains":{"type":"string"},"minContains":2}}}`, `{"a":[1,"x"]}`, []want{{"/a", "/properties/a/minContains", "minContains"}},
			map[string]any{"minContains": 2, "matched": []int{1}}},
		{"", `{"propertyNames":{"maxLength":2}}`, `{"abc":1,"ok":2,"defg":3}`,
			[]want{{"", "/propertyNames", "propertyNames"}, {"", "/propertyNames", "propertyNames"}}, map[string]any{"property": "abc", "reason": "must be at most 2 characters long, not 3"}},
		{"", `{"properties":{"a":{}},"unevaluatedProperties":false}`, `{"a":1,"b":2}`, []want{{"/b", "/unevaluatedProperties", "unevaluatedProperties"}},
			map[string]any{"property": "b"}},
		{"", `{"properties":{"a":{"prefixItems":[{"type":"string"}],"items":false}}}`, `{"a":["x",1]}`, []want{{"/a/1", "/properties/a/items", "items"}}, map[string]any{}},
		{"", `{"properties":{"a":{"prefixItems":[{}],"unevaluatedItems":false}}}`, `{"a":[1,2]}`, []want{{"/a/1", "/properties/a/unevaluatedItems", "unevaluatedItems"}}, nil},
		{"", `{"properties":{"a":false}}`, `{"a":1}`, []want{{"/a", "/properties/a", "properties"}}, map[string]any{"property": "a"}},
		{"", `{"dependentRequired":{"a":["b","c"]}}`, `{"a":1}`, []want{{"", "/dependentRequired/a", "dependentRequired"}, {"", "/dependentRequired/a", "dependentRequired"}},
			map[string]any{"property": "b", "required_by": "a"}},
		{"", `{"dependentSchemas":{"a":{"required":["b"]}}}`, `{"a":1}`, []want{{"", "/dependentSchemas/a/required", "required"}}, nil},
		{"", `{"if":{"required":["a"]},"then":{"required":["b"]},"else":{"required":["c"]}}`, `{"a":1}`, []want{{"", "/then/required", "required"}}, nil},
		{"", `{"if":{"required":["a"]},"then":{"required":["b"]},"else":{"required":["c"]}}`, `{}`, []want{{"", "/else/required", "required"}}, nil},
		{"", `{"properties":{"a":{"uniqueItems":true,"minItems":4}}}`, `{"a":[1,{"x":[1]},1.0]}`,
			[]want{{"/a", "/properties/a/minItems", "minItems"}, {"/a", "/properties/a/uniqueItems", "uniqueItems"}}, map[string]any{"minItems": 4, "actual": 3}},
		{"", `{"minProperties":2,"maxProperties":0}`, `{"a":1}`, []want{{"", "/maxProperties", "maxProperties"}, {"", "/minProperties", "minProperties"}}, nil},
		{"", `{"properties":{"a":{"exclusiveMinimum":0,"multipleOf":0.5}}}`, `{"a":-0.25}`,
			[]want{{"/a", "/properties/a/exclusiveMinimum", "exclusiveMinimum"}, {"/a", "/properties/a/multipleOf", "multipleOf"}},
			map[string]any{"exclusiveMinimum": json.Number("0"), "actual": json.Number("-0.25")}},
		{"", `{"properties":{"a":{"type":["string","null"]}}}`, `{"a":1}`, []want{{"/a", "/properties/a/type", "type"}},
			map[string]any{"type": []any{"string", "null"}, "actual": "number"}},
		{draft07, `{"dependencies":{"a":["b"]}}`, `{"a":1}`, []want{{"", "/dependencies/a", "dependencies"}}, map[string]any{"property": "b", "required_by": "a"}},
		{draft07, `{"properties":{"a":{"items":[{"type":"string"}],"additionalItems":false}}}`, `{"a":["x",1]}`, []want{{"/a", "/properties/a/additionalItems", "additionalItems"}}, nil},
		{draft4, `{"properties":{"a":{"minimum":1,"exclusiveMinimum":true}}}`, `{"a":1}`, []want{{"/a", "/properties/a/minimum", "minimum"}},
			map[string]any{"minimum": json.Number("1"), "actual": json.Number("1")}},
		// Through a $ref to a metaschema: the schema pointer is the $ref,
		// the library's location is in the details.
		{"", `{"properties":{"s":{"$ref":"https://json-schema.org/draft/2020-12/schema"}}}`, `{"s":{"minLength":-1}}`,
			[]want{{"/s/minLength", "/properties/s/$ref", "minimum"}},
			map[string]any{"schema_location": "https://json-schema.org/draft/2020-12/meta/validation#/$defs/nonNegativeInteger/minimum",
				"minimum": json.Number("0"), "actual": json.Number("-1"),
				"keyword_location": "/properties/s/$ref/allOf/3/$ref/properties/minLength/$ref/$ref/minimum"}},
	}
	for _, c := range cases {
		v := compileRecorded(t, withSchema(c.schema, c.dialect), nil)
		err := v.ValidateJSONAll([]byte(c.args))
		if err == nil {
			t.Errorf("%s %s: valid", c.schema, c.args)
			continue
		}
		errs := errorList(t, err)
		var got []want
		for _, e := range errs {
			got = append(got, want{e.Pointer, e.SchemaPointer, e.Keyword})
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %s:\n got  %v\n want %v\n (%v)", c.schema, c.args, got, c.want, err)
			continue
		}
		if c.details != nil && !reflect.DeepEqual(errs[0].Details, c.details) {
			t.Errorf("%s %s: details %#v, want %#v", c.schema, c.args, errs[0].Details, c.details)
		}
	}
}

// Under an opaque base URI (a urn: $id) a relative reference means nothing;
// the library, left alone, resolves it to the base document itself and so
// checks "a" against the root schema (5 would pass). It must fail closed.
func TestRelativeReferenceUnderOpaqueBase(t *testing.T) {
	for _, c := range []struct{ schema, keyword, pointer string }{
		{`{"$id":"urn:example:tool","properties":{"a":{"$ref":"other.json"}}}`, "$ref", "/properties/a/$ref"},
		{`{"properties":{"a":{"$id":"urn:example:inner","$ref":"other.json"}}}`, "$ref", "/properties/a/$ref"},
		{`{"$id":"tag:example.com,2024:tool","properties":{"a":{"$ref":"x.json#/y"}}}`, "$ref", "/properties/a/$ref"},
		{`{"$id":"mailto:a@example.com","$defs":{"x":{"$id":"inner.json"}}}`, "$id", "/$defs/x/$id"},
		{`{"$id":"urn:example:tool","$dynamicRef":"//host/x"}`, "$dynamicRef", "/$dynamicRef"},
	} {
		rec := &recorder{}
		v, err := compile([]byte(c.schema), nil, rec.seen)
		if v != nil {
			t.Errorf("%s: compiled; {\"a\":5} gives %v", c.schema, v.ValidateJSONAll([]byte(`{"a":5}`)))
			continue
		}
		e := schemaError(t, err)
		if e.Class != inputschema.ClassUnsupported || e.Keyword != c.keyword || e.SchemaPointer != c.pointer {
			t.Errorf("%s: %+v, want unsupported_capability, %s at %s", c.schema, e, c.keyword, c.pointer)
		}
		if urls := rec.all(); len(urls) != 0 {
			t.Errorf("%s: the loader was asked for %v", c.schema, urls)
		}
	}
	// Fragments and absolute URNs under a URN base are fine.
	for _, ref := range []string{"#/$defs/x", "urn:example:tool#/$defs/x", "#x"} {
		v := compileRecorded(t, `{"$id":"urn:example:tool","$defs":{"x":{"$anchor":"x","type":"string"}},"properties":{"a":{"$ref":`+quote(ref)+`}}}`, nil)
		if err := v.ValidateJSONAll([]byte(`{"a":5}`)); err == nil {
			t.Errorf("$ref %s: {\"a\":5} accepted", ref)
		}
		if err := v.ValidateJSONAll([]byte(`{"a":"s"}`)); err != nil {
			t.Errorf("$ref %s: %v", ref, err)
		}
	}
}

// A reference loop in the schema shows only when a value reaches it; it is
// the schema's fault and fails closed.
func TestReferenceLoopIsUnsupported(t *testing.T) {
	v := compileRecorded(t, `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},
		"properties":{"x":{"$ref":"#/$defs/a"},"n":{"type":"string"}}}`, nil)
	if err := v.ValidateJSONAll([]byte(`{"n":"s"}`)); err != nil {
		t.Errorf("the loop is not reached: %v", err)
	}
	errs := errorList(t, v.ValidateJSONAll([]byte(`{"x":1,"n":2}`)))
	if len(errs) != 1 || errs[0].Class != inputschema.ClassUnsupported || errs[0].Keyword != "$ref" || errs[0].Pointer != "/x" {
		t.Errorf("%+v, want one unsupported_capability at /x", errs)
	}
}

// With a cap, the list is exactly the first errors of the uncapped list,
// whatever the cap: the first ones are chosen without sorting everything,
// and repeats (the same error reached through two $refs) must not push a
// distinct error out.
func TestCapKeepsTheFirstErrors(t *testing.T) {
	var items, names, req []string
	for i := 0; i < 25; i++ {
		if i%3 == 0 {
			items = append(items, `"ok"`)
		} else if i%3 == 1 {
			items = append(items, fmt.Sprint(i))
		} else {
			items = append(items, `"x"`)
		}
		names = append(names, fmt.Sprintf(`"name-%02d":%d`, 24-i, i))
		req = append(req, fmt.Sprintf(`"r%d"`, i))
	}
	cases := []struct{ schema, args string }{
		{`{"$defs":{"s":{"type":"string","minLength":2}},"properties":{"xs":{"items":{"allOf":[{"$ref":"#/$defs/s"},{"$ref":"#/$defs/s"}]}}}}`,
			`{"xs":[` + strings.Join(items, ",") + `]}`},
		{`{"propertyNames":{"maxLength":6},"additionalProperties":{"type":"string"},"required":[` + strings.Join(req, ",") + `]}`,
			`{` + strings.Join(names, ",") + `}`},
	}
	for _, c := range cases {
		all := errorList(t, compileRecorded(t, c.schema, &Options{MaxErrors: 100000}).ValidateJSONAll([]byte(c.args)))
		if len(all) < 15 {
			t.Fatalf("%s: only %d errors", c.schema, len(all))
		}
		seen := map[string]bool{}
		for _, e := range all {
			k := e.Pointer + "\x00" + e.SchemaPointer + "\x00" + e.Keyword + "\x00" + e.Message
			if seen[k] {
				t.Errorf("repeat in the list: %v", e)
			}
			seen[k] = true
		}
		for n := 1; n <= len(all)+1; n++ {
			err := compileRecorded(t, c.schema, &Options{MaxErrors: n}).ValidateJSONAll([]byte(c.args))
			var l *inputschema.ErrorList
			if !errors.As(err, &l) {
				t.Fatalf("%T", err)
			}
			want := all[:min(n, len(all))]
			if !reflect.DeepEqual(l.Errors, want) || l.Truncated != (n < len(all)) {
				t.Errorf("%s: MaxErrors %d: %d errors (truncated %v), want the first %d of %d",
					c.schema, n, len(l.Errors), l.Truncated, len(want), len(all))
			}
		}
	}
}

// Many violations cost memory in proportion to the list, not to their
// number: building every error of 200000 violations took about 200 MB, the
// first 1000 of them must take a fraction of it.
func TestManyViolationsConvertCheaply(t *testing.T) {
	v := compileRecorded(t, `{"properties":{"xs":{"items":{"type":"string"}}}}`, nil)
	args := []byte(`{"xs":[` + strings.TrimSuffix(strings.Repeat("0,", 200000), ",") + `]}`)
	x, err := jsonstrict.Decode(args, &v.argOpts)
	if err != nil {
		t.Fatal(err)
	}
	var nc numberCheck
	x = nc.convert(x)
	verr := v.schema.Validate(x)
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		t.Fatalf("%v", verr)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out := v.convertErrors(ve, x)
	runtime.ReadMemStats(&after)
	var l *inputschema.ErrorList
	if !errors.As(out, &l) || len(l.Errors) != DefaultMaxErrors || !l.Truncated || l.Errors[999].Pointer != "/xs/999" {
		t.Fatalf("%T: want the first 1000 of 200000, truncated", out)
	}
	if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 40 {
		t.Errorf("converting 200000 violations allocated %d MB", mb)
	} else {
		t.Logf("converting 200000 violations allocated %d MB", mb)
	}
}
