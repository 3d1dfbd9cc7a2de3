package inputschema_test

// Decision-by-decision tests of the validator contract: one table per
// decision D1-D18 of docs/inputschema-spec.md, every expectation derived by
// hand from the text of the spec (the decision is named in each case), never
// from running the code. Where the spec leaves a detail open (a message text,
// whether a pointer names a schema object or its keyword) the case accepts
// each reading the text allows; see specWant.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// specAny marks a string field of specWant as not checked; a field holding
// "a|b" accepts either alternative (no pointer used here contains '|').
const specAny = "*"

// specWant is one expected error.
type specWant struct {
	class   inputschema.Class
	stage   inputschema.Stage
	path    string
	pointer string
	schema  string // the schema pointer
	keyword string
	// details: each key must be present with this value; values are compared
	// by specDetailMatches (numbers exactly, lists and counts leniently).
	details map[string]any
	message string // a substring the message must hold; "" is not checked
}

// specArgErr is an argument-stage validation error.
func specArgErr(path, pointer, schemaPointer, keyword string, details ...any) *specWant {
	return &specWant{class: inputschema.ClassValidation, stage: inputschema.StageArguments,
		path: path, pointer: pointer, schema: schemaPointer, keyword: keyword, details: specKV(details)}
}

// specSchemaErr is a schema-stage error (the preflight); the instance path is
// always empty there.
func specSchemaErr(class inputschema.Class, schemaPointer, keyword string, details ...any) *specWant {
	return &specWant{class: class, stage: inputschema.StageSchema, path: "", pointer: specAny,
		schema: schemaPointer, keyword: keyword, details: specKV(details)}
}

// specDecodeErr is a strict-JSON failure of argument bytes (D3): validation
// at stage arguments, with no schema keyword involved.
func specDecodeErr() *specWant {
	return &specWant{class: inputschema.ClassValidation, stage: inputschema.StageArguments,
		path: specAny, pointer: specAny, schema: "", keyword: ""}
}

func (w *specWant) withMessage(s string) *specWant { w.message = s; return w }

func specKV(kv []any) map[string]any {
	if len(kv)%2 != 0 {
		panic("specKV: odd number of arguments")
	}
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func specFieldMatches(got, want string) bool {
	if want == specAny {
		return true
	}
	return slices.Contains(strings.Split(want, "|"), got)
}

// specNumber reads a number in any form a detail may take.
func specNumber(v any) (*big.Rat, bool) {
	switch n := v.(type) {
	case float64:
		if math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, false
		}
		return new(big.Rat).SetFloat64(n), true
	case float32:
		return specNumber(float64(n))
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return new(big.Rat).SetString(fmt.Sprint(n))
	}
	return new(big.Rat).SetString(fmt.Sprint(v)) // json.Number, literal text, ...
}

func specStrings(v any) ([]string, bool) {
	switch l := v.(type) {
	case []string:
		return l, true
	case []any:
		out := make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out[i] = s
		}
		return out, true
	}
	return nil, false
}

// specDetailMatches compares one detail. "minimum" is compared as an exact
// number (the spec does not fix its Go type); "keywords" as a list of names;
// "matches" as a count, or a list of that many branch indices.
func specDetailMatches(key string, got, want any) bool {
	switch key {
	case "minimum":
		g, ok1 := specNumber(got)
		w, ok2 := specNumber(want)
		return ok1 && ok2 && g.Cmp(w) == 0
	case "keywords":
		g, ok := specStrings(got)
		return ok && slices.Equal(g, want.([]string))
	case "matches":
		if n, ok := specNumber(got); ok {
			return n.Cmp(big.NewRat(int64(want.(int)), 1)) == 0
		}
		if rv := reflect.ValueOf(got); rv.Kind() == reflect.Slice {
			return rv.Len() == want.(int)
		}
		return false
	}
	g, ok := got.(string)
	return ok && g == want
}

// specInvariants holds for every error the package returns (D17): a known
// class and stage, a message, non-nil details, no instance path at the
// schema stage, well-formed pointers; and no unsupported_capability at the
// arguments stage, since the preflight checked the whole schema.
func specInvariants(t *testing.T, label string, e *inputschema.Error) {
	t.Helper()
	if e == nil {
		t.Errorf("%s: nil *Error", label)
		return
	}
	if e.Class != inputschema.ClassValidation && e.Class != inputschema.ClassUnsupported {
		t.Errorf("%s: class %q", label, e.Class)
	}
	if e.Stage != inputschema.StageSchema && e.Stage != inputschema.StageArguments {
		t.Errorf("%s: stage %q (D17: every error says its stage)", label, e.Stage)
	}
	if e.Message == "" {
		t.Errorf("%s: empty message", label)
	}
	if e.Details == nil {
		t.Errorf("%s: nil details", label)
	}
	if e.Stage == inputschema.StageSchema && e.Path != "" {
		t.Errorf("%s: path %q at the schema stage", label, e.Path)
	}
	if e.Stage == inputschema.StageArguments && e.Class != inputschema.ClassValidation {
		t.Errorf("%s: class %q at the arguments stage", label, e.Class)
	}
	if e.Path != "" && !strings.HasPrefix(e.Path, "$arguments") {
		t.Errorf("%s: path %q does not start with $arguments", label, e.Path)
	}
	for _, p := range []string{e.Pointer, e.SchemaPointer} {
		if p != "" && p[0] != '/' {
			t.Errorf("%s: malformed pointer %q", label, p)
		}
	}
}

// specCheck checks err against want (nil: no error expected) and returns
// the *Error, if any.
func specCheck(t *testing.T, label string, err error, want *specWant) *inputschema.Error {
	t.Helper()
	if err == nil {
		if want != nil {
			t.Errorf("%s: no error, want %s", label, specDescribe(want))
		}
		return nil
	}
	e, ok := err.(*inputschema.Error)
	if !ok {
		t.Errorf("%s: error of type %T, want *inputschema.Error: %v", label, err, err)
		return nil
	}
	specInvariants(t, label, e)
	if want == nil {
		t.Errorf("%s: unexpected error %s", label, specFormat(e))
		return e
	}
	var bad []string
	if e.Class != want.class {
		bad = append(bad, "class")
	}
	if e.Stage != want.stage {
		bad = append(bad, "stage")
	}
	if !specFieldMatches(e.Path, want.path) {
		bad = append(bad, "path")
	}
	if !specFieldMatches(e.Pointer, want.pointer) {
		bad = append(bad, "pointer")
	}
	if !specFieldMatches(e.SchemaPointer, want.schema) {
		bad = append(bad, "schema_pointer")
	}
	if !specFieldMatches(e.Keyword, want.keyword) {
		bad = append(bad, "keyword")
	}
	for k, v := range want.details {
		got, ok := e.Details[k]
		if !ok || !specDetailMatches(k, got, v) {
			bad = append(bad, "details."+k)
		}
	}
	if want.message != "" && !strings.Contains(e.Message, want.message) {
		bad = append(bad, "message")
	}
	if len(bad) > 0 {
		t.Errorf("%s: wrong %s:\n got  %s\n want %s", label, strings.Join(bad, ", "), specFormat(e), specDescribe(want))
	}
	return e
}

func specFormat(e *inputschema.Error) string {
	return fmt.Sprintf("{class:%s stage:%s path:%q pointer:%q schema_pointer:%q keyword:%q details:%v message:%q}",
		e.Class, e.Stage, e.Path, e.Pointer, e.SchemaPointer, e.Keyword, e.Details, e.Message)
}

func specDescribe(w *specWant) string {
	return fmt.Sprintf("{class:%s stage:%s path:%q pointer:%q schema_pointer:%q keyword:%q details:%v message~%q}",
		w.class, w.stage, w.path, w.pointer, w.schema, w.keyword, w.details, w.message)
}

// specDecodeNumber decodes JSON as encoding/json does with UseNumber.
func specDecodeNumber(data string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

// specDecodeFloat decodes JSON as encoding/json does by default.
func specDecodeFloat(data string) (any, error) {
	var v any
	err := json.Unmarshal([]byte(data), &v)
	return v, err
}

// specSchemaCase is one schema for the preflight.
type specSchemaCase struct {
	name   string
	schema string
	// bytesOnly: the case is about the JSON text itself (D3), so it is not
	// repeated through CompileValue on the encoding/json decoding.
	bytesOnly bool
	opts      *inputschema.CompileOptions
	want      *specWant // nil: the schema compiles
}

// specRunSchemaCases compiles each schema with Compile and, unless the case
// is about JSON text, with CompileValue on the same schema decoded by
// encoding/json (D1: both forms have one contract), and requires both to
// give the expected outcome and the same error.
func specRunSchemaCases(t *testing.T, cases []specSchemaCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer specRecover(t)
			s, err := inputschema.Compile([]byte(c.schema), c.opts)
			e1 := specCheck(t, "Compile", err, c.want)
			if c.want == nil && s == nil && err == nil {
				t.Error("Compile returned neither a schema nor an error")
			}
			if c.bytesOnly {
				return
			}
			v, derr := specDecodeNumber(c.schema)
			if derr != nil {
				t.Fatalf("test bug: schema is not decodable by encoding/json: %v", derr)
			}
			s2, err2 := inputschema.CompileValue(v, c.opts)
			e2 := specCheck(t, "CompileValue", err2, c.want)
			if c.want == nil && s2 == nil && err2 == nil {
				t.Error("CompileValue returned neither a schema nor an error")
			}
			if e1 != nil && e2 != nil && !reflect.DeepEqual(e1, e2) {
				t.Errorf("Compile and CompileValue disagree:\n bytes %s\n value %s", specFormat(e1), specFormat(e2))
			}
		})
	}
}

// specRecover turns a panic in the code under test into a failure of the
// current case, so one crash does not hide the verdicts of all the others.
func specRecover(t *testing.T) {
	t.Helper()
	if r := recover(); r != nil {
		t.Errorf("panic: %v", r)
	}
}

// specArgCase is one call's arguments against one schema.
type specArgCase struct {
	name   string
	schema string
	args   string
	// bytesOnly: the arguments are not strict JSON (D3) or their meaning
	// changes through encoding/json, so only ValidateJSON is exercised.
	bytesOnly bool
	// floatLossy: encoding/json's float64 decoding changes the value (for
	// example 0.99999999999999999999 becomes 1), so that form is skipped.
	floatLossy bool
	opts       *inputschema.CompileOptions
	want       *specWant   // nil: valid
	all        []*specWant // when set, the whole list ValidateJSONAll must return
}

// specRunArgCases validates each case's arguments through ValidateJSON, and
// (unless bytesOnly) through Validate on the encoding/json decoding with
// UseNumber and, unless floatLossy, with float64 numbers: all must agree
// exactly. The all-errors forms must agree too and start with that error.
func specRunArgCases(t *testing.T, cases []specArgCase) {
	t.Helper()
	compiled := map[string]*inputschema.Schema{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer specRecover(t)
			key := fmt.Sprintf("%s|%v", c.schema, c.opts)
			s := compiled[key]
			if s == nil {
				var err error
				if s, err = inputschema.Compile([]byte(c.schema), c.opts); err != nil {
					t.Fatalf("test bug: schema does not compile: %v", err)
				}
				compiled[key] = s
			}
			specValidateAllForms(t, s, c)
		})
	}
}

func specValidateAllForms(t *testing.T, s *inputschema.Schema, c specArgCase) {
	t.Helper()
	first := specCheck(t, "ValidateJSON", s.ValidateJSON([]byte(c.args)), c.want)
	list := specCheckList(t, "ValidateJSONAll", s.ValidateJSONAll([]byte(c.args)), first, c.want != nil)
	if c.all != nil && list != nil {
		specCheckListEntries(t, "ValidateJSONAll", list, c.all)
	}
	// The gateway's form: one parse under the schema's limits, then the
	// parsed document validated; the same errors as from the bytes.
	opts := s.ArgumentLimits()
	var parser jsonstrict.Parser
	if doc, perr := parser.Parse([]byte(c.args), &opts); perr == nil {
		if got, want := s.ValidateDocAll(doc), s.ValidateJSONAll([]byte(c.args)); !reflect.DeepEqual(got, want) {
			t.Errorf("ValidateDocAll differs from ValidateJSONAll:\n doc   %v\n bytes %v", got, want)
		}
	} else if s.ValidateJSONAll([]byte(c.args)) == nil {
		t.Errorf("the arguments do not parse under ArgumentLimits (%v), yet ValidateJSONAll accepts them", perr)
	}
	if c.bytesOnly {
		return
	}
	forms := []struct {
		name   string
		decode func(string) (any, error)
	}{{"UseNumber", specDecodeNumber}, {"float64", specDecodeFloat}}
	for _, f := range forms {
		if f.name == "float64" && c.floatLossy {
			continue
		}
		v, err := f.decode(c.args)
		if err != nil {
			if f.name == "float64" {
				continue // for example 1e400: out of float64's range
			}
			t.Fatalf("test bug: %s decoding failed: %v (mark the case bytesOnly)", f.name, err)
		}
		// With float64 numbers the literal text is gone (9.99e2 arrives as
		// 999), so a detail echoing the argument's value may be written
		// differently; it must still be the same number.
		same := specSameError
		if f.name == "float64" {
			same = specSameErrorButActualText
		}
		got := specCheck(t, "Validate/"+f.name, s.Validate(v), c.want)
		if !same(got, first) {
			t.Errorf("Validate/%s differs from ValidateJSON:\n value %v\n bytes %v", f.name, specFormatOrNil(got), specFormatOrNil(first))
		}
		l := specCheckList(t, "ValidateAll/"+f.name, s.ValidateAll(v), nil, c.want != nil)
		if (l == nil) != (list == nil) || l != nil && (len(l.Errors) != len(list.Errors) || l.Truncated != list.Truncated) {
			t.Errorf("ValidateAll/%s differs from ValidateJSONAll: %v / %v", f.name, l, list)
		} else if l != nil {
			for i := range l.Errors {
				if !same(l.Errors[i], list.Errors[i]) {
					t.Errorf("ValidateAll/%s[%d] differs from ValidateJSONAll:\n value %v\n bytes %v", f.name, i, specFormat(l.Errors[i]), specFormat(list.Errors[i]))
				}
			}
		}
	}
}

