package main

import (
	"strings"
	"testing"
)

const supportedSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "n": {"type": "integer", "minimum": 1}
  },
  "required": ["path"],
  "additionalProperties": false
}`

func TestCheckSupportedSchema(t *testing.T) {
	file := writeFile(t, "schema.json", supportedSchema)

	r := runBinary(t, "", "schema", "check", file)
	r.wantCode(t, exitOK)
	if !strings.HasPrefix(r.stdout, "ok") {
		t.Errorf("stdout %q, want an ok line", r.stdout)
	}

	r = runBinary(t, "", "schema", "check", "--json", file)
	r.wantCode(t, exitOK)
	if got := decodeObject(t, r.stdout); len(got) != 1 || got["ok"] != true {
		t.Errorf(`--json printed %v, want {"ok":true}`, got)
	}

	// The same schema on stdin.
	r = runBinary(t, supportedSchema, "schema", "check", "-")
	r.wantCode(t, exitOK)
}

func TestCheckUnsupportedRef(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"$ref":"#/$defs/a"}}}`

	r := runBinary(t, schema, "schema", "check", "-")
	r.wantCode(t, exitNegative)
	for _, want := range []string{"unsupported_capability", "$ref", "/properties/a", "keyword"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("human output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runBinary(t, schema, "schema", "check", "--json", "-")
	r.wantCode(t, exitNegative)
	e := checkErrorObject(t, decodeObject(t, r.stdout))
	// D5: $ref is an unknown keyword, unsupported_capability, named.
	wantFields(t, e, map[string]string{"class": "unsupported_capability", "stage": "schema", "keyword": "$ref", "path": "", "pointer": ""})
	wantSchemaPointer(t, e, "/properties/a", "$ref")
}

func TestCheckMalformedSchema(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		want         map[string]string
		object       string // schema object at fault, for the pointer
	}{
		// D9: minimum must be a JSON number; a string is malformed, not unsupported.
		{"minimum not a number", `{"type":"object","properties":{"n":{"type":"integer","minimum":"one"}}}`,
			map[string]string{"class": "validation", "stage": "schema", "keyword": "minimum"}, "/properties/n"},
		// D8: minimum on a string is a supported keyword in an unsupported place.
		{"minimum on a string", `{"type":"object","properties":{"a":{"type":"string","minimum":1}}}`,
			map[string]string{"class": "unsupported_capability", "stage": "schema", "keyword": "minimum"}, "/properties/a"},
		// D4: a root that is not an object.
		{"array root", `[]`, map[string]string{"class": "validation", "stage": "schema"}, ""},
		// D3: duplicate member names.
		{"duplicate member", `{"type":"object","type":"object"}`, map[string]string{"class": "validation", "stage": "schema"}, ""},
		// Not JSON at all.
		{"not JSON", `{"type":"object",}`, map[string]string{"class": "validation", "stage": "schema"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBinary(t, tc.schema, "schema", "check", "--json", "-")
			r.wantCode(t, exitNegative)
			e := checkErrorObject(t, decodeObject(t, r.stdout))
			wantFields(t, e, tc.want)
			if tc.want["keyword"] != "" {
				wantSchemaPointer(t, e, tc.object, tc.want["keyword"])
			}

			r = runBinary(t, tc.schema, "schema", "check", "-")
			r.wantCode(t, exitNegative)
			if !strings.Contains(r.stdout, tc.want["class"]) {
				t.Errorf("human output lacks the class %s:\n%s", tc.want["class"], r.stdout)
			}
		})
	}
}

func TestCheckIOErrors(t *testing.T) {
	runBinary(t, "", "schema", "check", "/nonexistent/schema.json").wantUsageError(t)
	runBinary(t, "", "schema", "check", t.TempDir()).wantUsageError(t) // a directory
}

func TestValidateValidArguments(t *testing.T) {
	schema := writeFile(t, "schema.json", supportedSchema)
	args := writeFile(t, "args.json", `{"path":"a.txt","n":1}`)

	r := runBinary(t, "", "schema", "validate", "--schema", schema, "--args", args)
	r.wantCode(t, exitOK)
	if !strings.HasPrefix(r.stdout, "ok") {
		t.Errorf("stdout %q, want an ok line", r.stdout)
	}

	r = runBinary(t, `{"path":"a.txt"}`, "schema", "validate", "--json", "--schema", schema, "--args", "-")
	r.wantCode(t, exitOK)
	if got := decodeObject(t, r.stdout); len(got) != 1 || got["ok"] != true {
		t.Errorf(`--json printed %v, want {"ok":true}`, got)
	}

	// The schema may come from stdin when the arguments do not.
	r = runBinary(t, supportedSchema, "schema", "validate", "--schema", "-", "--args", args)
	r.wantCode(t, exitOK)
}

