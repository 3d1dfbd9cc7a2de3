package inputschema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// Fuzz targets: the decoder and the validator face arbitrary bytes from
// callers, so they must never panic, must be deterministic, and their two
// input forms (JSON bytes and decoded values) must agree. Seeds are added
// here and in testdata/fuzz/<target>/, so a plain `go test` runs them all.

// toolSchemas are schemas in the style of the built-in tool schemas: object
// roots, closed objects, required names, minimum, nested items, nested
// objects and oneOf.
var toolSchemas = []string{
	`{"type":"object","additionalProperties":false,"required":["path"],"properties":{"path":{"type":"string","description":"file to read"},"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","minimum":1}}}`,
	`{"type":"object","additionalProperties":false,"required":["path","content"],"properties":{"path":{"type":"string"},"content":{"type":"string"}}}`,
	`{"type":"object","additionalProperties":false,"required":["command"],"properties":{"command":{"type":"string"},"timeout_ms":{"type":"integer","minimum":1000},"background":{"type":"boolean"}}}`,
	`{"type":"object","required":["path","edits"],"properties":{"path":{"type":"string"},"edits":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["old","new"],"properties":{"old":{"type":"string"},"new":{"type":"string"},"replace_all":{"type":"boolean"}}}}}}`,
	`{"type":"object","additionalProperties":false,"required":["question"],"properties":{"question":{"type":"string"},"options":{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","required":["label"],"additionalProperties":false,"properties":{"label":{"type":"string"},"value":{"type":"string"}}}]}}}}`,
	`{"type":"object","additionalProperties":false,"required":["query"],"properties":{"query":{"type":"string","description":"search terms"},"max_results":{"type":"integer","minimum":1},"threshold":{"type":"number","minimum":0.5}}}`,
	`{"type":"object","additionalProperties":false,"required":["todos"],"properties":{"todos":{"type":"array","items":{"type":"object","required":["content","status"],"properties":{"content":{"type":"string"},"status":{"type":"string"},"priority":{"type":"integer","minimum":-1e400}}}}}}`,
	`{"type":"object","required":["task"],"properties":{"task":{"type":"string"},"tools":{"type":"array","items":{"type":"string"}},"matrix":{"type":"array","items":{"type":"array","items":{"type":"number","minimum":0.99999999999999999999}}}}}`,
	`{"description":"url fetch","additional_properties":false,"required":["url"],"properties":{"url":{"type":"string"},"a.b":{"type":"integer"},"":{"type":"boolean"}}}`,
}

// unsupportedSchemas are refused at compile time; they seed the compiler's
// error paths.
var unsupportedSchemas = []string{
	``, `null`, `true`, `[]`, `"x"`, `5`,
	`{"type":"string"}`,
	`{"oneOf":[{"type":"object"}]}`,
	`{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
	`{"type":"object","properties":{"a":{"type":"null"}}}`,
	`{"type":"object","properties":{"a":{}}}`,
	`{"type":"object","properties":{"a":true}}`,
	`{"type":"object","properties":{"a":{"type":"string","minimum":1}}}`,
	`{"type":"object","properties":{"a":{"type":"integer","minimum":"one"}}}`,
	`{"type":"object","properties":{"a":{"type":"array","items":[{"type":"string"}]}}}`,
	`{"type":"object","properties":{"a":{"oneOf":[]}}}`,
	`{"type":"object","properties":{"a":{"type":"string","oneOf":[{"type":"string"}]}}}`,
	`{"type":"object","additionalProperties":{"type":"string"}}`,
	`{"type":"object","additionalProperties":false,"additional_properties":false}`,
	`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`,
	`{"type":"object","properties":{"a":{"$ref":"#"}}}`,
	`{"type":"object","required":"a"}`,
	`{"type":"object","required":[1]}`,
	`{"type":"object","type":"object"}`,
	`{"type":"object","\u0074ype":"object"}`,
}

// trickyJSON exercises the strict decoder's refusals and edge cases.
var trickyJSON = []string{
	`{}`, `[]`, `null`, `0`, `-0`, `1.0`, `1e400`, `-1e-400`, `1E+2`, `123456789012345678901234567890`,
	`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"\/":1,"/":2}`,
	`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"ka":10,"kb":11,"kc":12,"kd":13,"ke":14,"kf":15,"kg":16,"k3":17}`,
	`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud83d\ude00"`, `{"\ud83d\ude00":1}`,
	"\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "{\"a\xe2\x82\":1}",
	`{} {}`, `1 2`, `{}x`, "{}\n",
	strings.Repeat("[", 200) + strings.Repeat("]", 200),
	strings.Repeat(`{"a":`, 20) + "1" + strings.Repeat("}", 20),
	`01`, `1.`, `.5`, `-`, `+1`, `0x10`, `NaN`, `tru`, "\"a\x01\"", `"\x"`,
	`"\"\\\/\b\f\n\r\t\u0041"`,
}