func specSameError(a, b *inputschema.Error) bool { return reflect.DeepEqual(a, b) }

// specSameErrorButActualText is specSameError except that details.actual,
// when numeric on both sides, need only be the same float64.
func specSameErrorButActualText(a, b *inputschema.Error) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	ax, okx := x.Details["actual"]
	ay, oky := y.Details["actual"]
	if okx && oky {
		fx, err1 := strconv.ParseFloat(fmt.Sprint(ax), 64)
		fy, err2 := strconv.ParseFloat(fmt.Sprint(ay), 64)
		if err1 == nil && err2 == nil && fx == fy {
			x.Details = maps.Clone(x.Details)
			y.Details = maps.Clone(y.Details)
			delete(x.Details, "actual")
			delete(y.Details, "actual")
		}
	}
	return reflect.DeepEqual(&x, &y)
}

func specFormatOrNil(e *inputschema.Error) string {
	if e == nil {
		return "<nil>"
	}
	return specFormat(e)
}

// specCheckList checks an all-errors result: nil when valid, else an
// *ErrorList whose first entry is the single-error result.
func specCheckList(t *testing.T, label string, err error, first *inputschema.Error, wantErr bool) *inputschema.ErrorList {
	t.Helper()
	if err == nil {
		if wantErr {
			t.Errorf("%s: nil, want an *ErrorList", label)
		}
		return nil
	}
	l, ok := err.(*inputschema.ErrorList)
	if !ok {
		t.Errorf("%s: error of type %T, want *inputschema.ErrorList", label, err)
		return nil
	}
	if len(l.Errors) == 0 {
		t.Errorf("%s: empty list", label)
		return l
	}
	for i, e := range l.Errors {
		specInvariants(t, fmt.Sprintf("%s[%d]", label, i), e)
	}
	if first != nil && !reflect.DeepEqual(l.Errors[0], first) {
		t.Errorf("%s: first entry %s differs from the single error %s", label, specFormat(l.Errors[0]), specFormat(first))
	}
	return l
}

func specCheckListEntries(t *testing.T, label string, l *inputschema.ErrorList, want []*specWant) {
	t.Helper()
	if len(l.Errors) != len(want) {
		var got []string
		for _, e := range l.Errors {
			got = append(got, specFormat(e))
		}
		t.Errorf("%s: %d errors, want %d:\n %s", label, len(l.Errors), len(want), strings.Join(got, "\n "))
		return
	}
	for i, w := range want {
		specCheck(t, fmt.Sprintf("%s[%d]", label, i), l.Errors[i], w)
	}
}

// specCompileValue compiles a Go schema value or fails the test.
func specMustCompileValue(t *testing.T, v any, opts *inputschema.CompileOptions) *inputschema.Schema {
	t.Helper()
	s, err := inputschema.CompileValue(v, opts)
	if err != nil {
		t.Fatalf("CompileValue: %v", err)
	}
	return s
}

func specMustCompile(t *testing.T, schema string) *inputschema.Schema {
	t.Helper()
	s, err := inputschema.Compile([]byte(schema), nil)
	if err != nil {
		t.Fatalf("Compile(%s): %v", schema, err)
	}
	return s
}

const (
	vld = inputschema.ClassValidation
	uns = inputschema.ClassUnsupported
)

// ---------------------------------------------------------------- D1

func TestD1SchemaForms(t *testing.T) {
	// The same schema written with each Go form D1 lists.
	goSchema := map[string]any{
		"type":        "object",
		"description": "host-authored",
		"properties": map[string]any{
			"n":    map[string]any{"type": "integer", "minimum": 1},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			"opt":  map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "boolean"}}},
		},
		"required":             []string{"n"},
		"additionalProperties": false,
	}
	s := specMustCompileValue(t, goSchema, nil)
	valid := map[string]any{"n": 2, "tags": []any{"a"}, "opt": true}
	specCheck(t, "D1 Go-value schema, valid args", s.Validate(valid), nil)
	specCheck(t, "D1 []string required", s.Validate(map[string]any{}),
		specArgErr("$arguments", "", "/required", "required", "property", "n"))
	specCheck(t, "D1 Go int minimum", s.Validate(map[string]any{"n": 0}),
		specArgErr("$arguments.n", "/n", "/properties/n/minimum", "minimum", "minimum", "1"))
	specCheck(t, "D1 additionalProperties false", s.Validate(map[string]any{"n": 1, "x": 1}),
		specArgErr("$arguments.x", "/x", "/additionalProperties", "additionalProperties", "property", "x"))

	t.Run("D1 value is not retained", func(t *testing.T) {
		schema := map[string]any{"type": "object", "properties": map[string]any{
			"n": map[string]any{"type": "integer", "minimum": 1}}}
		s := specMustCompileValue(t, schema, nil)
		schema["properties"].(map[string]any)["n"].(map[string]any)["minimum"] = 100
		schema["additionalProperties"] = false
		specCheck(t, "after mutating the source", s.Validate(map[string]any{"n": 5, "x": 1}), nil)
	})

	// Every Go number type for minimum (and json.Number), each meaning 1.
	minimums := map[string]any{
		"int": int(1), "int8": int8(1), "int16": int16(1), "int32": int32(1), "int64": int64(1),
		"uint": uint(1), "uint8": uint8(1), "uint16": uint16(1), "uint32": uint32(1), "uint64": uint64(1),
		"float32": float32(1), "float64": float64(1), "json.Number": json.Number("1"), "json.Number 1.0": json.Number("1.0"),
	}
	for name, m := range minimums {
		t.Run("D1 minimum as "+name, func(t *testing.T) {
			s := specMustCompileValue(t, map[string]any{"type": "object", "properties": map[string]any{
				"n": map[string]any{"type": "number", "minimum": m}}}, nil)
			specCheck(t, "1 >= minimum", s.ValidateJSON([]byte(`{"n":1}`)), nil)
			specCheck(t, "0.5 < minimum", s.ValidateJSON([]byte(`{"n":0.5}`)),
				specArgErr("$arguments.n", "/n", "/properties/n/minimum", "minimum", "minimum", "1"))
		})
	}
	t.Run("D1 minimum as float64 fraction and negative int", func(t *testing.T) {
		s := specMustCompileValue(t, map[string]any{"type": "object", "properties": map[string]any{
			"f": map[string]any{"type": "number", "minimum": 0.5},
			"i": map[string]any{"type": "integer", "minimum": -3}}}, nil)
		specCheck(t, "0.5 ok", s.ValidateJSON([]byte(`{"f":0.5,"i":-3}`)), nil)
		specCheck(t, "0.25 refused", s.ValidateJSON([]byte(`{"f":0.25}`)),
			specArgErr("$arguments.f", "/f", "/properties/f/minimum", "minimum", "minimum", "0.5"))
		specCheck(t, "-4 refused", s.ValidateJSON([]byte(`{"i":-4}`)),
			specArgErr("$arguments.i", "/i", "/properties/i/minimum", "minimum", "minimum", "-3"))
	})

	// Go values that are not JSON numbers are not a valid minimum (D9: a
	// JSON number, else validation). NaN and infinities: the spec's "JSON
	// number" cannot hold them, so this is the reading applied here.
	bad := map[string]any{"string": "1", "NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1), "nil": nil, "bool": true}
	for name, m := range bad {
		t.Run("D1/D9 minimum as "+name, func(t *testing.T) {
			_, err := inputschema.CompileValue(map[string]any{"type": "object", "properties": map[string]any{
				"n": map[string]any{"type": "number", "minimum": m}}}, nil)
			specCheck(t, "CompileValue", err, specSchemaErr(vld, "/properties/n/minimum", "minimum"))
		})
	}

	specRunSchemaCases(t, []specSchemaCase{
		{name: "D1 alias additional_properties accepted", schema: `{"type":"object","additional_properties":false}`},
		{name: "D1 alias nested", schema: `{"type":"object","properties":{"o":{"type":"object","additional_properties":true}}}`},
		{name: "D1 both spellings at root (validation)", schema: `{"type":"object","additionalProperties":false,"additional_properties":false}`,
			want: specSchemaErr(vld, specAny, specAny)},
		{name: "D1 both spellings, different values (validation)", schema: `{"type":"object","additionalProperties":true,"additional_properties":false}`,
			want: specSchemaErr(vld, specAny, specAny)},
		{name: "D1 both spellings nested (validation)", schema: `{"type":"object","properties":{"o":{"type":"object","additionalProperties":false,"additional_properties":false}}}`,
			want: specSchemaErr(vld, specAny, specAny)},
		{name: "D1 alias with a malformed value (D9 validation)", schema: `{"type":"object","additional_properties":"no"}`,
			want: specSchemaErr(vld, "/additional_properties", "additional_properties|additionalProperties")},
		{name: "D1 alias with a schema value (D9 unsupported)", schema: `{"type":"object","additional_properties":{}}`,
			want: specSchemaErr(uns, "/additional_properties", "additional_properties|additionalProperties")},
	})

	// The alias means additionalProperties: unknown members fail, with the
	// member in the details. The spec does not say which spelling the
	// keyword field names, so both are accepted.
	specRunArgCases(t, []specArgCase{
		{name: "D1 alias false refuses unknown members", schema: `{"type":"object","properties":{"a":{"type":"string"}},"additional_properties":false}`,
			args: `{"a":"x","b":1}`,
			want: specArgErr("$arguments.b", "/b", "/additional_properties|/additionalProperties", "additional_properties|additionalProperties", "property", "b")},
		{name: "D1 alias true allows unknown members", schema: `{"type":"object","properties":{"a":{"type":"string"}},"additional_properties":true}`,
			args: `{"a":"x","b":1}`},
		{name: "D1 alias in a nested object", schema: `{"type":"object","properties":{"o":{"type":"object","additional_properties":false}}}`,
			args: `{"o":{"k":1}}`,
			want: specArgErr("$arguments.o.k", "/o/k", "/properties/o/additional_properties|/properties/o/additionalProperties", specAny, "property", "k")},
	})
}

// ---------------------------------------------------------------- D2

func TestD2ArgumentsMustBeObject(t *testing.T) {
	notObject := specArgErr("$arguments", "", specAny, specAny, "type", "object")
	for _, schema := range []string{`{}`, `{"type":"object"}`, readSchemaForDecisions} {
		var cases []specArgCase
		for _, args := range []string{`[]`, `"x"`, `5`, `null`, `true`, `[{}]`, `1.5`, `""`} {
			cases = append(cases, specArgCase{name: "D2 " + args + " against " + schema, schema: schema, args: args, want: notObject})
		}
		cases = append(cases, specArgCase{name: "D2 {} against " + schema, schema: schema, args: `{"path":"p"}`})
		specRunArgCases(t, cases)
	}
	s := specMustCompile(t, `{}`)
	for name, v := range map[string]any{"nil": nil, "[]any": []any{}, "string": "x", "float64": 5.0, "int": 5,
		"json.Number": json.Number("5"), "bool": true} {
		specCheck(t, "D2 Validate("+name+")", s.Validate(v), notObject)
		if err := s.ValidateAll(v); err == nil {
			t.Errorf("D2 ValidateAll(%s): nil", name)
		}
	}
}

// readSchemaForDecisions is the read tool's schema as the brief defines it,
// written out here so the decision tests do not depend on the fixtures.
const readSchemaForDecisions = `{"type":"object","properties":{"path":{"type":"string"},
"offset":{"type":"integer","minimum":1},"limit":{"type":"integer","minimum":1}},
"required":["path"],"additionalProperties":false}`

// ---------------------------------------------------------------- D3

// specDeepSchema returns a valid schema whose JSON nesting depth is depth
// (>= 3): an object root holding properties.a, then a chain of array schemas
// ending in a string schema.
func specDeepSchema(depth int) string {
	k := depth - 2 // schema objects from depth 3 to depth
	return `{"type":"object","properties":{"a":` +
		strings.Repeat(`{"type":"array","items":`, k-1) + `{"type":"string"}` + strings.Repeat("}", k-1) + `}}`
}

