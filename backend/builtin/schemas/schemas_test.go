package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

var wantOrder = []string{"read", "bash", "grep", "glob", "write", "url_fetch", "edit", "ls", "ask_user_question"}

func TestAllOrderAndLookup(t *testing.T) {
	tools := All()
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, wantOrder) {
		t.Fatalf("All() names = %v, want %v", names, wantOrder)
	}
	for _, tool := range tools {
		got, ok := Lookup(tool.Name)
		if !ok {
			t.Errorf("Lookup(%q) not found", tool.Name)
			continue
		}
		if !reflect.DeepEqual(got, tool) {
			t.Errorf("Lookup(%q) differs from All()", tool.Name)
		}
		if strings.TrimSpace(tool.Description) == "" {
			t.Errorf("%s: empty description", tool.Name)
		}
	}
	for _, name := range []string{"", "READ", "Read", "fetch", "ask"} {
		if _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) found a tool", name)
		}
	}
}

// A caller that scribbles on what it got must not change what the next
// caller gets: the schemas are contracts.
func TestResultsAreCopies(t *testing.T) {
	first := All()
	want := string(first[0].InputSchema)
	for i := range first[0].InputSchema {
		first[0].InputSchema[i] = 'x'
	}
	first[1].Name = "changed"
	again := All()
	if string(again[0].InputSchema) != want || again[1].Name != "bash" {
		t.Fatal("All() shares state between calls")
	}
	got, _ := Lookup("read")
	got.InputSchema[0] = 'x'
	if again, _ := Lookup("read"); string(again.InputSchema) != want {
		t.Fatal("Lookup shares schema bytes between calls")
	}
}