// toolArgs are argument objects for the tool schemas, valid and not.
var toolArgs = []string{
	`{"path":"/etc/hosts"}`, `{"path":"a","offset":0,"limit":1.0}`, `{"path":"a","offset":-1}`, `{"path":"a","offset":1.5}`,
	`{"path":"a","offset":"1"}`, `{"path":"a","extra":true}`, `{"path":null}`, `{}`, `[]`, `"x"`, `null`,
	`{"command":"ls","timeout_ms":999.99999999999999999}`, `{"command":"ls","timeout_ms":1e3}`, `{"command":"ls","timeout_ms":-0}`,
	`{"question":"q","options":["a",{"label":"x"},{"value":"y"},1,{"label":"l","other":0}]}`,
	`{"path":"p","edits":[{"old":"a","new":"b"},{"old":"a"},{"old":1,"new":2,"x":3}]}`,
	`{"todos":[{"content":"c","status":"s","priority":-1e401}]}`,
	`{"task":"t","matrix":[[1,0.9],[0.99999999999999999999,"x"]],"tools":["a",null]}`,
	`{"url":"u","a.b":1.5,"":"no"}`,
	`{"query":"q","max_results":0,"threshold":0.4999999999999999999999}`,
	`{"path":"a","path":"b"}`, `{"path":"a","\u0070ath":"b"}`, `{"path":"\ud800"}`, "{\"path\":\"\xff\"}", `{"path":"a"} x`,
	`{"command":"ls","timeout_ms":1e400}`,
}

func FuzzDecode(f *testing.F) {
	for _, s := range trickyJSON {
		f.Add([]byte(s))
	}
	for _, s := range toolSchemas {
		f.Add([]byte(s))
	}
	for _, s := range toolArgs {
		f.Add([]byte(s))
	}
	opts := &jsonstrict.Options{MaxDepth: 16, MaxBytes: 4096}
	// Documents at and just past the size limit: with the too-large path in
	// the baseline coverage, the fuzzer does not spend its time minimizing
	// the first long input it stumbles on.
	f.Add(append(append([]byte(`"`), bytes.Repeat([]byte("a"), opts.MaxBytes-2)...), '"'))
	f.Add(bytes.Repeat([]byte("["), opts.MaxBytes+1))
	f.Fuzz(func(t *testing.T, data []byte) {
		v1, err1 := jsonstrict.Decode(data, opts)
		v2, err2 := jsonstrict.Decode(data, opts)
		if !reflect.DeepEqual(v1, v2) || !reflect.DeepEqual(err1, err2) {
			t.Fatalf("Decode not deterministic on %q: %#v, %v then %#v, %v", data, v1, err1, v2, err2)
		}
		if verr := jsonstrict.Valid(data, opts); !reflect.DeepEqual(verr, err1) {
			t.Fatalf("Valid(%q) = %v, Decode error = %v", data, verr, err1)
		}
		// A Parser that already parsed another document gives the same result.
		var p jsonstrict.Parser
		if _, err := p.Parse([]byte(`{"a":[1,{"b":"\u0063"}],"d":null}`), nil); err != nil {
			t.Fatal(err)
		}
		doc, perr := p.Parse(data, opts)
		if !reflect.DeepEqual(perr, err1) {
			t.Fatalf("reused Parser error on %q = %v, Decode error = %v", data, perr, err1)
		}
		if err1 != nil {
			checkDecodeError(t, data, err1, opts)
			return
		}
		if got := doc.Value(0); !reflect.DeepEqual(got, v1) {
			t.Fatalf("reused Parser value on %q = %#v, Decode = %#v", data, got, v1)
		}
		// Strict is a subset of encoding/json, with the same meaning.
		if !json.Valid(data) {
			t.Fatalf("strict decoder accepted %q, which encoding/json rejects", data)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json cannot decode %q: %v", data, err)
		}
		if got := asEncodingJSON(v1); !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(%q) = %#v, encoding/json = %#v", data, got, want)
		}
	})
}

