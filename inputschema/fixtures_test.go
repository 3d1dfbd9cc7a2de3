package inputschema_test

// The nine built-in tool schemas as regression fixtures: each compiles, and a
// table per tool of valid and invalid arguments, each invalid one with the
// error D12-D17 prescribe (worked out by hand from the spec and the schema
// files in backend/builtin/schemas). Every case runs through ValidateJSON and
// through Validate on encoding/json decodings (UseNumber and float64), which
// must agree exactly.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/inputschema"
)

// fixtureCase is one call of a built-in tool.
type fixtureCase struct {
	name       string
	args       string
	floatLossy bool      // float64 decoding changes the verdict; see specArgCase
	want       *specWant // nil: valid
	all        []*specWant
}

// Shorthands for the errors of the fixtures: D14 required and additional
// members, D12 type, D13 minimum, D16 oneOf.
func fxRequired(property string) *specWant {
	return specArgErr("$arguments", "", "/required", "required", "property", property)
}

func fxExtra(member string) *specWant {
	return specArgErr("$arguments."+member, "/"+member, "/additionalProperties", "additionalProperties", "property", member)
}

func fxType(member, typ string) *specWant {
	return specArgErr("$arguments."+member, "/"+member, "/properties/"+member+"/type", "type", "type", typ)
}

func fxMinimum(member, minimum string) *specWant {
	return specArgErr("$arguments."+member, "/"+member, "/properties/"+member+"/minimum", "minimum", "minimum", minimum)
}

func fxOption(index string) *specWant {
	return specArgErr("$arguments.options["+index+"]", "/options/"+index, "/properties/options/items/oneOf", "oneOf", "matches", 0).
		withMessage("must match exactly one oneOf branch")
}

