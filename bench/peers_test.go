package bench

import (
	"bytes"
	"encoding/json"
	"testing"

	google "github.com/google/jsonschema-go/jsonschema"
	santhosh "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentbackplane/backplane/inputschema"
)

// decodeUseNumber decodes JSON the way a Go host hands arguments to
// inputschema.Validate: encoding/json with exact numbers.
func decodeUseNumber(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// compileSanthosh compiles schema text as a draft 2020-12 schema, the dialect
// the subset is drawn from.
func compileSanthosh(schema []byte) (*santhosh.Schema, error) {
	doc, err := santhosh.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := santhosh.NewCompiler()
	c.DefaultDraft(santhosh.Draft2020)
	const url = "mem:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// compileGoogle resolves schema text with github.com/google/jsonschema-go.
func compileGoogle(schema []byte) (*google.Resolved, error) {
	var s google.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

func mustBackplane(tb testing.TB, f Fixture) *inputschema.Schema {
	tb.Helper()
	s, err := inputschema.Compile(f.Schema, nil)
	if err != nil {
		tb.Fatalf("%s: backplane compile: %v", f.Name, err)
	}
	return s
}

func mustSanthosh(tb testing.TB, f Fixture) *santhosh.Schema {
	tb.Helper()
	s, err := compileSanthosh(f.Schema)
	if err != nil {
		tb.Fatalf("%s: santhosh compile: %v", f.Name, err)
	}
	return s
}

func mustGoogle(tb testing.TB, f Fixture) *google.Resolved {
	tb.Helper()
	s, err := compileGoogle(f.Schema)
	if err != nil {
		tb.Fatalf("%s: google resolve: %v", f.Name, err)
	}
	return s
}