// specDeepArgs returns an object of JSON nesting depth depth (>= 2): member a
// holding depth-1 nested arrays.
func specDeepArgs(depth int) string {
	return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

func TestD3StrictJSONSchema(t *testing.T) {
	decodeErr := func() *specWant { return specSchemaErr(vld, specAny, specAny) }
	small := `{"type":"object"}`
	specRunSchemaCases(t, []specSchemaCase{
		{name: "D3 duplicate member", schema: `{"type":"object","type":"object"}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 duplicate after unescaping", schema: `{"type":"object","properties":{"a":{"type":"string"},"\u0061":{"type":"string"}}}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 duplicate keyword after unescaping", schema: `{"type":"object","t\u0079pe":"object"}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 invalid UTF-8", schema: "{\"type\":\"object\",\"description\":\"\xff\"}", bytesOnly: true, want: decodeErr()},
		{name: "D3 invalid UTF-8 in a name", schema: "{\"type\":\"object\",\"properties\":{\"\xc3\":{\"type\":\"string\"}}}", bytesOnly: true, want: decodeErr()},
		{name: "D3 lone high surrogate", schema: `{"type":"object","description":"\ud800"}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 lone low surrogate", schema: `{"type":"object","description":"\udc00x"}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 high surrogate then non-surrogate", schema: `{"type":"object","description":"\ud800\u0041"}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 surrogate pair is fine", schema: `{"type":"object","description":"\ud83d\ude00"}`},
		{name: "D3 trailing value", schema: `{"type":"object"}{}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 trailing garbage", schema: `{"type":"object"} x`, bytesOnly: true, want: decodeErr()},
		{name: "D3 trailing comma", schema: `{"type":"object"},`, bytesOnly: true, want: decodeErr()},
		{name: "D3 trailing whitespace is fine", schema: "{\"type\":\"object\"} \n\t\r"},
		{name: "D3 syntax: trailing comma in object", schema: `{"type":"object",}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 syntax: single quotes", schema: `{'type':'object'}`, bytesOnly: true, want: decodeErr()},
		{name: "D3 syntax: truncated", schema: `{"type":"object"`, bytesOnly: true, want: decodeErr()},
		{name: "D3 depth 128 accepted (default)", schema: specDeepSchema(128)},
		{name: "D3 depth 129 refused (default)", schema: specDeepSchema(129), bytesOnly: true, want: decodeErr()},
		{name: "D3 depth 4 accepted with MaxDepth 4", schema: specDeepSchema(4), opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxDepth: 4}}},
		{name: "D3 depth 5 refused with MaxDepth 4", schema: specDeepSchema(5), bytesOnly: true, opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxDepth: 4}}, want: decodeErr()},
		{name: "D3 size at MaxSchemaBytes accepted", schema: small, bytesOnly: true, opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxSchemaBytes: len(small)}}},
		{name: "D3 size over MaxSchemaBytes refused", schema: small, bytesOnly: true, opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxSchemaBytes: len(small) - 1}}, want: decodeErr()},
		{name: "D3 MaxArgumentBytes does not bound the schema", schema: small, bytesOnly: true, opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxArgumentBytes: 2}}},
	})

	// The limit is in bytes, not characters: a description of multi-byte
	// characters counts each byte.
	t.Run("D3 schema size counts bytes", func(t *testing.T) {
		schema := `{"type":"object","description":"ééé"}`
		limit := len(schema) - 1 // len counts bytes; 3 fewer characters than bytes
		_, err := inputschema.Compile([]byte(schema), &inputschema.CompileOptions{Limits: inputschema.Limits{MaxSchemaBytes: limit}})
		specCheck(t, "Compile", err, decodeErr())
	})

	// Numbers in the schema are exact: a minimum just above 1 that float64
	// would round to 1 must still refuse 1.
	specRunArgCases(t, []specArgCase{
		{name: "D3 schema minimum kept exact", schema: `{"type":"object","properties":{"n":{"type":"number","minimum":1.0000000000000000000001}}}`,
			args: `{"n":1}`, want: specArgErr("$arguments.n", "/n", "/properties/n/minimum", "minimum", "minimum", "1.0000000000000000000001")},
	})
}

func TestD3StrictJSONArguments(t *testing.T) {
	open := `{}`
	dec := specDecodeErr
	maxDepth3 := &inputschema.CompileOptions{Limits: inputschema.Limits{MaxDepth: 3}}
	args := `{"path":"a"}`
	specRunArgCases(t, []specArgCase{
		{name: "D3 duplicate member", schema: open, args: `{"a":1,"a":1}`, bytesOnly: true, want: dec()},
		{name: "D3 duplicate after unescaping", schema: open, args: `{"a":1,"\u0061":2}`, bytesOnly: true, want: dec()},
		{name: "D3 duplicate after unescaping, escaped first", schema: open, args: `{"\u0061":1,"a":2}`, bytesOnly: true, want: dec()},
		{name: "D3 duplicate in a nested object", schema: open, args: `{"a":{"b":1,"b":1}}`, bytesOnly: true, want: dec()},
		{name: "D3 duplicate in an object inside an array", schema: open, args: `{"a":[{"b":1},{"c":1,"c":2}]}`, bytesOnly: true, want: dec()},
		{name: "D3 same name in sibling objects is fine", schema: open, args: `{"a":{"b":1},"c":{"b":1}}`},
		{name: "D3 duplicate reported, not the schema violation", schema: readSchemaForDecisions, args: `{"x":1,"x":2}`, bytesOnly: true, want: dec()},
		{name: "D3 duplicate of a valid member", schema: readSchemaForDecisions, args: `{"path":"a","path":"b"}`, bytesOnly: true, want: dec()},
		{name: "D3 invalid UTF-8 in a value", schema: open, args: "{\"a\":\"\xff\"}", bytesOnly: true, want: dec()},
		{name: "D3 invalid UTF-8 in a name", schema: open, args: "{\"\xff\":1}", bytesOnly: true, want: dec()},
		{name: "D3 truncated UTF-8 sequence", schema: open, args: "{\"a\":\"\xc3\"}", bytesOnly: true, want: dec()},
		{name: "D3 overlong UTF-8", schema: open, args: "{\"a\":\"\xc0\xaf\"}", bytesOnly: true, want: dec()},
		{name: "D3 UTF-8-encoded surrogate", schema: open, args: "{\"a\":\"\xed\xa0\x80\"}", bytesOnly: true, want: dec()},
		{name: "D3 valid multi-byte UTF-8 is fine", schema: open, args: `{"é":"ｚ😀"}`},
		{name: "D3 lone high surrogate", schema: open, args: `{"a":"\ud800"}`, bytesOnly: true, want: dec()},
		{name: "D3 lone low surrogate", schema: open, args: `{"a":"\udfff"}`, bytesOnly: true, want: dec()},
		{name: "D3 lone surrogate in a name", schema: open, args: `{"\ud800":1}`, bytesOnly: true, want: dec()},
		{name: "D3 reversed surrogate pair", schema: open, args: `{"a":"\ude00\ud83d"}`, bytesOnly: true, want: dec()},
		{name: "D3 surrogate pair is fine", schema: open, args: `{"a":"\ud83d\ude00"}`},
		{name: "D3 trailing object", schema: open, args: `{} {}`, bytesOnly: true, want: dec()},
		{name: "D3 trailing garbage", schema: open, args: `{}x`, bytesOnly: true, want: dec()},
		{name: "D3 trailing bracket", schema: open, args: `{}]`, bytesOnly: true, want: dec()},
		{name: "D3 trailing whitespace is fine", schema: open, args: "{} \n"},
		{name: "D3 syntax: leading zero", schema: open, args: `{"a":01}`, bytesOnly: true, want: dec()},
		{name: "D3 syntax: NaN", schema: open, args: `{"a":NaN}`, bytesOnly: true, want: dec()},
		{name: "D3 syntax: empty input", schema: open, args: ``, bytesOnly: true, want: dec()},
		{name: "D3 syntax: unterminated", schema: open, args: `{"a":1`, bytesOnly: true, want: dec()},
		{name: "D3 depth 128 accepted (default)", schema: open, args: specDeepArgs(128)},
		{name: "D3 depth 129 refused (default)", schema: open, args: specDeepArgs(129), bytesOnly: true, want: dec()},
		{name: "D3 depth 3 accepted with MaxDepth 3", schema: open, args: specDeepArgs(3), opts: maxDepth3},
		{name: "D3 depth 4 refused with MaxDepth 3", schema: open, args: specDeepArgs(4), bytesOnly: true, opts: maxDepth3, want: dec()},
		{name: "D3 size at MaxArgumentBytes accepted", schema: readSchemaForDecisions, args: args,
			opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxArgumentBytes: len(args)}}},
		{name: "D3 size over MaxArgumentBytes refused", schema: readSchemaForDecisions, args: args, bytesOnly: true,
			opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxArgumentBytes: len(args) - 1}}, want: dec()},
		{name: "D3 MaxSchemaBytes does not bound arguments", schema: `{}`, args: `{"a":"` + strings.Repeat("x", 100) + `"}`,
			opts: &inputschema.CompileOptions{Limits: inputschema.Limits{MaxSchemaBytes: 2}}},
	})
}

// ---------------------------------------------------------------- D4

func TestD4Root(t *testing.T) {
	required := func() *specWant {
		return specSchemaErr(uns, specAny, specAny).withMessage("tool schema is required")
	}
	_, err := inputschema.Compile(nil, nil)
	specCheck(t, "D4 Compile(nil)", err, required())
	_, err = inputschema.CompileValue(nil, nil)
	specCheck(t, "D4 CompileValue(nil)", err, required())

	onlyObject := func() *specWant {
		return specSchemaErr(uns, specAny, specAny).withMessage("only object tool schemas are supported")
	}
	notObject := func() *specWant { return specSchemaErr(vld, specAny, specAny) }
	specRunSchemaCases(t, []specSchemaCase{
		{name: "D4 JSON null", schema: `null`, want: required()},
		{name: "D4 JSON null with whitespace", schema: " null\n", want: required()},
		{name: "D4 root true", schema: `true`, want: notObject()},
		{name: "D4 root false", schema: `false`, want: notObject()},
		{name: "D4 root []", schema: `[]`, want: notObject()},
		{name: "D4 root [{}]", schema: `[{"type":"object"}]`, want: notObject()},
		{name: `D4 root "x"`, schema: `"x"`, want: notObject()},
		{name: `D4 root "object"`, schema: `"object"`, want: notObject()},
		{name: "D4 root 5", schema: `5`, want: notObject()},
		{name: "D4 root type string", schema: `{"type":"string"}`, want: onlyObject()},
		{name: "D4 root type array", schema: `{"type":"array","items":{"type":"string"}}`, want: onlyObject()},
		{name: "D4 root type null", schema: `{"type":"null"}`, want: onlyObject()},
		{name: "D4 root type integer", schema: `{"type":"integer"}`, want: onlyObject()},
		{name: "D4 root type number", schema: `{"type":"number"}`, want: onlyObject()},
		{name: "D4 root type boolean", schema: `{"type":"boolean"}`, want: onlyObject()},
		{name: "D4 root type list (also D7)", schema: `{"type":["object"]}`, want: specSchemaErr(uns, specAny, specAny)},
		{name: "D4 root oneOf", schema: `{"oneOf":[{"type":"object"}]}`, want: onlyObject()},
		{name: "D4 root oneOf with description", schema: `{"description":"d","oneOf":[{"type":"object"},{"type":"object"}]}`, want: onlyObject()},
		{name: "D4 root oneOf beside type object", schema: `{"type":"object","oneOf":[{"type":"object"}]}`, want: specSchemaErr(uns, specAny, specAny)},
		{name: "D4 root {} accepted", schema: `{}`},
		{name: "D4 root without type, with description", schema: `{"description":"d"}`},
		{name: "D4 root without type, with object keywords", schema: `{"properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`},
		{name: "D4 root type object", schema: `{"type":"object"}`},
	})

	// A root without type is an object schema: object keywords apply, and a
	// non-object is refused as for type object.
	specRunArgCases(t, []specArgCase{
		{name: "D4 untyped root: valid", schema: `{"properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`, args: `{"a":"x"}`},
		{name: "D4 untyped root: property type", schema: `{"properties":{"a":{"type":"string"}}}`, args: `{"a":5}`,
			want: specArgErr("$arguments.a", "/a", "/properties/a/type", "type", "type", "string")},
		{name: "D4 untyped root: required", schema: `{"required":["a"]}`, args: `{}`,
			want: specArgErr("$arguments", "", "/required", "required", "property", "a")},
		{name: "D4 untyped root: additionalProperties", schema: `{"additionalProperties":false}`, args: `{"z":1}`,
			want: specArgErr("$arguments.z", "/z", "/additionalProperties", "additionalProperties", "property", "z")},
		{name: "D4 untyped root: array refused", schema: `{}`, args: `[]`,
			want: specArgErr("$arguments", "", specAny, specAny, "type", "object")},
	})
}

// ---------------------------------------------------------------- D5

// specUnsupportedKeywords are the keywords D5 lists by name, plus some more
// 2020-12 keywords and an extension; each with a value valid in JSON Schema.
var specUnsupportedKeywords = map[string]string{
	"$schema": `"https://json-schema.org/draft/2020-12/schema"`, "$id": `"https://example.com/s"`,
	"$ref": `"#"`, "$defs": `{}`, "title": `"t"`, "default": `"d"`, "examples": `["e"]`, "format": `"uri"`,
	"enum": `["a"]`, "const": `"a"`, "anyOf": `[{"type":"string"}]`, "allOf": `[{"type":"string"}]`,
	"not": `{"type":"integer"}`, "pattern": `"^a"`, "minLength": `1`, "maxLength": `2`, "minItems": `1`,
	"maxItems": `2`, "maximum": `3`, "exclusiveMinimum": `0`, "exclusiveMaximum": `9`, "uniqueItems": `true`,
	"nullable": `true`,
	// Not named in D5, covered by "any other key".
	"$comment": `"c"`, "$anchor": `"a"`, "$dynamicRef": `"#a"`, "patternProperties": `{}`, "propertyNames": `{"type":"string"}`,
	"dependentRequired": `{}`, "prefixItems": `[]`, "contains": `{"type":"string"}`, "if": `{}`, "then": `{}`, "else": `{}`,
	"unevaluatedProperties": `false`, "multipleOf": `2`, "readOnly": `true`, "deprecated": `true`, "contentMediaType": `"text/plain"`,
	"x-extension": `1`, "Type": `"string"`, "additionalItems": `false`, "definitions": `{}`,
}

