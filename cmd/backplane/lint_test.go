package main

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// lintJSON is the --json report, decoded.
type lintJSON struct {
	Tools []struct {
		Index     int               `json:"index"`
		Name      *string           `json:"name"`
		OK        bool              `json:"ok"`
		Error     json.RawMessage   `json:"error"`
		Errors    []json.RawMessage `json:"errors"`
		Truncated bool              `json:"truncated"`
	} `json:"tools"`
	Summary struct {
		Total       *int           `json:"total"`
		Supported   *int           `json:"supported"`
		Unsupported *int           `json:"unsupported"`
		ByKeyword   map[string]int `json:"by_keyword"`
	} `json:"summary"`
}

// runLintJSON runs lint --json and decodes its report.
func runLintJSON(t *testing.T, stdin string, wantCode int, catalog string) lintJSON {
	t.Helper()
	r := runBinary(t, stdin, "schema", "lint", "--json", catalog)
	r.wantCode(t, wantCode)
	var report lintJSON
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&report); err != nil {
		t.Fatalf("report: %v\n%s", err, r.stdout)
	}
	if report.Summary.Total == nil || report.Summary.Supported == nil || report.Summary.Unsupported == nil || report.Summary.ByKeyword == nil {
		t.Fatalf("summary lacks a member: %s", r.stdout)
	}
	for i, tool := range report.Tools {
		if tool.Index != i {
			t.Errorf("tool %d has index %d", i, tool.Index)
		}
		if tool.OK != (tool.Error == nil) || tool.OK != (len(tool.Errors) == 0) {
			t.Errorf("tool %d: ok %v with error %s and errors %s", i, tool.OK, tool.Error, tool.Errors)
		}
		if !tool.OK && string(tool.Errors[0]) != string(tool.Error) {
			t.Errorf("tool %d: errors[0] %s is not error %s", i, tool.Errors[0], tool.Error)
		}
	}
	return report
}

// toolError decodes and shape-checks the error of tool i.
func (r lintJSON) toolError(t *testing.T, i int) map[string]any {
	t.Helper()
	if r.Tools[i].Error == nil {
		t.Fatalf("tool %d has no error", i)
	}
	return checkErrorObject(t, decodeObject(t, string(r.Tools[i].Error)))
}

func (r lintJSON) wantSummary(t *testing.T, total, supported, unsupported int, byKeyword map[string]int) {
	t.Helper()
	s := r.Summary
	if *s.Total != total || *s.Supported != supported || *s.Unsupported != unsupported {
		t.Errorf("summary total %d supported %d unsupported %d, want %d %d %d", *s.Total, *s.Supported, *s.Unsupported, total, supported, unsupported)
	}
	if !maps.Equal(s.ByKeyword, byKeyword) {
		t.Errorf("by_keyword %v, want %v", s.ByKeyword, byKeyword)
	}
	if len(r.Tools) != total {
		t.Errorf("%d tool entries, summary total %d", len(r.Tools), total)
	}
}

var builtinToolNames = []string{"read", "bash", "grep", "glob", "write", "url_fetch", "edit", "ls", "ask_user_question"}