// Every JSON file in the directory is one of the nine (no stray file that
// the embed pattern would pick up unseen), and names the tool after itself.
func TestFilesMatchTools(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var jsonFiles []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			jsonFiles = append(jsonFiles, strings.TrimSuffix(e.Name(), ".json"))
		}
	}
	want := slices.Clone(wantOrder)
	sort.Strings(want)
	sort.Strings(jsonFiles)
	if !slices.Equal(jsonFiles, want) {
		t.Fatalf("JSON files %v, want %v", jsonFiles, want)
	}
	for _, name := range wantOrder {
		data, err := os.ReadFile(name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		if err := checkNoDuplicateNames(data); err != nil {
			t.Errorf("%s.json: %v", name, err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			t.Fatalf("%s.json: %v", name, err)
		}
		var keys []string
		for k := range top {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !slices.Equal(keys, []string{"description", "inputSchema", "name", "outputSchema"}) {
			t.Errorf("%s.json: top-level members %v, want description, inputSchema, name, outputSchema", name, keys)
		}
	}
}

// checkNoDuplicateNames walks data with the token reader, which does not
// reject duplicate member names itself; the gateway's strict decoder would.
func checkNoDuplicateNames(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next token in this object is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			name := tok.(string)
			if top.seen[name] {
				return fmt.Errorf("duplicate member name %q", name)
			}
			top.seen[name] = true
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// prop is what the brief prescribes for one property.
type prop struct {
	typ     string
	minimum *int64
}

func minOf(n int64) *int64 { return &n }

// wantShapes is the brief's list of tools and members, which the files must
// follow exactly: any difference is a contract change.
var wantShapes = map[string]struct {
	props    map[string]prop
	required []string
}{
	"read":      {map[string]prop{"path": {typ: "string"}, "offset": {"integer", minOf(1)}, "limit": {"integer", minOf(1)}}, []string{"path"}},
	"bash":      {map[string]prop{"command": {typ: "string"}, "timeout": {typ: "integer"}}, []string{"command"}},
	"grep":      {map[string]prop{"pattern": {typ: "string"}, "path": {typ: "string"}, "glob": {typ: "string"}, "ignore_case": {typ: "boolean"}, "context": {"integer", minOf(0)}, "limit": {"integer", minOf(1)}}, []string{"pattern"}},
	"glob":      {map[string]prop{"pattern": {typ: "string"}, "path": {typ: "string"}, "limit": {"integer", minOf(1)}}, []string{"pattern"}},
	"write":     {map[string]prop{"path": {typ: "string"}, "content": {typ: "string"}}, []string{"path", "content"}},
	"url_fetch": {map[string]prop{"url": {typ: "string"}, "max_length": {"integer", minOf(1)}}, []string{"url"}},
	"edit":      {map[string]prop{"path": {typ: "string"}, "content": {typ: "string"}, "old_content": {typ: "string"}}, []string{"path", "content"}},
	"ls":        {map[string]prop{"path": {typ: "string"}, "limit": {"integer", minOf(1)}}, nil},
	"ask_user_question": {map[string]prop{"question": {typ: "string"}, "options": {typ: "array"}, "allow_freeform": {typ: "boolean"},
		"placeholder": {typ: "string"}, "timeout_ms": {"integer", minOf(1000)}}, []string{"question"}},
}

func decodeSchema(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("inputSchema: %v", err)
	}
	return m
}

func TestShapesFollowBrief(t *testing.T) {
	for _, tool := range All() {
		t.Run(tool.Name, func(t *testing.T) {
			want, ok := wantShapes[tool.Name]
			if !ok {
				t.Fatalf("no expected shape for %q", tool.Name)
			}
			root := decodeSchema(t, tool.InputSchema)
			if root["type"] != "object" {
				t.Errorf("root type = %v, want object", root["type"])
			}
			if root["additionalProperties"] != false {
				t.Errorf("root additionalProperties = %v, want false", root["additionalProperties"])
			}
			var required []string
			if r, ok := root["required"]; ok {
				for _, v := range r.([]any) {
					required = append(required, v.(string))
				}
			}
			if !slices.Equal(required, want.required) {
				t.Errorf("required = %v, want %v", required, want.required)
			}
			props, _ := root["properties"].(map[string]any)
			if len(props) != len(want.props) {
				t.Errorf("%d properties, want %d", len(props), len(want.props))
			}
			for name, w := range want.props {
				p, ok := props[name].(map[string]any)
				if !ok {
					t.Errorf("property %q missing", name)
					continue
				}
				if p["type"] != w.typ {
					t.Errorf("%s: type %v, want %s", name, p["type"], w.typ)
				}
				m, has := p["minimum"]
				switch {
				case w.minimum == nil && has:
					t.Errorf("%s: unexpected minimum %v", name, m)
				case w.minimum != nil && !has:
					t.Errorf("%s: minimum missing, want %d", name, *w.minimum)
				case w.minimum != nil && m.(json.Number).String() != fmt.Sprint(*w.minimum):
					t.Errorf("%s: minimum %v, want %d", name, m, *w.minimum)
				}
				if d, _ := p["description"].(string); strings.TrimSpace(d) == "" {
					t.Errorf("%s: no description", name)
				}
			}
		})
	}
}

// The options member of ask_user_question is the one nested form: an array
// of items that are either a string or a {label, value, description} object.
func TestAskUserQuestionOptions(t *testing.T) {
	tool, _ := Lookup("ask_user_question")
	root := decodeSchema(t, tool.InputSchema)
	options := root["properties"].(map[string]any)["options"].(map[string]any)
	items, ok := options["items"].(map[string]any)
	if !ok {
		t.Fatal("options.items missing")
	}
	if _, has := items["type"]; has {
		t.Error("the oneOf schema must not carry type")
	}
	branches, _ := items["oneOf"].([]any)
	if len(branches) != 2 {
		t.Fatalf("oneOf has %d branches, want 2", len(branches))
	}
	if b := branches[0].(map[string]any); b["type"] != "string" {
		t.Errorf("first branch type %v, want string", b["type"])
	}
	obj := branches[1].(map[string]any)
	if obj["type"] != "object" || obj["additionalProperties"] != false {
		t.Errorf("object branch: type %v additionalProperties %v", obj["type"], obj["additionalProperties"])
	}
	if !reflect.DeepEqual(obj["required"], []any{"label"}) {
		t.Errorf("object branch required %v, want [label]", obj["required"])
	}
	props := obj["properties"].(map[string]any)
	for _, name := range []string{"label", "value", "description"} {
		if p, _ := props[name].(map[string]any); p == nil || p["type"] != "string" {
			t.Errorf("object branch property %q: %v", name, props[name])
		}
	}
	if len(props) != 3 {
		t.Errorf("object branch has %d properties, want 3", len(props))
	}
}

// supportedKeywords is the validator's subset (spec D5); the built-in schemas
// must stay inside it, since they are that subset's regression fixtures.
var supportedKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"description": true, "minimum": true, "items": true, "oneOf": true,
}

// checkSubset reports every use outside the subset in the schema at ptr:
// unknown keywords, nested schemas without type (oneOf schemas excepted),
// object schemas that allow unknown members.
func checkSubset(schema map[string]any, ptr string, nested bool, report func(string, ...any)) {
	for k := range schema {
		if !supportedKeywords[k] {
			report("%s: keyword %q outside the subset", ptr, k)
		}
	}
	_, isOneOf := schema["oneOf"]
	typ, hasType := schema["type"]
	switch {
	case isOneOf && hasType:
		report("%s: oneOf schema with type", ptr)
	case nested && !isOneOf && !hasType:
		report("%s: nested schema without type", ptr)
	}
	if typ == "object" && schema["additionalProperties"] != false {
		report("%s: object schema without additionalProperties false", ptr)
	}
	if props, ok := schema["properties"].(map[string]any); ok {
		for name, p := range props {
			checkSubset(p.(map[string]any), ptr+"/properties/"+name, true, report)
		}
	}
	if items, ok := schema["items"].(map[string]any); ok {
		checkSubset(items, ptr+"/items", true, report)
	}
	if branches, ok := schema["oneOf"].([]any); ok {
		for i, b := range branches {
			checkSubset(b.(map[string]any), fmt.Sprintf("%s/oneOf/%d", ptr, i), true, report)
		}
	}
}

func TestSchemasStayInSubset(t *testing.T) {
	for _, tool := range All() {
		checkSubset(decodeSchema(t, tool.InputSchema), "", false, func(f string, a ...any) {
			t.Errorf(tool.Name+": "+f, a...)
		})
		// The output schemas are closed too, but for an error's details
		// (bash, url_fetch), which say what each class adds.
		checkSubset(decodeSchema(t, tool.OutputSchema), "", false, func(f string, a ...any) {
			if len(a) > 0 && a[0] == "/properties/error/properties/details" && strings.Contains(f, "additionalProperties") {
				return
			}
			t.Errorf(tool.Name+" outputSchema: "+f, a...)
		})
		if _, err := inputschema.Compile(tool.OutputSchema, nil); err != nil {
			t.Errorf("%s: outputSchema outside the subset: %v", tool.Name, err)
		}
	}
}

// The examples file written elsewhere lists the same nine tools; their
// schemas must mean the same (descriptions may be worded differently).
func TestExamplesFileAgrees(t *testing.T) {
	path := filepath.Join("..", "..", "..", "examples", "builtin-tools.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s does not exist yet", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	examples, err := parseExampleTools(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	ours := map[string]Tool{}
	for _, tool := range All() {
		ours[tool.Name] = tool
	}
	seen := map[string]bool{}
	for _, ex := range examples {
		if seen[ex.Name] {
			t.Errorf("%s: tool %q listed twice", path, ex.Name)
		}
		seen[ex.Name] = true
		tool, ok := ours[ex.Name]
		if !ok {
			t.Errorf("%s: tool %q is not a built-in", path, ex.Name)
			continue
		}
		a, err := normalizedJSON(tool.InputSchema)
		if err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		b, err := normalizedJSON(ex.InputSchema)
		if err != nil {
			t.Errorf("%s: %s inputSchema: %v", path, ex.Name, err)
			continue
		}
		var worded []string
		for _, d := range diffValues("", a, b, &worded) {
			t.Errorf("%s: %s inputSchema differs at %s", path, ex.Name, d)
		}
		if len(worded) > 0 {
			t.Logf("%s: %s: %d descriptions worded differently (allowed), first at %q", path, ex.Name, len(worded), worded[0])
		}
	}
	for _, name := range wantOrder {
		if !seen[name] {
			t.Errorf("%s: tool %q missing", path, name)
		}
	}
}

// parseExampleTools accepts the two plausible layouts of the examples file: a
// bare array of tools, or an object with a "tools" array.
func parseExampleTools(data []byte) ([]Tool, error) {
	var list []Tool
	if err := json.Unmarshal(data, &list); err == nil {
		return list, nil
	}
	var wrapped struct {
		Tools []Tool `json:"tools"`
	}
	if err := json.Unmarshal(data, &wrapped); err != nil {
		return nil, err
	}
	if wrapped.Tools == nil {
		return nil, errors.New(`neither an array of tools nor an object with a "tools" array`)
	}
	return wrapped.Tools, nil
}

// normalizedJSON decodes a value with numbers turned into exact rationals, so
// 1 and 1.0 compare equal and nothing is rounded.
func normalizedJSON(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, errors.New("absent")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return normalizeNumbers(v)
}

func normalizeNumbers(v any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(v.String())
		if !ok {
			return nil, fmt.Errorf("number %s", v)
		}
		return "number:" + r.RatString(), nil
	case map[string]any:
		for k, e := range v {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			v[k] = n
		}
	case []any:
		for i, e := range v {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			v[i] = n
		}
	}
	return v, nil
}

// diffValues lists where a (ours) and b (the examples file) differ, by JSON
// pointer. Description members are annotations and may be worded
// differently: their pointers go to worded instead.
func diffValues(ptr string, a, b any, worded *[]string) []string {
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		var out []string
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			av, aok := am[k]
			bv, bok := bm[k]
			p := ptr + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
			switch {
			case k == "description" && !strings.HasSuffix(ptr, "/properties"):
				if !reflect.DeepEqual(av, bv) || aok != bok {
					*worded = append(*worded, p)
				}
			case !bok:
				out = append(out, fmt.Sprintf("%s: missing from the examples file (ours: %v)", p, av))
			case !aok:
				out = append(out, fmt.Sprintf("%s: only in the examples file (%v)", p, bv))
			default:
				out = append(out, diffValues(p, av, bv, worded)...)
			}
		}
		return out
	}
	as, aIsList := a.([]any)
	bs, bIsList := b.([]any)
	if aIsList && bIsList {
		if len(as) != len(bs) {
			return []string{fmt.Sprintf("%s: %d elements here, %d in the examples file", ptr, len(as), len(bs))}
		}
		var out []string
		for i := range as {
			out = append(out, diffValues(fmt.Sprintf("%s/%d", ptr, i), as[i], bs[i], worded)...)
		}
		return out
	}
	if !reflect.DeepEqual(a, b) {
		return []string{fmt.Sprintf("%s: %v here, %v in the examples file", ptr, a, b)}
	}
	return nil
}