func TestD5UnknownKeywords(t *testing.T) {
	var cases []specSchemaCase
	for kw, value := range specUnsupportedKeywords {
		member := fmt.Sprintf("%q:%s", kw, value)
		escaped := strings.NewReplacer("~", "~0", "/", "~1").Replace(kw)
		positions := []struct{ where, schema, pointer string }{
			{"at the root", `{"type":"object",` + member + `}`, "/" + escaped},
			{"in a property", `{"type":"object","properties":{"a":{"type":"string",` + member + `}}}`, "/properties/a/" + escaped},
			{"in items", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string",` + member + `}}}}`, "/properties/a/items/" + escaped},
			{"in a oneOf branch", `{"type":"object","properties":{"a":{"oneOf":[{"type":"integer"},{"type":"string",` + member + `}]}}}`, "/properties/a/oneOf/1/" + escaped},
			{"in a nested object", `{"type":"object","properties":{"o":{"type":"object","properties":{"b":{"type":"boolean",` + member + `}}}}}`, "/properties/o/properties/b/" + escaped},
			{"in an object oneOf branch inside items", `{"type":"object","properties":{"l":{"type":"array","items":{"oneOf":[{"type":"object",` + member + `}]}}}}`, "/properties/l/items/oneOf/0/" + escaped},
		}
		for _, p := range positions {
			cases = append(cases, specSchemaCase{name: fmt.Sprintf("D5 %s %s", kw, p.where), schema: p.schema,
				want: specSchemaErr(uns, p.pointer, kw)})
		}
	}
	cases = append(cases,
		specSchemaCase{name: "D5 pointer escaping of an unknown keyword", schema: `{"type":"object","x/y~z":1}`,
			want: specSchemaErr(uns, "/x~1y~0z", "x/y~z")},
		specSchemaCase{name: "D5 unknown keyword beside oneOf (D5 or D10, both unsupported)", schema: `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"}],"enum":["a"]}}}`,
			want: specSchemaErr(uns, specAny, specAny)},
		specSchemaCase{name: "D5 property names are not keywords", schema: `{"type":"object","properties":{
			"$ref":{"type":"string"},"enum":{"type":"integer"},"type":{"type":"string"},"properties":{"type":"object"},
			"required":{"type":"boolean"},"oneOf":{"type":"number"},"minimum":{"type":"integer","minimum":0},"pattern":{"type":"string"}},
			"required":["$ref","enum"],"additionalProperties":false}`},
		specSchemaCase{name: "D5 property names inside a nested object are not keywords", schema: `{"type":"object","properties":{"o":{"type":"object","properties":{"$schema":{"type":"string"},"const":{"type":"string"}}}}}`},
	)
	specRunSchemaCases(t, cases)

	const keywordNames = `{"type":"object","properties":{"$ref":{"type":"string"},"enum":{"type":"integer"},"type":{"type":"string"}},"required":["$ref","enum"],"additionalProperties":false}`
	specRunArgCases(t, []specArgCase{
		{name: "D5 members named like keywords validate", schema: keywordNames, args: `{"$ref":"x","enum":5,"type":"t"}`},
		{name: "D5 member named $ref checked by its schema", schema: keywordNames, args: `{"$ref":5,"enum":5}`,
			want: specArgErr(`$arguments["$ref"]|$arguments.$ref`, "/$ref", "/properties/$ref/type", "type", "type", "string")},
		{name: "D5 member named enum required", schema: keywordNames, args: `{"$ref":"x"}`,
			want: specArgErr("$arguments", "", "/required", "required", "property", "enum")},
	})
}

// ---------------------------------------------------------------- D6

func TestD6NestedSchemas(t *testing.T) {
	prop := func(v string) string { return `{"type":"object","properties":{"a":` + v + `}}` }
	items := func(v string) string { return prop(`{"type":"array","items":` + v + `}`) }
	branch := func(v string) string { return prop(`{"oneOf":[{"type":"string"},` + v + `]}`) }
	var cases []specSchemaCase
	for _, b := range []string{"true", "false"} {
		cases = append(cases,
			specSchemaCase{name: "D6 boolean property schema " + b, schema: prop(b), want: specSchemaErr(uns, "/properties/a", specAny)},
			specSchemaCase{name: "D6 boolean items " + b, schema: items(b), want: specSchemaErr(uns, "/properties/a/items", specAny)},
			specSchemaCase{name: "D6 boolean oneOf branch " + b, schema: branch(b), want: specSchemaErr(uns, "/properties/a/oneOf/1", specAny)},
		)
	}
	for _, v := range []string{`5`, `"string"`, `null`, `1.5`} {
		cases = append(cases,
			specSchemaCase{name: "D6 property schema " + v, schema: prop(v), want: specSchemaErr(vld, "/properties/a", specAny)},
			specSchemaCase{name: "D6 items " + v, schema: items(v), want: specSchemaErr(vld, "/properties/a/items", "items|")},
			specSchemaCase{name: "D6 oneOf branch " + v, schema: branch(v), want: specSchemaErr(vld, "/properties/a/oneOf/1", specAny)},
		)
	}
	// An array where a schema is expected: validation in properties and
	// oneOf; in items it is the tuple form, which D9 makes unsupported.
	cases = append(cases,
		specSchemaCase{name: "D6 property schema []", schema: prop(`[]`), want: specSchemaErr(vld, "/properties/a", specAny)},
		specSchemaCase{name: "D6 property schema [{...}]", schema: prop(`[{"type":"string"}]`), want: specSchemaErr(vld, "/properties/a", specAny)},
		specSchemaCase{name: "D6 oneOf branch []", schema: branch(`[]`), want: specSchemaErr(vld, "/properties/a/oneOf/1", specAny)},
		specSchemaCase{name: "D6 schemas of absent properties are checked", schema: `{"type":"object","properties":{"never":{"type":"string","pattern":"x"}}}`,
			want: specSchemaErr(uns, "/properties/never/pattern", "pattern")},
		specSchemaCase{name: "D6 every oneOf branch is checked", schema: branch(`{"type":"integer","maximum":3}`),
			want: specSchemaErr(uns, "/properties/a/oneOf/1/maximum", "maximum")},
	)
	specRunSchemaCases(t, cases)
}

// ---------------------------------------------------------------- D7

func TestD7Type(t *testing.T) {
	prop := func(v string) string { return `{"type":"object","properties":{"a":` + v + `}}` }
	typeRequired := func(ptr string) *specWant {
		// The pointer may name the schema object or its missing type member.
		return specSchemaErr(vld, ptr+"|"+ptr+"/type", specAny).withMessage("type is required")
	}
	cases := []specSchemaCase{
		{name: "D7 missing type in a property", schema: prop(`{}`), want: typeRequired("/properties/a")},
		{name: "D7 missing type beside description", schema: prop(`{"description":"d"}`), want: typeRequired("/properties/a")},
		{name: "D7 missing type beside minimum", schema: prop(`{"minimum":1}`), want: typeRequired("/properties/a")},
		{name: "D7 missing type in items", schema: prop(`{"type":"array","items":{}}`), want: typeRequired("/properties/a/items")},
		{name: "D7 missing type in a oneOf branch", schema: prop(`{"oneOf":[{"type":"string"},{"description":"d"}]}`), want: typeRequired("/properties/a/oneOf/1")},
		{name: "D7 missing type in a nested object", schema: prop(`{"type":"object","properties":{"b":{}}}`), want: typeRequired("/properties/a/properties/b")},
		{name: "D7 a oneOf schema needs no type", schema: prop(`{"oneOf":[{"type":"string"}]}`)},
		{name: "D7 a oneOf schema as a oneOf branch needs no type", schema: prop(`{"oneOf":[{"oneOf":[{"type":"string"}]},{"type":"integer"}]}`)},
		{name: "D7 a oneOf schema in items needs no type", schema: prop(`{"type":"array","items":{"oneOf":[{"type":"string"}]}}`)},
		{name: "D7 type list", schema: prop(`{"type":["string","null"]}`), want: specSchemaErr(uns, "/properties/a/type", "type")},
		{name: "D7 one-element type list", schema: prop(`{"type":["string"]}`), want: specSchemaErr(uns, "/properties/a/type", "type")},
		{name: "D7 type 5", schema: prop(`{"type":5}`), want: specSchemaErr(vld, "/properties/a/type", "type")},
		{name: "D7 type true", schema: prop(`{"type":true}`), want: specSchemaErr(vld, "/properties/a/type", "type")},
		{name: "D7 type null (JSON)", schema: prop(`{"type":null}`), want: specSchemaErr(vld, "/properties/a/type", "type")},
		{name: "D7 type object value", schema: prop(`{"type":{}}`), want: specSchemaErr(vld, "/properties/a/type", "type")},
		{name: `D7 type "null"`, schema: prop(`{"type":"null"}`), want: specSchemaErr(uns, "/properties/a/type", "type", "type", "null")},
		{name: `D7 type "Object"`, schema: prop(`{"type":"Object"}`), want: specSchemaErr(uns, "/properties/a/type", "type", "type", "Object")},
		{name: `D7 type "int"`, schema: prop(`{"type":"int"}`), want: specSchemaErr(uns, "/properties/a/type", "type", "type", "int")},
		{name: `D7 type ""`, schema: prop(`{"type":""}`), want: specSchemaErr(uns, "/properties/a/type", "type", "type", "")},
		{name: `D7 type "any"`, schema: prop(`{"type":"any"}`), want: specSchemaErr(uns, "/properties/a/type", "type", "type", "any")},
		{name: "D7 every supported type", schema: `{"type":"object","properties":{"o":{"type":"object"},"a":{"type":"array","items":{"type":"string"}},
			"s":{"type":"string"},"i":{"type":"integer"},"n":{"type":"number"},"b":{"type":"boolean"},"l":{"type":"array"}}}`},
	}
	specRunSchemaCases(t, cases)
}

// ---------------------------------------------------------------- D8

func TestD8KeywordApplicability(t *testing.T) {
	const msg = "keyword is unsupported for this type"
	prop := func(v string) string { return `{"type":"object","properties":{"a":` + v + `}}` }
	misapplied := func(ptr, kw string) *specWant { return specSchemaErr(uns, ptr, kw).withMessage(msg) }
	cases := []specSchemaCase{
		{name: "D8 properties on string", schema: prop(`{"type":"string","properties":{}}`), want: misapplied("/properties/a/properties", "properties")},
		{name: "D8 properties on array", schema: prop(`{"type":"array","properties":{"x":{"type":"string"}}}`), want: misapplied("/properties/a/properties", "properties")},
		{name: "D8 required on string", schema: prop(`{"type":"string","required":[]}`), want: misapplied("/properties/a/required", "required")},
		{name: "D8 required on array", schema: prop(`{"type":"array","required":["x"]}`), want: misapplied("/properties/a/required", "required")},
		{name: "D8 additionalProperties on number", schema: prop(`{"type":"number","additionalProperties":false}`), want: misapplied("/properties/a/additionalProperties", "additionalProperties")},
		{name: "D8 additionalProperties on integer", schema: prop(`{"type":"integer","additionalProperties":true}`), want: misapplied("/properties/a/additionalProperties", "additionalProperties")},
		{name: "D8 additional_properties on boolean", schema: prop(`{"type":"boolean","additional_properties":false}`), want: misapplied("/properties/a/additional_properties", "additional_properties|additionalProperties")},
		{name: "D8 items on object", schema: prop(`{"type":"object","items":{"type":"string"}}`), want: misapplied("/properties/a/items", "items")},
		{name: "D8 items on string", schema: prop(`{"type":"string","items":{"type":"string"}}`), want: misapplied("/properties/a/items", "items")},
		{name: "D8 items on the root", schema: `{"type":"object","items":{"type":"string"}}`, want: misapplied("/items", "items")},
		{name: "D8 items on the untyped root", schema: `{"items":{"type":"string"}}`, want: misapplied("/items", "items")},
		{name: "D8 minimum on string", schema: prop(`{"type":"string","minimum":1}`), want: misapplied("/properties/a/minimum", "minimum")},
		{name: "D8 minimum on boolean", schema: prop(`{"type":"boolean","minimum":0}`), want: misapplied("/properties/a/minimum", "minimum")},
		{name: "D8 minimum on array", schema: prop(`{"type":"array","minimum":0}`), want: misapplied("/properties/a/minimum", "minimum")},
		{name: "D8 minimum on object", schema: prop(`{"type":"object","minimum":0}`), want: misapplied("/properties/a/minimum", "minimum")},
		{name: "D8 minimum on the root", schema: `{"type":"object","minimum":0}`, want: misapplied("/minimum", "minimum")},
		{name: "D8 minimum on the untyped root", schema: `{"minimum":0}`, want: misapplied("/minimum", "minimum")},
		{name: "D8 items in items of a string", schema: prop(`{"type":"array","items":{"type":"string","items":{"type":"string"}}}`), want: misapplied("/properties/a/items/items", "items")},
		{name: "D8 description with every type", schema: `{"type":"object","description":"d","properties":{
			"o":{"type":"object","description":"d"},"a":{"type":"array","description":"d","items":{"type":"string","description":"d"}},
			"s":{"type":"string","description":"d"},"i":{"type":"integer","description":"d","minimum":0},
			"n":{"type":"number","description":"d","minimum":0.5},"b":{"type":"boolean","description":"d"},
			"u":{"description":"d","oneOf":[{"type":"string","description":"d"}]}}}`},
		{name: "D8 object keywords with object", schema: prop(`{"type":"object","properties":{},"required":[],"additionalProperties":true}`)},
	}
	specRunSchemaCases(t, cases)
}

// ---------------------------------------------------------------- D9

func TestD9KeywordValues(t *testing.T) {
	prop := func(v string) string { return `{"type":"object","properties":{"a":` + v + `}}` }
	var cases []specSchemaCase
	for _, v := range []string{`[]`, `"x"`, `null`, `5`, `true`, `[{"type":"string"}]`} {
		cases = append(cases,
			specSchemaCase{name: "D9 root properties " + v, schema: `{"type":"object","properties":` + v + `}`, want: specSchemaErr(vld, "/properties", "properties")},
			specSchemaCase{name: "D9 nested properties " + v, schema: prop(`{"type":"object","properties":` + v + `}`), want: specSchemaErr(vld, "/properties/a/properties", "properties")},
		)
	}
	for _, v := range []string{`"a"`, `{}`, `null`, `5`, `true`} {
		cases = append(cases, specSchemaCase{name: "D9 required " + v, schema: `{"type":"object","required":` + v + `}`, want: specSchemaErr(vld, "/required", "required")})
	}
	cases = append(cases,
		specSchemaCase{name: "D9 required [1]", schema: `{"type":"object","required":[1]}`, want: specSchemaErr(vld, "/required|/required/0", "required")},
		specSchemaCase{name: `D9 required ["a",null]`, schema: `{"type":"object","required":["a",null]}`, want: specSchemaErr(vld, "/required|/required/1", "required")},
		specSchemaCase{name: `D9 required [["a"]]`, schema: `{"type":"object","required":[["a"]]}`, want: specSchemaErr(vld, "/required|/required/0", "required")},
		specSchemaCase{name: "D9 required repeats allowed", schema: `{"type":"object","required":["a","a"]}`},
		specSchemaCase{name: "D9 required names need not be properties", schema: `{"type":"object","properties":{"b":{"type":"string"}},"required":["zzz"]}`},
		specSchemaCase{name: "D9 required empty", schema: `{"type":"object","required":[]}`},
	)
	for _, v := range []string{`{}`, `{"type":"string"}`} {
		cases = append(cases,
			specSchemaCase{name: "D9 additionalProperties schema " + v, schema: `{"type":"object","additionalProperties":` + v + `}`, want: specSchemaErr(uns, "/additionalProperties", "additionalProperties")},
			specSchemaCase{name: "D9 nested additionalProperties schema " + v, schema: prop(`{"type":"object","additionalProperties":` + v + `}`), want: specSchemaErr(uns, "/properties/a/additionalProperties", "additionalProperties")},
		)
	}
	for _, v := range []string{`"false"`, `0`, `null`, `[]`, `[false]`} {
		cases = append(cases, specSchemaCase{name: "D9 additionalProperties " + v, schema: `{"type":"object","additionalProperties":` + v + `}`, want: specSchemaErr(vld, "/additionalProperties", "additionalProperties")})
	}
	for _, v := range []string{`5`, `null`, `{}`, `["x"]`, `true`} {
		cases = append(cases,
			specSchemaCase{name: "D9 root description " + v, schema: `{"type":"object","description":` + v + `}`, want: specSchemaErr(vld, "/description", "description")},
			specSchemaCase{name: "D9 nested description " + v, schema: prop(`{"type":"string","description":` + v + `}`), want: specSchemaErr(vld, "/properties/a/description", "description")},
			specSchemaCase{name: "D9 oneOf-schema description " + v, schema: prop(`{"oneOf":[{"type":"string"}],"description":` + v + `}`), want: specSchemaErr(vld, "/properties/a/description", "description")},
		)
	}
	for _, v := range []string{`"one"`, `"1"`, `null`, `true`, `[1]`, `{}`} {
		cases = append(cases,
			specSchemaCase{name: "D9 integer minimum " + v, schema: prop(`{"type":"integer","minimum":` + v + `}`), want: specSchemaErr(vld, "/properties/a/minimum", "minimum")},
			specSchemaCase{name: "D9 number minimum " + v, schema: prop(`{"type":"number","minimum":` + v + `}`), want: specSchemaErr(vld, "/properties/a/minimum", "minimum")},
		)
	}
	cases = append(cases,
		specSchemaCase{name: "D9 minimum fractional on integer is fine", schema: prop(`{"type":"integer","minimum":0.5}`)},
		specSchemaCase{name: "D9 minimum huge is fine", schema: prop(`{"type":"number","minimum":1e400}`)},
		specSchemaCase{name: "D9 minimum negative exponent is fine", schema: prop(`{"type":"number","minimum":-1E-400}`)},
	)
	for _, v := range []string{`[{"type":"string"}]`, `[]`, `true`, `false`} {
		cases = append(cases, specSchemaCase{name: "D9 items " + v, schema: prop(`{"type":"array","items":` + v + `}`), want: specSchemaErr(uns, "/properties/a/items", specAny)})
	}
	for _, v := range []string{`5`, `"x"`, `null`} {
		cases = append(cases, specSchemaCase{name: "D9 items " + v, schema: prop(`{"type":"array","items":` + v + `}`), want: specSchemaErr(vld, "/properties/a/items", specAny)})
	}
	specRunSchemaCases(t, cases)

	specRunArgCases(t, []specArgCase{
		{name: "D9 required name not in properties is enforced", schema: `{"type":"object","properties":{"b":{"type":"string"}},"required":["zzz"]}`, args: `{"b":"x"}`,
			want: specArgErr("$arguments", "", "/required", "required", "property", "zzz")},
	})
}

// ---------------------------------------------------------------- D10

func TestD10OneOf(t *testing.T) {
	prop := func(v string) string { return `{"type":"object","properties":{"a":` + v + `}}` }
	cases := []specSchemaCase{
		{name: "D10 empty oneOf", schema: prop(`{"oneOf":[]}`), want: specSchemaErr(vld, "/properties/a/oneOf", "oneOf")},
		{name: "D10 oneOf object", schema: prop(`{"oneOf":{"type":"string"}}`), want: specSchemaErr(vld, "/properties/a/oneOf", "oneOf")},
		{name: "D10 oneOf {}", schema: prop(`{"oneOf":{}}`), want: specSchemaErr(vld, "/properties/a/oneOf", "oneOf")},
		{name: "D10 oneOf string", schema: prop(`{"oneOf":"x"}`), want: specSchemaErr(vld, "/properties/a/oneOf", "oneOf")},
		{name: "D10 oneOf null", schema: prop(`{"oneOf":null}`), want: specSchemaErr(vld, "/properties/a/oneOf", "oneOf")},
		{name: "D10 oneOf 5", schema: prop(`{"oneOf":5}`), want: specSchemaErr(vld, "/properties/a/oneOf", "oneOf")},
		{name: "D10 sibling type", schema: prop(`{"type":"string","oneOf":[{"type":"string"}]}`),
			want: specSchemaErr(uns, specAny, specAny, "keywords", []string{"type"})},
		{name: "D10 sibling minimum", schema: prop(`{"oneOf":[{"type":"integer"}],"minimum":1}`),
			want: specSchemaErr(uns, specAny, specAny, "keywords", []string{"minimum"})},
		{name: "D10 siblings listed in byte order", schema: prop(`{"type":"integer","oneOf":[{"type":"integer"}],"minimum":1}`),
			want: specSchemaErr(uns, specAny, specAny, "keywords", []string{"minimum", "type"})},
		{name: "D10 sibling object keywords", schema: prop(`{"required":["x"],"oneOf":[{"type":"object"}],"properties":{}}`),
			want: specSchemaErr(uns, specAny, specAny, "keywords", []string{"properties", "required"})},
		{name: "D10 sibling alias", schema: prop(`{"oneOf":[{"type":"object"}],"additional_properties":false}`),
			want: specSchemaErr(uns, specAny, specAny, "keywords", []string{"additional_properties"})},
		{name: "D10 sibling items", schema: prop(`{"oneOf":[{"type":"array"}],"items":{"type":"string"}}`),
			want: specSchemaErr(uns, specAny, specAny, "keywords", []string{"items"})},
		{name: "D10 description sibling allowed", schema: prop(`{"description":"d","oneOf":[{"type":"string"},{"type":"integer"}]}`)},
		{name: "D10 branch checked as a nested schema: unknown keyword", schema: prop(`{"oneOf":[{"type":"string","format":"uri"}]}`),
			want: specSchemaErr(uns, "/properties/a/oneOf/0/format", "format")},
		{name: "D10 branch checked as a nested schema: misapplied", schema: prop(`{"oneOf":[{"type":"string"},{"type":"string","minimum":1}]}`),
			want: specSchemaErr(uns, "/properties/a/oneOf/1/minimum", "minimum").withMessage("keyword is unsupported for this type")},
		{name: "D10 branch checked as a nested schema: malformed", schema: prop(`{"oneOf":[{"type":"object","required":"x"}]}`),
			want: specSchemaErr(vld, "/properties/a/oneOf/0/required", "required")},
		{name: "D10 single-branch oneOf", schema: prop(`{"oneOf":[{"type":"string"}]}`)},
	}
	specRunSchemaCases(t, cases)
}

// ---------------------------------------------------------------- D11

// specManyProblems is a Go-value schema with one problem per property; the
// names sort, in byte order, as Z < a_ < b < d < m < é < ｚ < 😀 (UTF-16
// order would put 😀 before ｚ, and a collation would put a_ first).
func specManyProblems() map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{
		"m":  map[string]any{"type": "string", "minimum": 1},
		"d":  map[string]any{},
		"😀":  map[string]any{"type": 5},
		"b":  map[string]any{"type": "null"},
		"ｚ":  true,
		"é":  map[string]any{"type": "array", "items": []any{}},
		"Z":  map[string]any{"type": "string", "pattern": "x"},
		"a_": map[string]any{"type": "object", "required": "x"},
	}}
}