var fixtureCases = map[string][]fixtureCase{
	"read": {
		{name: "path only", args: `{"path":"a"}`},
		{name: "all members", args: `{"path":"a","offset":1,"limit":1}`},
		{name: "empty path string", args: `{"path":"","offset":1.0}`},
		{name: "D12 1.0 and 1e3 are integers", args: `{"path":"a","offset":1.0,"limit":1e3}`},
		{name: "D12 10E0 is an integer", args: `{"path":"a","offset":10E0}`},
		{name: "D12 integer beyond int64", args: `{"path":"a","limit":12345678901234567890}`},
		{name: "D13 offset 0 below minimum 1", args: `{"path":"a","offset":0}`, want: fxMinimum("offset", "1")},
		{name: "D13 offset -1", args: `{"path":"a","offset":-1}`, want: fxMinimum("offset", "1")},
		{name: "D13 limit 0", args: `{"path":"a","limit":0}`, want: fxMinimum("limit", "1")},
		{name: "D14 path missing", args: `{"offset":1}`, want: fxRequired("path")},
		{name: "D14 empty object", args: `{}`, want: fxRequired("path")},
		{name: "D12 1.5 is not an integer", args: `{"path":"a","offset":1.5}`, want: fxType("offset", "integer")},
		{name: "D12 1e-1 is not an integer", args: `{"path":"a","limit":1e-1}`, want: fxType("limit", "integer")},
		{name: "D12 just above 1 is not an integer", args: `{"path":"a","offset":1.0000000000000000000001}`, floatLossy: true, want: fxType("offset", "integer")},
		{name: `D18 "1" is not an integer`, args: `{"path":"a","offset":"1"}`, want: fxType("offset", "integer")},
		{name: "D12 null for an optional member", args: `{"path":"a","offset":null}`, want: fxType("offset", "integer")},
		{name: "D14 null satisfies required, fails type", args: `{"path":null}`, want: fxType("path", "string")},
		{name: "D12 path number", args: `{"path":1}`, want: fxType("path", "string")},
		{name: "D12 path array", args: `{"path":["a"]}`, want: fxType("path", "string")},
		{name: "D14 unknown member", args: `{"path":"a","extra":1}`, want: fxExtra("extra")},
		{name: "D14 names are case-sensitive", args: `{"path":"a","Path":"b"}`, want: fxExtra("Path")},
		{name: "D14 order: required, additional, properties", args: `{"offset":0,"limit":0,"extra":true}`, want: fxRequired("path"),
			all: []*specWant{fxRequired("path"), fxExtra("extra"), fxMinimum("limit", "1"), fxMinimum("offset", "1")}},
		{name: "D2 array", args: `[{"path":"a"}]`, want: specArgErr("$arguments", "", specAny, specAny, "type", "object")},
	},
	"bash": {
		{name: "command only", args: `{"command":"ls"}`},
		{name: "negative timeout (no minimum)", args: `{"command":"ls","timeout":-5}`},
		{name: "D12 -0 is an integer", args: `{"command":"ls","timeout":-0}`},
		{name: "D12 1E2 is an integer", args: `{"command":"ls","timeout":1E2}`},
		{name: "D14 command missing", args: `{"timeout":5}`, want: fxRequired("command")},
		{name: `D18 "5" is not an integer`, args: `{"command":"ls","timeout":"5"}`, want: fxType("timeout", "integer")},
		{name: "D12 2.5 is not an integer", args: `{"command":"ls","timeout":2.5}`, want: fxType("timeout", "integer")},
		{name: "D12 command boolean", args: `{"command":true}`, want: fxType("command", "string")},
		{name: "D12 null timeout", args: `{"command":"ls","timeout":null}`, want: fxType("timeout", "integer")},
		{name: "D14 unknown member", args: `{"command":"ls","cwd":"/"}`, want: fxExtra("cwd")},
	},
	"grep": {
		{name: "all members", args: `{"pattern":"x","path":"p","glob":"*.go","ignore_case":true,"context":0,"limit":1}`},
		{name: "D13 context -0 meets minimum 0", args: `{"pattern":"x","context":-0}`},
		{name: "ignore_case false", args: `{"pattern":"x","ignore_case":false}`},
		{name: "D13 context -1", args: `{"pattern":"x","context":-1}`, want: fxMinimum("context", "0")},
		{name: "D13 limit 0", args: `{"pattern":"x","limit":0}`, want: fxMinimum("limit", "1")},
		{name: `D18 "true" is not a boolean`, args: `{"pattern":"x","ignore_case":"true"}`, want: fxType("ignore_case", "boolean")},
		{name: "D12 1 is not a boolean", args: `{"pattern":"x","ignore_case":1}`, want: fxType("ignore_case", "boolean")},
		{name: "D12 null glob", args: `{"pattern":"x","glob":null}`, want: fxType("glob", "string")},
		{name: "D12 context 1.5", args: `{"pattern":"x","context":1.5}`, want: fxType("context", "integer")},
		{name: "D14 pattern missing", args: `{"path":"p"}`, want: fxRequired("pattern")},
		{name: "D11 members in byte order", args: `{"pattern":"x","limit":0,"context":-1}`, want: fxMinimum("context", "0"),
			all: []*specWant{fxMinimum("context", "0"), fxMinimum("limit", "1")}},
		{name: "D14 additional before property errors", args: `{"pattern":"x","zz":1,"context":-1}`, want: fxExtra("zz"),
			all: []*specWant{fxExtra("zz"), fxMinimum("context", "0")}},
	},
	"glob": {
		{name: "pattern only", args: `{"pattern":"*"}`},
		{name: "all members", args: `{"pattern":"**/*.go","path":"src","limit":1}`},
		{name: "D13 limit 0", args: `{"pattern":"*","limit":0}`, want: fxMinimum("limit", "1")},
		{name: "D14 unknown member", args: `{"pattern":"*","recursive":true}`, want: fxExtra("recursive")},
		{name: "D12 pattern number", args: `{"pattern":5}`, want: fxType("pattern", "string")},
		{name: "D14 pattern missing", args: `{"path":"."}`, want: fxRequired("pattern")},
	},
	"write": {
		{name: "empty content", args: `{"path":"a","content":""}`},
		{name: "D14 content missing", args: `{"path":"a"}`, want: fxRequired("content")},
		{name: "D14 path missing", args: `{"content":"x"}`, want: fxRequired("path")},
		{name: "D14 both missing: required array order", args: `{}`, want: fxRequired("path"),
			all: []*specWant{fxRequired("path"), fxRequired("content")}},
		{name: "D12 null content", args: `{"path":"a","content":null}`, want: fxType("content", "string")},
		{name: "D14 unknown member", args: `{"path":"a","content":"x","append":true}`, want: fxExtra("append")},
	},
	"url_fetch": {
		{name: "url only", args: `{"url":"https://example.com"}`},
		{name: "max_length 1", args: `{"url":"x","max_length":1}`},
		{name: "D13 max_length 0", args: `{"url":"x","max_length":0}`, want: fxMinimum("max_length", "1")},
		{name: "D12 max_length 1.5", args: `{"url":"x","max_length":1.5}`, want: fxType("max_length", "integer")},
		{name: "D14 url missing", args: `{"max_length":5}`, want: fxRequired("url")},
		{name: "D14 unknown member", args: `{"url":"x","headers":{}}`, want: fxExtra("headers")},
	},
	"edit": {
		{name: "all members", args: `{"path":"a","content":"b","old_content":"c"}`},
		{name: "without old_content", args: `{"path":"a","content":"b"}`},
		{name: "D12 null old_content", args: `{"path":"a","content":"b","old_content":null}`, want: fxType("old_content", "string")},
		{name: "D14 content missing", args: `{"path":"a","old_content":"c"}`, want: fxRequired("content")},
		{name: "D14 unknown member", args: `{"path":"a","content":"b","new_content":"c"}`, want: fxExtra("new_content")},
	},
	"ls": {
		{name: "nothing", args: `{}`},
		{name: "path", args: `{"path":"."}`},
		{name: "limit", args: `{"limit":1}`},
		{name: "D13 limit 0", args: `{"limit":0}`, want: fxMinimum("limit", "1")},
		{name: "D12 path number", args: `{"path":1}`, want: fxType("path", "string")},
		{name: "D12 null path", args: `{"path":null}`, want: fxType("path", "string")},
		{name: "D14 unknown member", args: `{"recursive":true}`, want: fxExtra("recursive")},
		{name: "D2 null", args: `null`, want: specArgErr("$arguments", "", specAny, specAny, "type", "object")},
	},
	"ask_user_question": {
		{name: "question only", args: `{"question":"q"}`},
		{name: "no options", args: `{"question":"q","options":[]}`},
		{name: "string options", args: `{"question":"q","options":["a","b"]}`},
		{name: "mixed options", args: `{"question":"q","options":["a",{"label":"L"},{"label":"L","value":"v","description":"d"}]}`},
		{name: "D13 timeout_ms 1000 meets the minimum", args: `{"question":"q","allow_freeform":true,"placeholder":"p","timeout_ms":1000}`},
		{name: "D12 timeout_ms 1e3", args: `{"question":"q","timeout_ms":1e3}`},
		{name: "D12 timeout_ms 1000.0", args: `{"question":"q","timeout_ms":1000.0}`},
		{name: "D12 timeout_ms beyond int64", args: `{"question":"q","timeout_ms":12345678901234567890}`},
		{name: "D13 timeout_ms 999", args: `{"question":"q","timeout_ms":999}`, want: fxMinimum("timeout_ms", "1000")},
		{name: "D13 timeout_ms 9.99e2", args: `{"question":"q","timeout_ms":9.99e2}`, want: fxMinimum("timeout_ms", "1000")},
		{name: "D12 timeout_ms just above 1000 is not an integer", args: `{"question":"q","timeout_ms":1000.0000000000000000001}`, floatLossy: true,
			want: fxType("timeout_ms", "integer")},
		{name: "D16 number option matches no branch", args: `{"question":"q","options":[5]}`, want: fxOption("0")},
		{name: "D16 object option without label matches no branch", args: `{"question":"q","options":[{"value":"x"}]}`, want: fxOption("0")},
		{name: "D16 second option without label", args: `{"question":"q","options":["a",{"value":"x"}]}`, want: fxOption("1")},
		{name: "D16 option with an unknown member", args: `{"question":"q","options":[{"label":"L","extra":1}]}`, want: fxOption("0")},
		{name: "D16 option with a number label", args: `{"question":"q","options":[{"label":5}]}`, want: fxOption("0")},
		{name: "D16 null option", args: `{"question":"q","options":[null]}`, want: fxOption("0")},
		{name: "D16 array option", args: `{"question":"q","options":[["a"]]}`, want: fxOption("0")},
		{name: "D15 failing options in index order", args: `{"question":"q","options":[1,"ok",{"x":1}]}`, want: fxOption("0"),
			all: []*specWant{fxOption("0"), fxOption("2")}},
		{name: "D12 options string", args: `{"question":"q","options":"a"}`, want: fxType("options", "array")},
		{name: "D12 options object", args: `{"question":"q","options":{"label":"L"}}`, want: fxType("options", "array")},
		{name: `D18 "yes" is not a boolean`, args: `{"question":"q","allow_freeform":"yes"}`, want: fxType("allow_freeform", "boolean")},
		{name: "D12 null placeholder", args: `{"question":"q","placeholder":null}`, want: fxType("placeholder", "string")},
		{name: "D14 question missing", args: `{"options":["a"]}`, want: fxRequired("question")},
		{name: "D14 unknown member", args: `{"question":"q","timeout":5}`, want: fxExtra("timeout")},
		// No value can match both branches (a string and an object), so the
		// "several branches" case of D16 cannot arise with this schema; it
		// is covered by TestD16OneOf.
	},
}

