package inputschema_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

// CompileAll lists every unknown keyword of every schema object and the
// first other error of each, going on past a failed nested schema.
func TestCompileAllListsEveryError(t *testing.T) {
	schema := `{"type":"object","$schema":"x","properties":{
		"a":{"type":"string","pattern":"^a","format":"email"},
		"b":{"type":"strange"},
		"c":{"type":"array","items":{"type":"integer","minimum":"one"}},
		"d":{"type":"string"}
	},"required":["a"]}`
	_, err := inputschema.CompileAll([]byte(schema), nil)
	var list *inputschema.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("CompileAll = %v, want an *ErrorList", err)
	}
	var got [][2]string
	for _, e := range list.Errors {
		if e.Stage != inputschema.StageSchema {
			t.Errorf("error %v at stage %s", e, e.Stage)
		}
		got = append(got, [2]string{e.SchemaPointer, e.Keyword})
	}
	want := [][2]string{
		{"/$schema", "$schema"},
		{"/properties/a/format", "format"},
		{"/properties/a/pattern", "pattern"},
		{"/properties/b/type", "type"},
		{"/properties/c/items/minimum", "minimum"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors (pointer, keyword):\n got %v\nwant %v", got, want)
	}
	// Its first error is Compile's.
	_, first := inputschema.Compile([]byte(schema), nil)
	if !reflect.DeepEqual(first, list.Errors[0]) {
		t.Errorf("first error %#v, Compile's %#v", list.Errors[0], first)
	}
	// A valid schema compiles the same as with Compile.
	s, err := inputschema.CompileAll([]byte(`{"type":"object","properties":{"d":{"type":"string"}}}`), nil)
	if err != nil || s == nil || s.ValidateJSON([]byte(`{"d":1}`)) == nil {
		t.Errorf("valid schema: %v, %v", s, err)
	}
}

func TestCompileAllCapsAndUndecodable(t *testing.T) {
	schema := `{"type":"object","a1":1,"a2":2,"a3":3,"a4":4}`
	_, err := inputschema.CompileAll([]byte(schema), &inputschema.CompileOptions{Limits: inputschema.Limits{MaxErrors: 2}})
	var list *inputschema.ErrorList
	if !errors.As(err, &list) || len(list.Errors) != 2 || !list.Truncated {
		t.Fatalf("capped at 2: %v", err)
	}
	for _, bad := range []string{``, `{"type":"object","type":"object"}`, `null`, `{`} {
		_, err := inputschema.CompileAll([]byte(bad), nil)
		if !errors.As(err, &list) || len(list.Errors) != 1 {
			t.Errorf("CompileAll(%q) = %v, want a list of one", bad, err)
			continue
		}
		_, first := inputschema.Compile([]byte(bad), nil)
		if !reflect.DeepEqual(first, list.Errors[0]) {
			t.Errorf("CompileAll(%q) first %#v, Compile's %#v", bad, list.Errors[0], first)
		}
	}
}

// CompileAll agrees with Compile on every input: the same verdict, and its
// first error is Compile's error.
func FuzzCompileAll(f *testing.F) {
	for _, s := range toolSchemas {
		f.Add([]byte(s))
	}
	for _, s := range unsupportedSchemas {
		f.Add([]byte(s))
	}
	for _, s := range trickyJSON {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"type":"object","x":1,"properties":{"a":{"type":"nope"},"b":{"oneOf":[{"type":"string","y":2},true]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := inputschema.Compile(data, nil)
		s, errAll := inputschema.CompileAll(data, nil)
		if (err == nil) != (errAll == nil) || (s == nil) == (errAll == nil) {
			t.Fatalf("%q: Compile %v, CompileAll %v, %v", data, err, s, errAll)
		}
		if err == nil {
			return
		}
		var list *inputschema.ErrorList
		if !errors.As(errAll, &list) || len(list.Errors) == 0 {
			t.Fatalf("%q: CompileAll error %v is not a non-empty list", data, errAll)
		}
		if !reflect.DeepEqual(err, list.Errors[0]) {
			t.Fatalf("%q: first error %#v, Compile's %#v", data, list.Errors[0], err)
		}
	})
}