func TestD11DeterministicSchemaErrors(t *testing.T) {
	want := specSchemaErr(uns, "/properties/Z/pattern", "pattern")
	var first *inputschema.Error
	for i := range 50 {
		_, err := inputschema.CompileValue(specManyProblems(), nil)
		e := specCheck(t, fmt.Sprintf("D11 compile %d", i), err, want)
		if i == 0 {
			first = e
		} else if !reflect.DeepEqual(e, first) {
			t.Fatalf("D11 compile %d: %s, earlier %s", i, specFormat(e), specFormat(first))
		}
	}
	// Removing the smallest name each time exposes the next one: the order
	// is byte order throughout, not just for the first.
	next := []struct{ remove, pointer string }{
		{"Z", "/properties/a_/required"}, {"a_", "/properties/b/type"}, {"b", "/properties/d"},
		{"d", "/properties/m/minimum"}, {"m", "/properties/é/items"}, {"é", "/properties/ｚ"}, {"ｚ", "/properties/😀/type"},
	}
	removed := []string{}
	for _, n := range next {
		removed = append(removed, n.remove)
		for i := range 10 {
			schema := specManyProblems()
			for _, r := range removed {
				delete(schema["properties"].(map[string]any), r)
			}
			_, err := inputschema.CompileValue(schema, nil)
			e := specCheck(t, fmt.Sprintf("D11 without %v (%d)", removed, i), err, specSchemaErr(specClassOf(err), specAny, specAny))
			if e != nil && !specFieldMatches(e.SchemaPointer, n.pointer+"|"+n.pointer+"/type") {
				t.Errorf("D11 without %v: first error at %q, want %q", removed, e.SchemaPointer, n.pointer)
				break
			}
		}
	}

	prop := func(v string) string { return `{"type":"object","properties":{"a":` + v + `}}` }
	specRunSchemaCases(t, []specSchemaCase{
		{name: "D11 byte order, not document order", schema: `{"type":"object","properties":{"b":{"type":"bogus"},"a":{}}}`,
			want: specSchemaErr(vld, "/properties/a|/properties/a/type", specAny).withMessage("type is required")},
		{name: "D11 unknown keywords: smallest name first", schema: `{"type":"object","zeta":1,"alpha":1,"$x":1,"Beta":1}`,
			want: specSchemaErr(uns, "/$x", "$x")},
		{name: "D11 unknown keywords: uppercase before lowercase", schema: `{"type":"object","zeta":1,"alpha":1,"Beta":1}`,
			want: specSchemaErr(uns, "/Beta", "Beta")},
		{name: "D11 oneOf branches in index order", schema: prop(`{"oneOf":[{"type":"string"},{"type":"x1"},{}]}`),
			want: specSchemaErr(uns, "/properties/a/oneOf/1/type", "type", "type", "x1")},
		{name: "D11 $comment sorts before properties", schema: `{"type":"object","properties":{"a":{"type":"bogus"}},"$comment":"c"}`,
			want: specSchemaErr(uns, "/$comment", "$comment")},
		// D11 leaves open whether a schema object's own unknown keywords are
		// checked before its nested schemas are entered. The package checks
		// every key of one schema object for an unknown keyword first (so a
		// {"$ref": ...} property schema reports $ref, not a missing type),
		// then descends; members are still visited in byte order.
		{name: "D11 a schema object's unknown keywords before its nested schemas", schema: `{"type":"object","properties":{"a":{"type":"bogus"}},"x-extra":1}`,
			want: specSchemaErr(uns, "/x-extra", "x-extra")},
		{name: "D11 a $ref property schema reports $ref, not a missing type", schema: prop(`{"$ref":"#/$defs/x"}`),
			want: specSchemaErr(uns, "/properties/a/$ref", "$ref")},
	})
}