func TestBuiltinFixtures(t *testing.T) {
	tools := schemas.All()
	if len(tools) != 9 {
		t.Fatalf("%d built-in tools, want 9", len(tools))
	}
	for _, tool := range tools {
		t.Run(tool.Name, func(t *testing.T) {
			s, err := inputschema.Compile(tool.InputSchema, nil)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			// The same schema as Go values (D1) behaves the same.
			v, err := specDecodeNumber(string(tool.InputSchema))
			if err != nil {
				t.Fatal(err)
			}
			sv, err := inputschema.CompileValue(v, nil)
			if err != nil {
				t.Fatalf("CompileValue: %v", err)
			}
			cases := fixtureCases[tool.Name]
			if len(cases) == 0 {
				t.Fatal("no fixture cases")
			}
			valid, invalid := 0, 0
			for _, c := range cases {
				if c.want == nil {
					valid++
				} else {
					invalid++
				}
				t.Run(c.name, func(t *testing.T) {
					defer specRecover(t)
					ac := specArgCase{args: c.args, floatLossy: c.floatLossy, want: c.want, all: c.all}
					specValidateAllForms(t, s, ac)
					fromValue := sv.ValidateJSON([]byte(c.args))
					fromBytes := s.ValidateJSON([]byte(c.args))
					if !reflect.DeepEqual(fromValue, fromBytes) {
						t.Errorf("CompileValue schema: %v; Compile schema: %v", fromValue, fromBytes)
					}
				})
			}
			if valid == 0 || invalid == 0 {
				t.Errorf("%d valid and %d invalid cases; want both kinds", valid, invalid)
			}
		})
	}
	for name := range fixtureCases {
		if _, ok := schemas.Lookup(name); !ok {
			t.Errorf("fixture cases for unknown tool %q", name)
		}
	}
}

// The fixtures are compiled once and reused: compiling must not depend on
// the byte layout (indentation, member order) of the file.
func TestBuiltinFixturesCompactForm(t *testing.T) {
	for _, tool := range schemas.All() {
		var compact bytes.Buffer
		if err := json.Compact(&compact, tool.InputSchema); err != nil {
			t.Fatal(err)
		}
		s, err := inputschema.Compile(compact.Bytes(), nil)
		if err != nil {
			t.Errorf("%s: compact form: %v", tool.Name, err)
			continue
		}
		for _, c := range fixtureCases[tool.Name] {
			specCheck(t, tool.Name+"/"+c.name+" (compact schema)", s.ValidateJSON([]byte(c.args)), c.want)
		}
	}
}