// TestValidateListsEveryViolation uses arguments breaking three rules; D14
// fixes their order: required, then additionalProperties, then properties.
func TestValidateListsEveryViolation(t *testing.T) {
	schema := writeFile(t, "schema.json", supportedSchema)
	const args = `{"n":0,"extra":true}`

	r := runBinary(t, args, "schema", "validate", "--json", "--schema", schema, "--args", "-")
	r.wantCode(t, exitNegative)
	out := decodeObject(t, r.stdout)
	if out["ok"] != false {
		t.Errorf("ok = %v, want false", out["ok"])
	}
	errs, _ := out["errors"].([]any)
	if len(errs) != 3 {
		t.Fatalf("%d errors, want 3: %s", len(errs), r.stdout)
	}
	want := []struct {
		fields   map[string]string
		object   string
		property string
	}{
		// D17: a missing member is located at the object lacking it.
		{map[string]string{"keyword": "required", "path": "$arguments", "pointer": ""}, "", "path"},
		// D17: a forbidden member is located at the member itself.
		{map[string]string{"keyword": "additionalProperties", "path": "$arguments.extra", "pointer": "/extra"}, "", "extra"},
		{map[string]string{"keyword": "minimum", "path": "$arguments.n", "pointer": "/n"}, "/properties/n", ""},
	}
	for i, w := range want {
		e := checkErrorObject(t, errs[i])
		wantFields(t, e, map[string]string{"class": "validation", "stage": "arguments"})
		wantFields(t, e, w.fields)
		wantSchemaPointer(t, e, w.object, w.fields["keyword"])
		if w.property != "" {
			if got := e["details"].(map[string]any)["property"]; got != w.property {
				t.Errorf("error %d: details.property = %v, want %q", i, got, w.property)
			}
		}
	}

	r = runBinary(t, args, "schema", "validate", "--schema", schema, "--args", "-")
	r.wantCode(t, exitNegative)
	for _, want := range []string{"3 violations", "$arguments.extra", "$arguments.n", "required", "additionalProperties", "minimum"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("human output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestValidateArgumentErrors(t *testing.T) {
	schema := writeFile(t, "schema.json", supportedSchema)
	for _, tc := range []struct {
		name, args string
		want       map[string]string
	}{
		// D2: arguments must be an object, reported at $arguments.
		{"array arguments", `[1]`, map[string]string{"path": "$arguments", "pointer": ""}},
		// D3: a duplicate name is refused, not resolved.
		{"duplicate member", `{"path":"a","path":"b"}`, map[string]string{}},
		// D18: no coercion, "1" is not an integer.
		{"string for integer", `{"path":"a","n":"1"}`, map[string]string{"path": "$arguments.n", "pointer": "/n", "keyword": "type"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBinary(t, tc.args, "schema", "validate", "--json", "--schema", schema, "--args", "-")
			r.wantCode(t, exitNegative)
			errs, _ := decodeObject(t, r.stdout)["errors"].([]any)
			if len(errs) == 0 {
				t.Fatalf("no errors listed: %s", r.stdout)
			}
			e := checkErrorObject(t, errs[0])
			wantFields(t, e, map[string]string{"class": "validation", "stage": "arguments"})
			wantFields(t, e, tc.want)
		})
	}
}

// TestValidateSchemaError: a schema outside the subset fails every call,
// reported as a one-entry list at stage schema.
func TestValidateSchemaError(t *testing.T) {
	schema := writeFile(t, "schema.json", `{"type":"object","properties":{"n":{"type":"integer","minimum":"one"}}}`)
	r := runBinary(t, `{"n":5}`, "schema", "validate", "--json", "--schema", schema, "--args", "-")
	r.wantCode(t, exitNegative)
	out := decodeObject(t, r.stdout)
	errs, _ := out["errors"].([]any)
	if out["ok"] != false || len(errs) != 1 {
		t.Fatalf("want ok false and one error: %s", r.stdout)
	}
	e := checkErrorObject(t, errs[0])
	wantFields(t, e, map[string]string{"class": "validation", "stage": "schema", "keyword": "minimum"})
	wantSchemaPointer(t, e, "/properties/n", "minimum")

	r = runBinary(t, `{"n":5}`, "schema", "validate", "--schema", schema, "--args", "-")
	r.wantCode(t, exitNegative)
	if !strings.Contains(r.stdout, "minimum") || !strings.Contains(r.stdout, "schema") {
		t.Errorf("human output:\n%s", r.stdout)
	}
}

func TestValidateUsageErrors(t *testing.T) {
	schema := writeFile(t, "schema.json", supportedSchema)
	for name, args := range map[string][]string{
		"no args flag":           {"schema", "validate", "--schema", schema},
		"no schema flag":         {"schema", "validate", "--args", "-"},
		"both on stdin":          {"schema", "validate", "--schema", "-", "--args", "-"},
		"batch with schema":      {"schema", "validate", "--batch", "--schema", schema},
		"positional argument":    {"schema", "validate", "--schema", schema, "--args", "-", "extra"},
		"missing arguments file": {"schema", "validate", "--schema", schema, "--args", "/nonexistent/args.json"},
	} {
		t.Run(name, func(t *testing.T) {
			runBinary(t, "{}", args...).wantUsageError(t)
		})
	}
}