func specClassOf(err error) inputschema.Class {
	var e *inputschema.Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ""
}

const specOrderSchema = `{"type":"object",
"properties":{"x":{"type":"integer"},"y":{"type":"array","items":{"type":"integer"}},
  "o":{"type":"object","properties":{"p":{"type":"string"},"q":{"type":"string"}},"required":["r"]},
  "b":{"type":"integer"},"a":{"type":"integer"}},
"required":["b","a"],"additionalProperties":false}`

func TestD11DeterministicArgumentErrors(t *testing.T) {
	s := specMustCompile(t, specOrderSchema)
	// Go maps iterate in a random order: 50 runs must agree.
	args := map[string]any{"x": "s", "a": "s", "b": "s", "y": []any{1, "s", 2.5}, "o": map[string]any{"q": 1, "p": 2}}
	want := specArgErr("$arguments.a", "/a", "/properties/a/type", "type", "type", "integer")
	var firstAll error
	for i := range 50 {
		specCheck(t, fmt.Sprintf("D11 Validate %d", i), s.Validate(args), want)
		all := s.ValidateAll(args)
		if i == 0 {
			firstAll = all
		} else if !reflect.DeepEqual(all, firstAll) {
			t.Fatalf("D11 ValidateAll %d differs from the first run", i)
		}
	}
	// All errors, in the order D11 and D14 give: member names in byte
	// order, depth first, the nested object's own required first.
	l, ok := firstAll.(*inputschema.ErrorList)
	if !ok {
		t.Fatalf("ValidateAll: %T", firstAll)
	}
	specCheckListEntries(t, "D11 ValidateAll", l, []*specWant{
		specArgErr("$arguments.a", "/a", "/properties/a/type", "type", "type", "integer"),
		specArgErr("$arguments.b", "/b", "/properties/b/type", "type", "type", "integer"),
		specArgErr("$arguments.o", "/o", "/properties/o/required", "required", "property", "r"),
		specArgErr("$arguments.o.p", "/o/p", "/properties/o/properties/p/type", "type", "type", "string"),
		specArgErr("$arguments.o.q", "/o/q", "/properties/o/properties/q/type", "type", "type", "string"),
		specArgErr("$arguments.x", "/x", "/properties/x/type", "type", "type", "integer"),
		specArgErr("$arguments.y[1]", "/y/1", "/properties/y/items/type", "type", "type", "integer"),
		specArgErr("$arguments.y[2]", "/y/2", "/properties/y/items/type", "type", "type", "integer"),
	})

	names := `{"type":"object","additionalProperties":false,"properties":{"Z":{"type":"string"},"a_":{"type":"string"},"é":{"type":"string"},"ｚ":{"type":"string"},"😀":{"type":"string"}}}`
	specRunArgCases(t, []specArgCase{
		{name: "D11 byte order of member names, not document order", schema: names, args: `{"😀":1,"ｚ":1,"é":1,"a_":1,"Z":1}`,
			want: specArgErr("$arguments.Z", "/Z", "/properties/Z/type", "type", "type", "string"),
			all: []*specWant{
				specArgErr("$arguments.Z", "/Z", "/properties/Z/type", "type", "type", "string"),
				specArgErr("$arguments.a_", "/a_", "/properties/a_/type", "type", "type", "string"),
				specArgErr(specAny, "/é", "/properties/é/type", "type", "type", "string"),
				specArgErr(specAny, "/ｚ", "/properties/ｚ/type", "type", "type", "string"),
				specArgErr(specAny, "/😀", "/properties/😀/type", "type", "type", "string"),
			}},
		{name: "D11 unknown members in byte order", schema: names, args: `{"zz":1,"B":1,"aa":1}`,
			want: specArgErr("$arguments.B", "/B", "/additionalProperties", "additionalProperties", "property", "B"),
			all: []*specWant{
				specArgErr("$arguments.B", "/B", "/additionalProperties", "additionalProperties", "property", "B"),
				specArgErr("$arguments.aa", "/aa", "/additionalProperties", "additionalProperties", "property", "aa"),
				specArgErr("$arguments.zz", "/zz", "/additionalProperties", "additionalProperties", "property", "zz"),
			}},
	})
}

// ---------------------------------------------------------------- D12

func TestD12Types(t *testing.T) {
	const schema = `{"type":"object","properties":{"i":{"type":"integer"},"n":{"type":"number"},"s":{"type":"string"},
"b":{"type":"boolean"},"a":{"type":"array"},"o":{"type":"object"}}}`
	notA := func(member, typ string) *specWant {
		return specArgErr("$arguments."+member, "/"+member, "/properties/"+member+"/type", "type", "type", typ)
	}
	var cases []specArgCase
	integers := []string{`1`, `-1`, `0`, `-0`, `1.0`, `-0.0`, `1e2`, `1E2`, `1e+2`, `1E-0`, `0e0`, `0e-5`, `1.50e1`, `100e-2`,
		`12345678901234567890`, `-12345678901234567890`, `1e400`, `-1e400`, `1.0000000000000000000000e0`, `123456789012345678901234567890.000`}
	for _, lit := range integers {
		cases = append(cases,
			specArgCase{name: "D12 integer " + lit, schema: schema, args: `{"i":` + lit + `}`},
			specArgCase{name: "D12 number " + lit, schema: schema, args: `{"n":` + lit + `}`})
	}
	type lossy struct {
		lit   string
		float bool // float64 decoding would make it an integer
	}
	for _, l := range []lossy{{`1.5`, false}, {`1e-1`, false}, {`0.5`, false}, {`-1.5`, false}, {`123e-2`, false}, {`1.25E1`, false},
		{`1.0000000000000000000001`, true}, {`12345678901234567890.5`, true}, {`1e-400`, true}, {`-1e-400`, true}, {`1.00000000000000000000000000001e5`, true}} {
		cases = append(cases,
			specArgCase{name: "D12 not an integer " + l.lit, schema: schema, args: `{"i":` + l.lit + `}`, floatLossy: l.float, want: notA("i", "integer")},
			specArgCase{name: "D12 number " + l.lit, schema: schema, args: `{"n":` + l.lit + `}`})
	}
	for _, v := range []string{`"1"`, `"1.0"`, `true`, `null`, `[]`, `{}`, `[1]`} {
		cases = append(cases,
			specArgCase{name: "D12 integer refuses " + v, schema: schema, args: `{"i":` + v + `}`, want: notA("i", "integer")},
			specArgCase{name: "D12 number refuses " + v, schema: schema, args: `{"n":` + v + `}`, want: notA("n", "number")})
	}
	for _, c := range []struct {
		member, ok, bad string
	}{
		{"s", `""`, `1`}, {"s", `"x"`, `null`}, {"s", `"1"`, `["x"]`},
		{"b", `true`, `"true"`}, {"b", `false`, `0`}, {"b", `false`, `null`},
		{"a", `[]`, `{}`}, {"a", `[null,1,"x"]`, `null`}, {"a", `[[]]`, `"[]"`},
		{"o", `{}`, `[]`}, {"o", `{"k":null}`, `null`}, {"o", `{"a":{}}`, `"{}"`},
	} {
		typ := map[string]string{"s": "string", "b": "boolean", "a": "array", "o": "object"}[c.member]
		cases = append(cases,
			specArgCase{name: fmt.Sprintf("D12 %s accepts %s", typ, c.ok), schema: schema, args: `{"` + c.member + `":` + c.ok + `}`},
			specArgCase{name: fmt.Sprintf("D12 %s refuses %s", typ, c.bad), schema: schema, args: `{"` + c.member + `":` + c.bad + `}`, want: notA(c.member, typ)})
	}
	specRunArgCases(t, cases)

	// Go values through Validate.
	s := specMustCompile(t, schema)
	for name, v := range map[string]any{"int": 1, "int64": int64(-7), "uint64 max": uint64(math.MaxUint64), "uint8": uint8(3),
		"float64 1": 1.0, "float64 -0": math.Copysign(0, -1), "float64 1e300": 1e300, "json.Number 1.0": json.Number("1.0"), "json.Number 1e2": json.Number("1e2"),
		"json.Number 1e400": json.Number("1e400")} {
		specCheck(t, "D12 Go integer "+name, s.Validate(map[string]any{"i": v}), nil)
		specCheck(t, "D12 Go number "+name, s.Validate(map[string]any{"n": v}), nil)
	}
	for name, v := range map[string]any{"float64 1.5": 1.5, "float64 1e-1": 0.1, "json.Number 1e-1": json.Number("1e-1"),
		"json.Number 1.0000000000000000000001": json.Number("1.0000000000000000000001"), "string": "1"} {
		specCheck(t, "D12 Go non-integer "+name, s.Validate(map[string]any{"i": v}), notA("i", "integer"))
	}
}

// ---------------------------------------------------------------- D13

func TestD13Minimum(t *testing.T) {
	const schema = `{"type":"object","properties":{
"one":{"type":"number","minimum":1},"onei":{"type":"integer","minimum":1},
"big":{"type":"number","minimum":1e400},"bigi":{"type":"integer","minimum":1e400},
"neg":{"type":"number","minimum":-5},"negi":{"type":"integer","minimum":-5},
"tenth":{"type":"number","minimum":0.1},"zero":{"type":"integer","minimum":0},
"frac":{"type":"integer","minimum":0.5},"tiny":{"type":"number","minimum":1e-400}}}`
	below := func(member, minimum string) *specWant {
		return specArgErr("$arguments."+member, "/"+member, "/properties/"+member+"/minimum", "minimum", "minimum", minimum)
	}
	type c struct {
		member, lit string
		ok          bool
		floatLossy  bool
	}
	var cases []specArgCase
	minimums := map[string]string{"one": "1", "onei": "1", "big": "1e400", "bigi": "1e400", "neg": "-5", "negi": "-5",
		"tenth": "0.1", "zero": "0", "frac": "0.5", "tiny": "1e-400"}
	for _, x := range []c{
		{"one", `0.99999999999999999999`, false, true}, {"one", `1`, true, false}, {"one", `1.0`, true, false},
		{"one", `0.999`, false, false}, {"one", `1e0`, true, false}, {"one", `10e-1`, true, false},
		{"one", `100000000000000000000e-20`, true, false}, {"one", `99999999999999999999e-20`, false, true},
		{"one", `-1`, false, false}, {"one", `1.00000000000000000001`, true, false}, {"one", `0`, false, false}, {"one", `-0`, false, false},
		{"onei", `0`, false, false}, {"onei", `1`, true, false}, {"onei", `1.0`, true, false}, {"onei", `2`, true, false},
		{"big", `1e400`, true, false}, {"big", `1E400`, true, false}, {"big", `10e399`, true, false}, {"big", `1e401`, true, false},
		{"big", `9.99e399`, false, false}, {"big", `12345678901234567890`, false, false}, {"big", `-1e400`, false, false},
		{"big", `1.7976931348623157e308`, false, false},
		{"bigi", `1e400`, true, false}, {"bigi", `1e399`, false, false},
		{"neg", `-5`, true, false}, {"neg", `-4.5`, true, false}, {"neg", `0`, true, false}, {"neg", `-6`, false, false},
		{"neg", `-5.0000000000000000001`, false, true}, {"neg", `-5.5`, false, false}, {"neg", `-5e0`, true, false},
		{"negi", `-5`, true, false}, {"negi", `-6`, false, false}, {"negi", `-4`, true, false},
		{"tenth", `0.1`, true, false}, {"tenth", `0.10`, true, false}, {"tenth", `1e-1`, true, false},
		{"tenth", `0.09999999999999999999`, false, true}, {"tenth", `0.099`, false, false}, {"tenth", `0.2`, true, false},
		{"zero", `0`, true, false}, {"zero", `-0`, true, false}, {"zero", `-1`, false, false}, {"zero", `0.0`, true, false},
		{"frac", `0`, false, false}, {"frac", `1`, true, false},
		{"tiny", `0`, false, false}, {"tiny", `1e-400`, true, true}, {"tiny", `1e-399`, true, true}, {"tiny", `1e-401`, false, true},
	} {
		var want *specWant
		if !x.ok {
			want = below(x.member, minimums[x.member])
		}
		cases = append(cases, specArgCase{name: fmt.Sprintf("D13 %s=%s (minimum %s)", x.member, x.lit, minimums[x.member]),
			schema: schema, args: `{"` + x.member + `":` + x.lit + `}`, floatLossy: x.floatLossy, want: want})
	}
	specRunArgCases(t, cases)

	// Go float64 and integer values through Validate.
	s := specMustCompile(t, schema)
	for _, g := range []struct {
		member string
		v      any
		ok     bool
	}{
		{"one", 0.5, false}, {"one", 1.0, true}, {"one", 0, false}, {"one", 1, true}, {"one", uint8(1), true}, {"one", int64(-1), false},
		{"one", math.Nextafter(1, 0), false}, {"one", json.Number("0.99999999999999999999"), false}, {"one", json.Number("1.0"), true},
		{"tenth", 0.1, true}, {"tenth", 0.09, false}, {"tenth", json.Number("0.1"), true},
		{"big", 1e308, false}, {"big", math.MaxFloat64, false}, {"big", uint64(math.MaxUint64), false}, {"big", json.Number("1e400"), true},
		{"neg", -5, true}, {"neg", -5.0, true}, {"neg", -5.5, false}, {"neg", int64(math.MinInt64), false},
		{"negi", int8(-5), true}, {"negi", -6.0, false},
		{"zero", math.Copysign(0, -1), true}, {"zero", -1, false},
		{"tiny", 5e-324, true}, {"tiny", 0.0, false},
	} {
		var want *specWant
		if !g.ok {
			want = below(g.member, minimums[g.member])
		}
		specCheck(t, fmt.Sprintf("D13 Go %T %v for %s", g.v, g.v, g.member), s.Validate(map[string]any{g.member: g.v}), want)
	}
}