// checkDecodeError checks the shape of a decoding error.
func checkDecodeError(t *testing.T, data []byte, err error, opts *jsonstrict.Options) {
	t.Helper()
	var je *jsonstrict.Error
	if !errors.As(err, &je) || error(je) != err {
		t.Fatalf("Decode(%q) error %T is not a *jsonstrict.Error", data, err)
	}
	sentinels := []error{jsonstrict.ErrSyntax, jsonstrict.ErrDuplicateName, jsonstrict.ErrInvalidUTF8,
		jsonstrict.ErrLoneSurrogate, jsonstrict.ErrTrailingData, jsonstrict.ErrTooDeep, jsonstrict.ErrTooLarge}
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("Decode(%q) error %v matches %d sentinels, want exactly 1", data, err, n)
	}
	if je.Offset < 0 || je.Offset > len(data) {
		t.Fatalf("Decode(%q) error offset %d outside the input", data, je.Offset)
	}
	if errors.Is(err, jsonstrict.ErrTooLarge) != (len(data) > opts.MaxBytes) {
		t.Fatalf("Decode(%q) (%d bytes, limit %d): error %v", data, len(data), opts.MaxBytes, err)
	}
}

// asEncodingJSON converts a jsonstrict value tree to what encoding/json
// decodes with UseNumber: Number becomes json.Number.
func asEncodingJSON(v any) any {
	switch v := v.(type) {
	case jsonstrict.Number:
		return json.Number(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = asEncodingJSON(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = asEncodingJSON(e)
		}
		return out
	}
	return v
}

// checkSchemaError checks a Compile error: an *inputschema.Error (not
// wrapped) at stage schema with one of the two classes.
func checkSchemaError(t *testing.T, what string, err error) *inputschema.Error {
	t.Helper()
	e, ok := err.(*inputschema.Error)
	if !ok {
		t.Fatalf("%s: error %T (%v) is not an *inputschema.Error", what, err, err)
	}
	if e.Stage != inputschema.StageSchema {
		t.Fatalf("%s: error stage %q, want schema: %v", what, e.Stage, e)
	}
	if e.Class != inputschema.ClassValidation && e.Class != inputschema.ClassUnsupported {
		t.Fatalf("%s: error class %q: %v", what, e.Class, e)
	}
	if e.Details == nil || e.Message == "" {
		t.Fatalf("%s: error without details map or message: %#v", what, e)
	}
	return e
}

func FuzzCompile(f *testing.F) {
	for _, s := range toolSchemas {
		f.Add([]byte(s))
	}
	for _, s := range unsupportedSchemas {
		f.Add([]byte(s))
	}
	for _, s := range trickyJSON {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := inputschema.Compile(data, nil)
		s2, err2 := inputschema.Compile(data, nil)
		if (s == nil) == (err == nil) {
			t.Fatalf("Compile(%q) = %v, %v: want exactly one of schema and error", data, s, err)
		}
		if !reflect.DeepEqual(err, err2) {
			t.Fatalf("Compile(%q) not deterministic: %v then %v", data, err, err2)
		}
		_ = s2
		var e *inputschema.Error
		if err != nil {
			e = checkSchemaError(t, "Compile", err)
		}
		// The same schema as host-authored Go values gets the same verdict
		// and the same first error (D1, D11).
		v, derr := jsonstrict.Decode(data, nil)
		if derr != nil {
			if err == nil {
				t.Fatalf("Compile(%q) accepted what the strict decoder refuses: %v", data, derr)
			}
			return
		}
		for _, form := range []any{v, asEncodingJSON(v)} {
			_, verr := inputschema.CompileValue(form, nil)
			if (verr == nil) != (err == nil) {
				t.Fatalf("Compile(%q) = %v but CompileValue = %v", data, err, verr)
			}
			if verr != nil {
				ve := checkSchemaError(t, "CompileValue", verr)
				if !sameError(e, ve) {
					t.Fatalf("schema %q: Compile error %#v, CompileValue error %#v", data, e, ve)
				}
			}
		}
	})
}

// sameError compares the fields that identify an error.
func sameError(a, b *inputschema.Error) bool {
	return a.Class == b.Class && a.Stage == b.Stage && a.Message == b.Message && a.Path == b.Path &&
		a.Pointer == b.Pointer && a.SchemaPointer == b.SchemaPointer && a.Keyword == b.Keyword
}

// checkArgumentsError checks a validation error of the single-error methods
// and returns it.
func checkArgumentsError(t *testing.T, what string, err error) *inputschema.Error {
	t.Helper()
	e, ok := err.(*inputschema.Error)
	if !ok {
		t.Fatalf("%s: error %T (%v) is not an *inputschema.Error", what, err, err)
	}
	checkArgumentsErrorFields(t, what, e)
	return e
}