func TestLintBuiltinTools(t *testing.T) {
	catalog := examplePath(t, "builtin-tools.json")
	report := runLintJSON(t, "", exitOK, catalog)
	report.wantSummary(t, 9, 9, 0, map[string]int{})
	var names []string
	for _, tool := range report.Tools {
		if tool.Name != nil {
			names = append(names, *tool.Name)
		}
	}
	if !slices.Equal(names, builtinToolNames) {
		t.Errorf("tools %v, want %v", names, builtinToolNames)
	}

	r := runBinary(t, "", "schema", "lint", catalog)
	r.wantCode(t, exitOK)
	for _, name := range builtinToolNames {
		if !strings.Contains(r.stdout, "ok    "+name+"\n") {
			t.Errorf("human output lacks an ok line for %s:\n%s", name, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "9 tools: 9 inside") {
		t.Errorf("human summary:\n%s", r.stdout)
	}
}

// TestBuiltinToolsExampleShape holds the example to what the README promises:
// object roots that refuse unknown argument names, and a type on every
// nested schema except the oneOf one.
func TestBuiltinToolsExampleShape(t *testing.T) {
	data, err := os.ReadFile(examplePath(t, "builtin-tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	var catalog struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(data, &catalog); err != nil {
		t.Fatal(err)
	}
	for _, tool := range catalog.Tools {
		s := tool.InputSchema
		if s["type"] != "object" || s["additionalProperties"] != false || tool.Description == "" {
			t.Errorf("%s: root type %v, additionalProperties %v, description %q", tool.Name, s["type"], s["additionalProperties"], tool.Description)
		}
		var walk func(ptr string, schema map[string]any)
		walk = func(ptr string, schema map[string]any) {
			if branches, ok := schema["oneOf"].([]any); ok {
				for _, b := range branches {
					walk(ptr+"/oneOf", b.(map[string]any))
				}
				return
			}
			if _, ok := schema["type"].(string); !ok {
				t.Errorf("%s: schema %s has no type", tool.Name, ptr)
			}
			if props, ok := schema["properties"].(map[string]any); ok {
				for name, p := range props {
					walk(ptr+"/properties/"+name, p.(map[string]any))
				}
			}
			if items, ok := schema["items"].(map[string]any); ok {
				walk(ptr+"/items", items)
			}
		}
		walk("", s)
	}
	// ask_user_question keeps the oneOf form of the seed's fixtures.
	if !strings.Contains(string(data), `"oneOf"`) {
		t.Error("the example lost its oneOf schema")
	}
}

// TestLintReferenceServers: the first error of each tool follows from D5
// and D11 (members in byte order, so a root "$schema" comes first).
func TestLintReferenceServers(t *testing.T) {
	catalog := examplePath(t, "mcp-reference-servers.json")
	report := runLintJSON(t, "", exitNegative, catalog)
	report.wantSummary(t, 5, 1, 4, map[string]int{"$schema": 2, "default": 1, "enum": 1})
	want := []struct {
		name, keyword, object string
	}{
		{"read_text_file", "$schema", ""},
		{"list_directory", "$schema", ""},
		{"fetch", "default", "/properties/max_length"},
		{"annotatedMessage", "enum", "/properties/messageType"},
		{"echo", "", ""},
	}
	for i, w := range want {
		tool := report.Tools[i]
		if tool.Name == nil || *tool.Name != w.name {
			t.Errorf("tool %d: name %v, want %s", i, tool.Name, w.name)
		}
		if w.keyword == "" {
			if !tool.OK {
				t.Errorf("%s: not ok: %s", w.name, tool.Error)
			}
			continue
		}
		e := report.toolError(t, i)
		wantFields(t, e, map[string]string{"class": "unsupported_capability", "stage": "schema", "keyword": w.keyword})
		wantSchemaPointer(t, e, w.object, w.keyword)
	}

	r := runBinary(t, "", "schema", "lint", catalog)
	r.wantCode(t, exitNegative)
	for _, want := range []string{"ok    echo", "FAIL  fetch", "default", "enum", "$schema", "5 tools: 1 inside the supported subset, 4 outside"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("human output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestLintBareArrayOnStdin(t *testing.T) {
	catalog := `[
	  {"name":"a","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}},
	  {"name":"b","inputSchema":{"type":"object","properties":{"q":{"type":"string","pattern":"^x"}}}},
	  {"name":"c","inputSchema":{"type":"object","properties":{"q":{"type":"string","maxLength":3}}}}
	]`
	report := runLintJSON(t, catalog, exitNegative, "-")
	report.wantSummary(t, 3, 1, 2, map[string]int{"pattern": 1, "maxLength": 1})
	if !report.Tools[0].OK {
		t.Errorf("tool a: %s", report.Tools[0].Error)
	}

	// A clean bare array exits 0; so does an empty catalog.
	runLintJSON(t, `[{"name":"a","inputSchema":{"type":"object"}}]`, exitOK, "-").wantSummary(t, 1, 1, 0, map[string]int{})
	runLintJSON(t, `{"tools":[]}`, exitOK, "-").wantSummary(t, 0, 0, 0, map[string]int{})
}

// TestLintEntryErrors: a broken tool entry is a report entry (stage input),
// not a crash and not a catalog failure.
func TestLintEntryErrors(t *testing.T) {
	catalog := `{"tools":[
	  {"description":"no name","inputSchema":{"type":"object"}},
	  "not an object",
	  {"name":5,"inputSchema":{"type":"object"}},
	  {"name":"dup","inputSchema":{"type":"object"}},
	  {"name":"dup","inputSchema":{"type":"object"}},
	  {"name":"twice","name":"twice","inputSchema":{"type":"object"}},
	  {"name":"no_schema"},
	  {"name":"raw_bytes","inputSchema":{"type":"object","type":"object"}},
	  {"name":"ok","inputSchema":{"type":"object"}}
	], "nextCursor": "abc"}`
	report := runLintJSON(t, catalog, exitNegative, "-")
	// Entries 0, 1, 2, 4 and 5 are input errors (class validation); 6 has
	// no schema (D4: unsupported_capability, no keyword); 7 is a duplicate
	// member inside the schema itself (D3: validation at stage schema).
	report.wantSummary(t, 9, 2, 7, map[string]int{"validation": 6, "unsupported_capability": 1})
	for _, i := range []int{0, 1, 2, 4, 5} {
		wantFields(t, report.toolError(t, i), map[string]string{"class": "validation", "stage": "input"})
	}
	if report.Tools[0].Name != nil {
		t.Errorf("nameless tool has name %q", *report.Tools[0].Name)
	}
	if !report.Tools[3].OK {
		t.Errorf("the first tool named dup: %s", report.Tools[3].Error)
	}
	wantFields(t, report.toolError(t, 6), map[string]string{"class": "unsupported_capability", "stage": "schema"})
	wantFields(t, report.toolError(t, 7), map[string]string{"class": "validation", "stage": "schema"})
	if !report.Tools[8].OK {
		t.Errorf("tool ok: %s", report.Tools[8].Error)
	}

	r := runBinary(t, catalog, "schema", "lint", "-")
	r.wantCode(t, exitNegative)
	if !strings.Contains(r.stdout, "no name") {
		t.Errorf("human output does not report the nameless tool:\n%s", r.stdout)
	}
}

func TestLintUnreadableCatalog(t *testing.T) {
	for name, catalog := range map[string]string{
		"not JSON":        `{"tools":[`,
		"no tools member": `{"items":[]}`,
		"tools not array": `{"tools":{"name":"a"}}`,
		"two tools":       `{"tools":[],"tools":[]}`,
		"a string":        `"tools"`,
		"trailing data":   `[] []`,
		"empty":           ``,
	} {
		t.Run(name, func(t *testing.T) {
			runBinary(t, catalog, "schema", "lint", "-").wantUsageError(t)
			runBinary(t, catalog, "schema", "lint", "--json", "-").wantUsageError(t)
		})
	}
	runBinary(t, "", "schema", "lint", "/nonexistent/catalog.json").wantUsageError(t)
}

// Every error of a tool is listed, the first being the gateway's; the
// summary still counts tools by their first error.
func TestLintListsEveryError(t *testing.T) {
	catalog := `[{"name":"many","inputSchema":{"type":"object","$schema":"x",
	  "properties":{"a":{"type":"string","pattern":"^a","format":"uri"},"b":{"type":"strange"}}}}]`
	report := runLintJSON(t, catalog, exitNegative, "-")
	report.wantSummary(t, 1, 0, 1, map[string]int{"$schema": 1})
	var got []string
	for _, raw := range report.Tools[0].Errors {
		e := checkErrorObject(t, decodeObject(t, string(raw)))
		got = append(got, e["schema_pointer"].(string))
	}
	if want := []string{"/$schema", "/properties/a/format", "/properties/a/pattern", "/properties/b/type"}; !slices.Equal(got, want) {
		t.Errorf("errors at %v, want %v", got, want)
	}
	r := runBinary(t, catalog, "schema", "lint", "-")
	r.wantCode(t, exitNegative)
	for _, want := range []string{"FAIL  many: unsupported_capability, keyword $schema", "and: unsupported_capability, keyword format", "/properties/b/type"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("human output lacks %q:\n%s", want, r.stdout)
		}
	}
}