// ---------------------------------------------------------------- D14

func TestD14Objects(t *testing.T) {
	const ordered = `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["b","a"],"additionalProperties":false}`
	const nested = `{"type":"object","properties":{"o":{"type":"object","properties":{"k":{"type":"integer"}},"required":["k"],"additionalProperties":false}}}`
	req := func(path, pointer, sp, prop string) *specWant {
		return specArgErr(path, pointer, sp, "required", "property", prop)
	}
	extra := func(path, pointer, sp, prop string) *specWant {
		return specArgErr(path, pointer, sp, "additionalProperties", "property", prop)
	}
	specRunArgCases(t, []specArgCase{
		{name: "D14 required in array order", schema: ordered, args: `{}`, want: req("$arguments", "", "/required", "b"),
			all: []*specWant{req("$arguments", "", "/required", "b"), req("$arguments", "", "/required", "a")}},
		{name: "D14 required satisfied by null", schema: `{"type":"object","required":["a"]}`, args: `{"a":null}`},
		{name: "D14 required satisfied by null, then the member's schema", schema: `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
			args: `{"a":null}`, want: specArgErr("$arguments.a", "/a", "/properties/a/type", "type", "type", "string")},
		{name: "D14 required before additionalProperties", schema: ordered, args: `{"a":1,"aa":1}`,
			want: req("$arguments", "", "/required", "b"),
			all:  []*specWant{req("$arguments", "", "/required", "b"), extra("$arguments.aa", "/aa", "/additionalProperties", "aa")}},
		{name: "D14 additionalProperties before property errors", schema: ordered, args: `{"a":"x","b":1,"zz":1}`,
			want: extra("$arguments.zz", "/zz", "/additionalProperties", "zz"),
			all: []*specWant{extra("$arguments.zz", "/zz", "/additionalProperties", "zz"),
				specArgErr("$arguments.a", "/a", "/properties/a/type", "type", "type", "integer")}},
		{name: "D14 all three kinds in order", schema: ordered, args: `{"b":"x","c":1}`,
			all: []*specWant{req("$arguments", "", "/required", "a"), extra("$arguments.c", "/c", "/additionalProperties", "c"),
				specArgErr("$arguments.b", "/b", "/properties/b/type", "type", "type", "integer")},
			want: req("$arguments", "", "/required", "a")},
		{name: "D14 additionalProperties defaults to true", schema: `{"type":"object","properties":{"a":{"type":"integer"}}}`, args: `{"a":1,"x":{},"y":null}`},
		{name: "D14 additionalProperties true", schema: `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true}`, args: `{"x":1}`},
		{name: "D14 members without a schema are not validated", schema: `{"type":"object","properties":{"a":{"type":"integer"}}}`, args: `{"b":"anything"}`},
		{name: "D14 absent optional member is fine", schema: ordered, args: `{"a":1,"b":2}`},
		{name: "D14 a required name not in properties is forbidden when additionalProperties is false",
			schema: `{"type":"object","required":["zzz"],"additionalProperties":false}`, args: `{"zzz":1}`,
			want: extra("$arguments.zzz", "/zzz", "/additionalProperties", "zzz")},
		{name: "D14 repeated required name", schema: `{"type":"object","required":["a","a"]}`, args: `{}`, want: req("$arguments", "", "/required", "a")},
		{name: "D14 nested required", schema: nested, args: `{"o":{}}`, want: req("$arguments.o", "/o", "/properties/o/required", "k")},
		{name: "D14 nested additionalProperties", schema: nested, args: `{"o":{"k":1,"x":2}}`,
			want: extra("$arguments.o.x", "/o/x", "/properties/o/additionalProperties", "x")},
		{name: "D14 nested property", schema: nested, args: `{"o":{"k":"1"}}`,
			want: specArgErr("$arguments.o.k", "/o/k", "/properties/o/properties/k/type", "type", "type", "integer")},
		{name: "D14 nested valid", schema: nested, args: `{"o":{"k":1},"other":true}`},
	})
}

// ---------------------------------------------------------------- D15

func TestD15Arrays(t *testing.T) {
	const schema = `{"type":"object","properties":{
"l":{"type":"array","items":{"type":"integer"}},
"m":{"type":"array","items":{"type":"array","items":{"type":"integer"}}},
"r":{"type":"array","items":{"type":"object","properties":{"k":{"type":"integer"}},"required":["k"]}}}}`
	item := func(path, pointer, sp string) *specWant {
		return specArgErr(path, pointer, sp, "type", "type", "integer")
	}
	cases := []specArgCase{
		{name: "D15 empty array", schema: schema, args: `{"l":[],"m":[],"r":[]}`},
		{name: "D15 array without items accepts any elements", schema: `{"type":"object","properties":{"free":{"type":"array"}}}`,
			args: `{"free":[null,1,"x",[],{"a":1}]}`},
		{name: "D15 valid items", schema: schema, args: `{"l":[1,2,3],"m":[[1],[]],"r":[{"k":1}]}`},
		{name: "D15 first bad index", schema: schema, args: `{"l":[1,"x",2.5,3]}`,
			want: item("$arguments.l[1]", "/l/1", "/properties/l/items/type"),
			all:  []*specWant{item("$arguments.l[1]", "/l/1", "/properties/l/items/type"), item("$arguments.l[2]", "/l/2", "/properties/l/items/type")}},
		{name: "D15 nested arrays", schema: schema, args: `{"m":[[1],[1,"x"]]}`,
			want: item("$arguments.m[1][1]", "/m/1/1", "/properties/m/items/items/type")},
		{name: "D15 objects in arrays", schema: schema, args: `{"r":[{"k":1},{}]}`,
			want: specArgErr("$arguments.r[1]", "/r/1", "/properties/r/items/required", "required", "property", "k")},
		{name: "D15 index 10", schema: schema, args: `{"l":[0,1,2,3,4,5,6,7,8,9,null]}`,
			want: item("$arguments.l[10]", "/l/10", "/properties/l/items/type")},
	}
	// A deep chain: every level reported in the path and pointer.
	deep := specDeepSchema(126) // a: 123 arrays, then a string
	cases = append(cases,
		specArgCase{name: "D15 deep valid", schema: deep, args: `{"a":` + strings.Repeat("[", 123) + `"s"` + strings.Repeat("]", 123) + `}`},
		specArgCase{name: "D15 deep invalid", schema: deep, args: `{"a":` + strings.Repeat("[", 123) + `1` + strings.Repeat("]", 123) + `}`,
			want: specArgErr("$arguments.a"+strings.Repeat("[0]", 123), "/a"+strings.Repeat("/0", 123),
				"/properties/a"+strings.Repeat("/items", 123)+"/type", "type", "type", "string")},
	)
	specRunArgCases(t, cases)
}

// ---------------------------------------------------------------- D16

func TestD16OneOf(t *testing.T) {
	const schema = `{"type":"object","properties":{
"o":{"oneOf":[{"type":"number"},{"type":"integer"}]},
"t":{"oneOf":[{"type":"string"},{"type":"number"},{"type":"integer"}]},
"n":{"oneOf":[{"oneOf":[{"type":"string"},{"type":"string"}]},{"type":"integer"}]},
"l":{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","properties":{"label":{"type":"string"}},"required":["label"],"additionalProperties":false}]}}}}`
	const msg = "must match exactly one oneOf branch"
	oneOf := func(member, sp string, matches int) *specWant {
		return specArgErr("$arguments."+member, "/"+strings.NewReplacer(".", "/", "[", "/", "]", "").Replace(member), sp, "oneOf", "matches", matches).withMessage(msg)
	}
	specRunArgCases(t, []specArgCase{
		{name: "D16 exactly one: number not integer", schema: schema, args: `{"o":5.5}`},
		{name: "D16 several: 5 is number and integer", schema: schema, args: `{"o":5}`, want: oneOf("o", "/properties/o/oneOf", 2)},
		{name: "D16 several: 5.0 is number and integer", schema: schema, args: `{"o":5.0}`, want: oneOf("o", "/properties/o/oneOf", 2)},
		{name: "D16 none", schema: schema, args: `{"o":"x"}`, want: oneOf("o", "/properties/o/oneOf", 0)},
		{name: "D16 none: null", schema: schema, args: `{"o":null}`, want: oneOf("o", "/properties/o/oneOf", 0)},
		{name: "D16 two of three", schema: schema, args: `{"t":-3}`, want: oneOf("t", "/properties/t/oneOf", 2)},
		{name: "D16 one of three", schema: schema, args: `{"t":"x"}`},
		{name: "D16 inner several makes the outer branch fail", schema: schema, args: `{"n":"x"}`, want: oneOf("n", "/properties/n/oneOf", 0)},
		{name: "D16 nested: the other branch", schema: schema, args: `{"n":3}`},
		{name: "D16 items: string branch", schema: schema, args: `{"l":["a",{"label":"b"}]}`},
		{name: "D16 items: object missing its required member matches no branch", schema: schema, args: `{"l":["a",{"value":"b"}]}`,
			want: oneOf("l[1]", "/properties/l/items/oneOf", 0)},
		{name: "D16 items: first failing index", schema: schema, args: `{"l":[1,"a",2]}`,
			want: oneOf("l[0]", "/properties/l/items/oneOf", 0),
			all:  []*specWant{oneOf("l[0]", "/properties/l/items/oneOf", 0), oneOf("l[2]", "/properties/l/items/oneOf", 0)}},
	})
}

// ---------------------------------------------------------------- D17

func TestD17ErrorFields(t *testing.T) {
	const schema = `{"type":"object","properties":{
"options":{"type":"array","items":{"type":"object","properties":{"label":{"type":"string"}}}},
"a.b":{"type":"integer"},"a/b":{"type":"integer"},"a~b":{"type":"integer"},"":{"type":"integer"},"a b":{"type":"integer"},
"a-b":{"type":"integer"},"x_1":{"type":"integer"},"_y":{"type":"integer"},"~1":{"type":"integer"},
"m":{"type":"object","properties":{"a.b":{"type":"array","items":{"type":"integer"}}},"required":["r/s"]}}}`
	typeErr := func(path, pointer, sp string) *specWant {
		return specArgErr(path, pointer, sp, "type", "type", "integer")
	}
	specRunArgCases(t, []specArgCase{
		{name: "D17 path with index and member", schema: schema, args: `{"options":[{"label":"x"},{"label":5}]}`,
			want: specArgErr("$arguments.options[1].label", "/options/1/label", "/properties/options/items/properties/label/type", "type", "type", "string")},
		{name: "D17 name with a dot", schema: schema, args: `{"a.b":"x"}`, want: typeErr(`$arguments["a.b"]`, "/a.b", "/properties/a.b/type")},
		{name: "D17 name with a slash", schema: schema, args: `{"a/b":"x"}`, want: typeErr(`$arguments["a/b"]`, "/a~1b", "/properties/a~1b/type")},
		{name: "D17 name with a tilde", schema: schema, args: `{"a~b":"x"}`, want: typeErr(`$arguments["a~b"]`, "/a~0b", "/properties/a~0b/type")},
		{name: "D17 name ~1", schema: schema, args: `{"~1":"x"}`, want: typeErr(`$arguments["~1"]`, "/~01", "/properties/~01/type")},
		{name: "D17 empty name", schema: schema, args: `{"":"x"}`, want: typeErr(`$arguments[""]`, "/", "/properties//type")},
		{name: "D17 name with a space", schema: schema, args: `{"a b":"x"}`, want: typeErr(`$arguments["a b"]`, "/a b", "/properties/a b/type")},
		{name: "D17 name with a hyphen", schema: schema, args: `{"a-b":"x"}`, want: typeErr(`$arguments["a-b"]`, "/a-b", "/properties/a-b/type")},
		{name: "D17 identifier with digit and underscore", schema: schema, args: `{"x_1":"x"}`, want: typeErr("$arguments.x_1", "/x_1", "/properties/x_1/type")},
		{name: "D17 identifier starting with underscore", schema: schema, args: `{"_y":"x"}`, want: typeErr("$arguments._y", "/_y", "/properties/_y/type")},
		{name: "D17 bracketed name then index", schema: schema, args: `{"m":{"r/s":1,"a.b":[0,"x"]}}`,
			want: typeErr(`$arguments.m["a.b"][1]`, "/m/a.b/1", "/properties/m/properties/a.b/items/type")},
		{name: "D17 missing required: location is the object, property names the member", schema: schema, args: `{"m":{}}`,
			want: specArgErr("$arguments.m", "/m", "/properties/m/required", "required", "property", "r/s")},
		{name: "D17 forbidden member: location is the member", schema: `{"type":"object","additionalProperties":false}`, args: `{"a/b":1}`,
			want: specArgErr(`$arguments["a/b"]`, "/a~1b", "/additionalProperties", "additionalProperties", "property", "a/b")},
		{name: "D17 oneOf: location is the value", schema: `{"type":"object","properties":{"options":{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","properties":{"value":{"type":"string"}}}]}}}}`,
			args: `{"options":["a",5]}`,
			want: specArgErr("$arguments.options[1]", "/options/1", "/properties/options/items/oneOf", "oneOf", "matches", 0)},
	})

	specRunSchemaCases(t, []specSchemaCase{
		{name: "D17 schema pointer escaping", schema: `{"type":"object","properties":{"a/b":{"type":"object","properties":{"c~d":{"type":"string","pattern":"x"}}}}}`,
			want: specSchemaErr(uns, "/properties/a~1b/properties/c~0d/pattern", "pattern")},
		{name: "D17 the seed's example pointer", schema: `{"type":"object","properties":{"options":{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","properties":{"value":{"type":"string","enum":["x"]}}}]}}}}`,
			want: specSchemaErr(uns, "/properties/options/items/oneOf/1/properties/value/enum", "enum")},
	})

	// Error() renders "class: path: message", or "class: schema "<pointer>":
	// message" at the schema stage; the JSON form has every field, details
	// as an object.
	s := specMustCompile(t, schema)
	err := s.ValidateJSON([]byte(`{"x_1":"no"}`))
	var e *inputschema.Error
	if !errors.As(err, &e) {
		t.Fatalf("ValidateJSON: %v", err)
	}
	if got, want := err.Error(), "validation: $arguments.x_1: "+e.Message; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	raw, jerr := json.Marshal(e)
	if jerr != nil {
		t.Fatal(jerr)
	}
	var wire map[string]any
	if err := json.Unmarshal(raw, &wire); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"class", "stage", "message", "path", "pointer", "schema_pointer", "keyword", "details"} {
		if _, ok := wire[k]; !ok {
			t.Errorf("JSON form lacks %q: %s", k, raw)
		}
	}
	if _, ok := wire["details"].(map[string]any); !ok {
		t.Errorf("JSON details is not an object: %s", raw)
	}
	_, err = inputschema.Compile([]byte(`{"type":"object","properties":{"a/b":{"type":"string","pattern":"x"}}}`), nil)
	if !errors.As(err, &e) {
		t.Fatalf("Compile: %v", err)
	}
	if got, want := err.Error(), `unsupported_capability: schema "/properties/a~1b/pattern": `+e.Message; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// ---------------------------------------------------------------- D18

// specDeepCopy copies a decoded JSON value tree.
func specDeepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = specDeepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = specDeepCopy(e)
		}
		return out
	}
	return v
}

func TestD18NoMutation(t *testing.T) {
	const schema = `{"type":"object","properties":{"n":{"type":"integer","minimum":1},"s":{"type":"string"},
"l":{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","properties":{"label":{"type":"string"}},"required":["label"]}]}},
"o":{"type":"object","properties":{"x":{"type":"number"}}}},"required":["s"],"additionalProperties":false}`
	s := specMustCompile(t, schema)
	argSets := []string{
		`{"n":"1"}`,
		`{"n":1.0,"s":"x"}`,
		`{"n":1e2,"s":"x","l":["a",{"label":"b"},{"label":1}],"o":{"x":"1"}}`,
		`{"s":null,"extra":[1,2,{"z":null}]}`,
		`{"n":0.99999999999999999999,"s":"x","o":{}}`,
	}
	for _, text := range argSets {
		for _, decode := range []func(string) (any, error){specDecodeNumber, specDecodeFloat} {
			args, err := decode(text)
			if err != nil {
				t.Fatal(err)
			}
			before := specDeepCopy(args)
			_ = s.Validate(args)
			_ = s.ValidateAll(args)
			if !reflect.DeepEqual(args, before) {
				t.Errorf("D18 Validate changed %s: now %v", text, args)
			}
		}
		data := []byte(text)
		before := bytes.Clone(data)
		_ = s.ValidateJSON(data)
		_ = s.ValidateJSONAll(data)
		if !bytes.Equal(data, before) {
			t.Errorf("D18 ValidateJSON changed its input %s", text)
		}
	}
	// No coercion: "1" is not an integer, and stays a string.
	args := map[string]any{"n": "1", "s": "x"}
	specCheck(t, `D18 "1" is not an integer`, s.Validate(args),
		specArgErr("$arguments.n", "/n", "/properties/n/type", "type", "type", "integer"))
	if v, ok := args["n"].(string); !ok || v != "1" {
		t.Errorf(`D18 args["n"] = %#v after validation`, args["n"])
	}
	if len(args) != 2 {
		t.Errorf("D18 members added: %v", args)
	}
	// No defaults: an optional member stays absent.
	args = map[string]any{"s": "x"}
	specCheck(t, "D18 valid", s.Validate(args), nil)
	if len(args) != 1 {
		t.Errorf("D18 members added: %v", args)
	}
	// A Go-value schema is not changed by compiling it.
	goSchema := specManyProblems()
	before := fmt.Sprintf("%#v", goSchema)
	_, _ = inputschema.CompileValue(goSchema, nil)
	if after := fmt.Sprintf("%#v", goSchema); after != before {
		t.Errorf("D18 CompileValue changed its schema value")
	}
}

// ---------------------------------------------------------------- ErrorList

func TestErrorList(t *testing.T) {
	const schema = `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"},"e":{"type":"integer"}}}`
	const args = `{"e":"x","d":"x","c":"x","b":"x","a":"x"}`
	for _, c := range []struct {
		maxErrors, listed int
		truncated         bool
	}{{1, 1, true}, {2, 2, true}, {4, 4, true}, {5, 5, false}, {6, 5, false}, {0, 5, false}} {
		s, err := inputschema.Compile([]byte(schema), &inputschema.CompileOptions{Limits: inputschema.Limits{MaxErrors: c.maxErrors}})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := specDecodeNumber(args)
		for name, err := range map[string]error{"ValidateJSONAll": s.ValidateJSONAll([]byte(args)), "ValidateAll": s.ValidateAll(v)} {
			label := fmt.Sprintf("%s MaxErrors %d", name, c.maxErrors)
			l, ok := err.(*inputschema.ErrorList)
			if !ok {
				t.Errorf("%s: %T, want *ErrorList", label, err)
				continue
			}
			if len(l.Errors) != c.listed || l.Truncated != c.truncated {
				t.Errorf("%s: %d errors, truncated %v; want %d, %v", label, len(l.Errors), l.Truncated, c.listed, c.truncated)
			}
			for i, e := range l.Errors {
				member := string(rune('a' + i))
				specCheck(t, fmt.Sprintf("%s[%d]", label, i), e, specArgErr("$arguments."+member, "/"+member, "/properties/"+member+"/type", "type", "type", "integer"))
			}
			var first *inputschema.Error
			if !errors.As(err, &first) || first != l.Errors[0] {
				t.Errorf("%s: errors.As does not find the first *Error", label)
			}
			if c.truncated && !strings.HasSuffix(err.Error(), "(more errors not listed)") {
				t.Errorf("%s: Error() = %q does not say the list is truncated", label, err.Error())
			}
		}
		// The single-error forms are unaffected by MaxErrors.
		specCheck(t, "ValidateJSON", s.ValidateJSON([]byte(args)), specArgErr("$arguments.a", "/a", "/properties/a/type", "type", "type", "integer"))
	}
	// Valid arguments: a nil error interface, not a typed nil.
	s := specMustCompile(t, schema)
	if err := s.ValidateJSONAll([]byte(`{"a":1}`)); err != nil {
		t.Errorf("ValidateJSONAll on valid args: %#v", err)
	}
	if err := s.ValidateAll(map[string]any{"a": 1}); err != nil {
		t.Errorf("ValidateAll on valid args: %#v", err)
	}
	if err := s.ValidateJSON([]byte(`{"a":1}`)); err != nil {
		t.Errorf("ValidateJSON on valid args: %#v", err)
	}
	// A decoding failure in the all-errors form is still a list (or at
	// least an error errors.As finds).
	var e *inputschema.Error
	if err := s.ValidateJSONAll([]byte(`{"a":1,"a":2}`)); !errors.As(err, &e) || e.Class != inputschema.ClassValidation {
		t.Errorf("ValidateJSONAll on duplicate names: %v", err)
	}
}

// ---------------------------------------------------------------- concurrency

func TestConcurrentUse(t *testing.T) {
	const schema = `{"type":"object","properties":{"question":{"type":"string"},
"options":{"type":"array","items":{"oneOf":[{"type":"string"},{"type":"object","properties":{"label":{"type":"string"},"value":{"type":"string"}},"required":["label"],"additionalProperties":false}]}},
"timeout_ms":{"type":"integer","minimum":1000}},"required":["question"],"additionalProperties":false}`
	s := specMustCompile(t, schema)
	inputs := []string{
		`{"question":"q"}`,
		`{"question":"q","options":["a",{"label":"b"}],"timeout_ms":1000}`,
		`{"options":[5]}`,
		`{"question":"q","timeout_ms":999}`,
		`{"question":"q","options":[{"value":"x"}],"extra":1}`,
		`{"question":1,"timeout_ms":"1000"}`,
		`{"question":"q","options":["a","b",{"label":"c","value":"d"},{"label":"e","x":1}]}`,
		`[]`,
		`{"question":"q","question":"r"}`,
	}
	type result struct{ first, all, value, valueAll error }
	run := func(in string) result {
		var r result
		r.first = s.ValidateJSON([]byte(in))
		r.all = s.ValidateJSONAll([]byte(in))
		if v, err := specDecodeNumber(in); err == nil {
			r.value = s.Validate(v)
			r.valueAll = s.ValidateAll(v)
		}
		return r
	}
	want := make([]result, len(inputs))
	for i, in := range inputs {
		want[i] = run(in)
	}
	const goroutines, rounds = 8, 200
	var wg sync.WaitGroup
	mismatches := make([]int, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				i := (g + r) % len(inputs)
				if !reflect.DeepEqual(run(inputs[i]), want[i]) {
					mismatches[g]++
				}
			}
		}()
	}
	wg.Wait()
	for g, n := range mismatches {
		if n > 0 {
			t.Errorf("goroutine %d: %d results differ from the sequential ones", g, n)
		}
	}
}