// The comparison itself must catch what matters and let wording pass.
func TestDiffValues(t *testing.T) {
	const ours = `{"type":"object","description":"a","properties":{"description":{"type":"string"},"n":{"type":"integer","minimum":1}}}`
	cases := []struct {
		name, theirs string
		diffs        int
	}{
		{"same, reworded", `{"type":"object","description":"b","properties":{"description":{"type":"string","description":"x"},"n":{"type":"integer","minimum":1.0}}}`, 0},
		{"minimum changed", `{"type":"object","description":"a","properties":{"description":{"type":"string"},"n":{"type":"integer","minimum":2}}}`, 1},
		{"property named description missing", `{"type":"object","description":"a","properties":{"n":{"type":"integer","minimum":1}}}`, 1},
		{"extra keyword", `{"type":"object","description":"a","additionalProperties":false,"properties":{"description":{"type":"string"},"n":{"type":"integer","minimum":1}}}`, 1},
	}
	for _, c := range cases {
		theirs, err := normalizedJSON(json.RawMessage(c.theirs))
		if err != nil {
			t.Fatal(err)
		}
		mine, err := normalizedJSON(json.RawMessage(ours))
		if err != nil {
			t.Fatal(err)
		}
		var worded []string
		if got := diffValues("", mine, theirs, &worded); len(got) != c.diffs {
			t.Errorf("%s: %d differences %v, want %d", c.name, len(got), got, c.diffs)
		}
	}
}

func TestCheckNoDuplicateNames(t *testing.T) {
	for doc, dup := range map[string]bool{
		`{"a":1,"b":{"a":1},"c":[{"a":1},{"a":{"a":1}}]}`: false,
		`{"a":1,"b":{"a":1},"a":2}`:                       true,
		`{"b":[{"x":1,"x":2}]}`:                           true,
		`{"a":{},"b":[],"c":[[{}]],"d":{"e":{}}}`:         false,
	} {
		if err := checkNoDuplicateNames([]byte(doc)); (err != nil) != dup {
			t.Errorf("%s: err = %v, want duplicate %v", doc, err, dup)
		}
	}
}
