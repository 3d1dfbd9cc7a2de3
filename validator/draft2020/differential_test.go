package draft2020

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/inputschema"
)

// The nine built-in tool schemas are inside the subset, so the two
// boundaries must agree on them: same verdict, and the same violations
// (instance pointer, display path, schema pointer, keyword and, where the
// subset names one, the property), compared as sets since the two order
// them by different (each deterministic) rules.

var commonArgs = []string{
	`{}`, `[]`, `null`, `"x"`, `5`, `true`,
	`{"zzz":1}`, `{"a.b":1,"x y":[1,{"~/":2}]}`,
	`{"a":1,"a":2}`, "{\"\xff\":1}", `{"a":"\ud800"}`, `{} {}`, `{"a":`,
}

var builtinArgs = map[string][]string{
	"read": {
		`{"path":"a"}`, `{"path":"a","offset":1,"limit":10}`, `{"path":"a","offset":0}`,
		`{"path":"a","offset":1.0}`, `{"path":"a","offset":1e2}`, `{"path":"a","offset":1.5}`,
		`{"path":"a","offset":1e-1}`, `{"path":"a","offset":"1"}`, `{"path":null}`, `{"offset":1}`,
		`{"path":"a","extra":true}`, `{"path":"a","limit":0.99999999999999999999}`,
		`{"path":"a","limit":1.00000000000000000001}`, `{"path":"a","limit":1e400}`,
		`{"path":"a","limit":-0}`, `{"path":["a"]}`, `{"a.b":1,"path":"x","b":2}`,
		`{"path":"a","offset":0,"limit":0,"x":1,"y":2}`,
	},
	"bash": {
		`{"command":"ls"}`, `{"command":"ls","timeout":30}`, `{"command":"ls","timeout":-5}`,
		`{"command":1}`, `{"timeout":1}`, `{"command":"ls","timeout":1e-1}`, `{"command":"ls","timeout":true}`,
	},
	"grep": {
		`{"pattern":"x","ignore_case":true,"context":0}`, `{"pattern":"x","context":-1}`,
		`{"pattern":"x","ignore_case":"yes"}`, `{"pattern":"x","limit":0,"context":-1,"glob":5,"q":1}`,
		`{"pattern":"x","path":"p","glob":"*.go","limit":1}`,
	},
	"glob":  {`{"pattern":"**/*.go"}`, `{"pattern":"*","limit":0}`, `{"path":"."}`},
	"write": {`{"path":"a","content":""}`, `{"path":"a"}`, `{"content":"x"}`, `{"path":"a","content":null}`},
	"url_fetch": {
		`{"url":"https://example.com/"}`, `{"url":"x","max_length":0}`, `{"url":"x","max_length":1}`,
		`{"url":"not a url at all"}`,
	},
	"edit": {
		`{"path":"a","content":"b","old_content":"c"}`, `{"path":"a","content":"b","old_content":null}`,
		`{"path":"a","old_content":"c"}`,
	},
	"ls": {`{"path":"."}`, `{"limit":1}`, `{"limit":0}`, `{"path":1,"limit":"x"}`},
	"ask_user_question": {
		`{"question":"q"}`,
		`{"question":"q","options":["a",{"label":"b"},{"label":"c","value":"d","description":"e"}],"allow_freeform":true,"timeout_ms":1000}`,
		`{"question":"q","options":[1]}`, `{"question":"q","options":[{"value":"x"}]}`,
		`{"question":"q","options":[{"label":"x","extra":1}]}`, `{"question":"q","options":"a"}`,
		`{"question":"q","timeout_ms":999}`, `{"question":"q","options":[]}`,
		`{"question":"q","options":[{"label":"a"},2,"c",{"label":5},null]}`,
		`{"question":"q","options":[[]],"placeholder":1,"allow_freeform":0}`,
	},
}

// violation is what the comparison looks at.
type violation struct {
	class, stage, path, pointer, schemaPointer, keyword string
	property                                            any
}

func violations(t *testing.T, err error) []violation {
	t.Helper()
	if err == nil {
		return nil
	}
	var l *inputschema.ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("error %T %v is not an *inputschema.ErrorList", err, err)
	}
	var out []violation
	for _, e := range l.Errors {
		out = append(out, violation{string(e.Class), string(e.Stage), e.Path, e.Pointer, e.SchemaPointer, e.Keyword, e.Details["property"]})
	}
	slices.SortFunc(out, func(a, b violation) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

// afterTypeFailure drops, from the subset's list, what the library never
// reports: once a value fails "type", the library checks no other keyword of
// that schema object, where the subset still applies minimum to a number
// that failed "integer" (0.5 against {"type":"integer","minimum":1} is two
// violations there, one here). The verdict is the same; the list is shorter.
func afterTypeFailure(vs []violation) []violation {
	typed := map[string]bool{} // pointer + schema object of each type failure
	for _, v := range vs {
		if v.keyword == "type" {
			typed[v.pointer+"\x00"+strings.TrimSuffix(v.schemaPointer, "/type")] = true
		}
	}
	var out []violation
	for _, v := range vs {
		obj := v.schemaPointer[:max(strings.LastIndex(v.schemaPointer, "/"), 0)]
		if v.keyword != "type" && typed[v.pointer+"\x00"+obj] {
			continue
		}
		out = append(out, v)
	}
	return out
}

func TestDifferentialBuiltinSchemas(t *testing.T) {
	tools := schemas.All()
	if len(tools) != 9 {
		t.Fatalf("schemas.All() has %d tools, want 9", len(tools))
	}
	var valid, invalid int
	for _, tool := range tools {
		subset, err := inputschema.Compile(tool.InputSchema, nil)
		if err != nil {
			t.Fatalf("%s: the subset refuses its own built-in schema: %v", tool.Name, err)
		}
		full, err := Compile(tool.InputSchema, nil)
		if err != nil {
			t.Fatalf("%s: Compile: %v", tool.Name, err)
		}
		args, ok := builtinArgs[tool.Name]
		if !ok {
			t.Fatalf("no arguments for the built-in tool %q: add some", tool.Name)
		}
		for _, a := range append(slices.Clone(args), commonArgs...) {
			want := subset.ValidateJSONAll([]byte(a))
			got := full.ValidateJSONAll([]byte(a))
			if (want == nil) != (got == nil) {
				t.Errorf("%s %s: draft2020 says %v, subset says %v", tool.Name, a, got, want)
				continue
			}
			if want == nil {
				valid++
				continue
			}
			invalid++
			if w, g := afterTypeFailure(violations(t, want)), violations(t, got); !reflect.DeepEqual(w, g) {
				t.Errorf("%s %s: violations differ\n draft2020: %v\n subset:    %v\n (%v)", tool.Name, a, g, w, got)
			}
			// Decoding errors and the D2 object check are the same errors,
			// message and details included.
			var wl, gl *inputschema.ErrorList
			errors.As(want, &wl)
			errors.As(got, &gl)
			if wl.Errors[0].Path == "$arguments" && wl.Errors[0].Pointer == "" && len(wl.Errors) == 1 &&
				(wl.Errors[0].Keyword == "" || wl.Errors[0].Keyword == "type") {
				if !reflect.DeepEqual(wl, gl) {
					t.Errorf("%s %s: root error differs\n draft2020: %#v\n subset:    %#v", tool.Name, a, gl.Errors[0], wl.Errors[0])
				}
			}
		}
	}
	t.Logf("%d valid and %d invalid argument sets agree", valid, invalid)
	if valid < 20 || invalid < 60 {
		t.Errorf("the table is thinner than intended: %d valid, %d invalid", valid, invalid)
	}
}