// ---------------------------------------------------------------- D5a

// TestD5aMCPHeader: x-mcp-header (MCP 2026-07-28) is an annotation the
// subset accepts where the revision allows it, and constrains no value;
// anywhere else, or malformed, the schema is refused.
func TestD5aMCPHeader(t *testing.T) {
	specRunSchemaCases(t, []specSchemaCase{
		{name: "D5a on a string, an integer, a boolean and a nested property", schema: `{"type":"object","properties":{
			"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},
			"b":{"type":"boolean","x-mcp-header":"Flag"},"o":{"type":"object","properties":{"id":{"type":"string","x-mcp-header":"Id"}}}}}`},
		{name: "D5a at the root", schema: `{"type":"object","x-mcp-header":"Root"}`,
			want: specSchemaErr(uns, "/x-mcp-header", "x-mcp-header")},
		{name: "D5a on a number", schema: `{"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}}`,
			want: specSchemaErr(uns, "/properties/x/x-mcp-header", "x-mcp-header", "type", "number")},
		{name: "D5a on an object", schema: `{"type":"object","properties":{"x":{"type":"object","x-mcp-header":"X"}}}`,
			want: specSchemaErr(uns, "/properties/x/x-mcp-header", "x-mcp-header", "type", "object")},
		{name: "D5a in items", schema: `{"type":"object","properties":{"l":{"type":"array","items":{"type":"string","x-mcp-header":"L"}}}}`,
			want: specSchemaErr(uns, "/properties/l/items/x-mcp-header", "x-mcp-header")},
		{name: "D5a in a oneOf branch", schema: `{"type":"object","properties":{"a":{"oneOf":[{"type":"string","x-mcp-header":"A"}]}}}`,
			want: specSchemaErr(uns, "/properties/a/oneOf/0/x-mcp-header", "x-mcp-header")},
		{name: "D5a beside oneOf", schema: `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"}],"x-mcp-header":"A"}}}`,
			want: specSchemaErr(uns, "/properties/a/x-mcp-header", "x-mcp-header")},
		{name: "D5a not a token", schema: `{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"Bad Name"}}}`,
			want: specSchemaErr(vld, "/properties/a/x-mcp-header", "x-mcp-header")},
		{name: "D5a empty", schema: `{"type":"object","properties":{"a":{"type":"string","x-mcp-header":""}}}`,
			want: specSchemaErr(vld, "/properties/a/x-mcp-header", "x-mcp-header")},
		{name: "D5a not a string", schema: `{"type":"object","properties":{"a":{"type":"string","x-mcp-header":5}}}`,
			want: specSchemaErr(vld, "/properties/a/x-mcp-header", "x-mcp-header")},
		{name: "D5a twice without case", schema: `{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"type":"string","x-mcp-header":"REGION"}}}`,
			want: specSchemaErr(vld, "/properties/b/x-mcp-header", "x-mcp-header")},
	})
	specRunArgCases(t, []specArgCase{
		{name: "D5a constrains no value", schema: `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`, args: `{"region":"anything at all"}`},
		{name: "D5a the property's own type still holds", schema: `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`, args: `{"region":5}`,
			want: specArgErr("$arguments.region", "/region", "/properties/region/type", "type", "type", "string")},
	})
}