func checkArgumentsErrorFields(t *testing.T, what string, e *inputschema.Error) {
	t.Helper()
	if e == nil {
		t.Fatalf("%s: nil *Error in a list", what)
	}
	if e.Stage != inputschema.StageArguments {
		t.Fatalf("%s: error stage %q, want arguments: %v", what, e.Stage, e)
	}
	if e.Class != inputschema.ClassValidation && e.Class != inputschema.ClassUnsupported {
		t.Fatalf("%s: error class %q: %v", what, e.Class, e)
	}
	if e.Details == nil || e.Message == "" || !strings.HasPrefix(e.Path, "$arguments") {
		t.Fatalf("%s: error without details map, message or $arguments path: %#v", what, e)
	}
}

// checkErrorList checks an all-errors result against the single error.
func checkErrorList(t *testing.T, what string, all error, first *inputschema.Error) []*inputschema.Error {
	t.Helper()
	if (all == nil) != (first == nil) {
		t.Fatalf("%s: all-errors result %v, single-error result %v", what, all, first)
	}
	if all == nil {
		return nil
	}
	list, ok := all.(*inputschema.ErrorList)
	if !ok || len(list.Errors) == 0 {
		t.Fatalf("%s: all-errors result %T (%v), want a non-empty *ErrorList", what, all, all)
	}
	for _, e := range list.Errors {
		checkArgumentsErrorFields(t, what, e)
	}
	if !sameError(list.Errors[0], first) {
		t.Fatalf("%s: first listed error %#v, single error %#v", what, list.Errors[0], first)
	}
	return list.Errors
}

func FuzzValidate(f *testing.F) {
	for _, s := range toolSchemas {
		for _, a := range toolArgs {
			f.Add([]byte(s), []byte(a))
		}
	}
	for _, a := range trickyJSON {
		f.Add([]byte(toolSchemas[0]), []byte(a))
		f.Add([]byte(toolSchemas[4]), []byte(`{"question":`+a+`}`))
	}
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		s, err := inputschema.Compile(schema, nil)
		if err != nil {
			return
		}
		var first *inputschema.Error
		verr := s.ValidateJSON(args)
		if verr != nil {
			first = checkArgumentsError(t, "ValidateJSON", verr)
		}
		if again := s.ValidateJSON(args); !reflect.DeepEqual(again, verr) {
			t.Fatalf("ValidateJSON not deterministic: %v then %v", verr, again)
		}
		jsonList := checkErrorList(t, "ValidateJSONAll", s.ValidateJSONAll(args), first)

		// The decoded form of the same arguments gets the same errors, in
		// both number representations, and is not modified (D18).
		decoded, derr := jsonstrict.Decode(args, nil)
		if derr != nil {
			if verr == nil {
				t.Fatalf("ValidateJSON accepted arguments the strict decoder refuses: %v", derr)
			}
			return
		}
		for _, form := range []any{decoded, asEncodingJSON(decoded)} {
			before := deepCopy(form)
			var got *inputschema.Error
			if err := s.Validate(form); err != nil {
				got = checkArgumentsError(t, "Validate", err)
			}
			if (got == nil) != (first == nil) || (got != nil && !sameError(got, first)) {
				t.Fatalf("schema %s args %s: Validate = %v, ValidateJSON = %v", schema, args, got, first)
			}
			valueList := checkErrorList(t, "ValidateAll", s.ValidateAll(form), got)
			if len(valueList) != len(jsonList) {
				t.Fatalf("schema %s args %s: ValidateAll listed %d errors, ValidateJSONAll %d", schema, args, len(valueList), len(jsonList))
			}
			for i := range valueList {
				if !sameError(valueList[i], jsonList[i]) {
					t.Fatalf("schema %s args %s: error %d: ValidateAll %#v, ValidateJSONAll %#v", schema, args, i, valueList[i], jsonList[i])
				}
			}
			if !reflect.DeepEqual(form, before) {
				t.Fatalf("Validate modified the arguments: %#v, was %#v", form, before)
			}
		}
	})
}

// deepCopy copies a decoded value tree.
func deepCopy(v any) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	}
	return v
}

// The seeds only reach the validator if the tool schemas compile, and only
// exercise the compiler's error paths if the others do not (D4-D10).
func TestFuzzSeedSchemas(t *testing.T) {
	for _, s := range toolSchemas {
		if _, err := inputschema.Compile([]byte(s), nil); err != nil {
			t.Errorf("tool schema refused: %v\n%s", err, s)
		}
	}
	for _, s := range unsupportedSchemas {
		if _, err := inputschema.Compile([]byte(s), nil); err == nil {
			t.Errorf("schema outside the subset accepted: %s", s)
		}
	}
}
