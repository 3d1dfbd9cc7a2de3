package inputschema_test

import (
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/inputschema"
)

// Compile a tool's schema once, when the tool is registered, then validate
// every call's argument bytes with it. A violation is an *inputschema.Error
// whose fields say what failed and where.
func ExampleCompile_readTool() {
	tool, _ := schemas.Lookup("read")
	schema, err := inputschema.Compile(tool.InputSchema, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	fmt.Println(schema.ValidateJSON([]byte(`{"path":"main.go","offset":10}`)))

	err = schema.ValidateJSON([]byte(`{"path":"main.go","offset":0}`))
	var e *inputschema.Error
	if errors.As(err, &e) {
		fmt.Println(e.Class, e.Stage)
		fmt.Println(e.Path, e.Pointer)
		fmt.Println(e.SchemaPointer, e.Keyword)
	}

	err = schema.ValidateJSON([]byte(`{"offset":1}`))
	if errors.As(err, &e) {
		fmt.Printf("%s %q %s %v\n", e.Path, e.Pointer, e.Keyword, e.Details["property"])
	}
	// Output:
	// <nil>
	// validation arguments
	// $arguments.offset /offset
	// /properties/offset/minimum minimum
	// $arguments "" required path
}

// The all-errors form lists every violation, in a fixed order: missing
// required members, then unknown members, then the members' own errors by
// name.
func ExampleSchema_ValidateJSONAll_readTool() {
	tool, _ := schemas.Lookup("read")
	schema, err := inputschema.Compile(tool.InputSchema, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = schema.ValidateJSONAll([]byte(`{"offset":0,"limit":0,"extra":true}`))
	var list *inputschema.ErrorList
	if errors.As(err, &list) {
		for _, e := range list.Errors {
			switch e.Keyword {
			case "required", "additionalProperties":
				fmt.Println(e.Keyword, e.Path, e.Details["property"])
			default:
				fmt.Println(e.Keyword, e.Path)
			}
		}
	}
	// Output:
	// required $arguments path
	// additionalProperties $arguments.extra extra
	// minimum $arguments.limit
	// minimum $arguments.offset
}

// Hosts can write a schema as Go values instead of JSON, and validate
// arguments they already decoded. Nothing is coerced: "3" is not an integer.
func ExampleCompileValue_goValues() {
	schema, err := inputschema.CompileValue(map[string]any{
		"type": "object",
		"properties": map[string]any{
			"count": map[string]any{"type": "integer", "minimum": 1},
			"tags":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		},
		"required":             []string{"count"},
		"additionalProperties": false,
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(schema.Validate(map[string]any{"count": 3, "tags": []any{"a"}}))
	for _, args := range []map[string]any{
		{"count": 0},
		{"count": 2.5},
		{"count": "3"},
		{"count": 1, "tags": []any{"a", 7}},
	} {
		var e *inputschema.Error
		if errors.As(schema.Validate(args), &e) {
			fmt.Println(e.Path, e.Keyword)
		}
	}
	// Output:
	// <nil>
	// $arguments.count minimum
	// $arguments.count type
	// $arguments.count type
	// $arguments.tags[1] type
}

// A schema outside the supported subset fails at compile time, before any
// call, with class unsupported_capability; a missing schema too.
func ExampleCompile_unsupported() {
	_, err := inputschema.Compile([]byte(`{"type":"object","properties":{"mode":{"type":"string","enum":["a","b"]}}}`), nil)
	var e *inputschema.Error
	if errors.As(err, &e) {
		fmt.Println(e.Class, e.Stage, e.SchemaPointer, e.Keyword)
	}

	_, err = inputschema.Compile(nil, nil)
	fmt.Println(err)
	// Output:
	// unsupported_capability schema /properties/mode/enum enum
	// unsupported_capability: tool schema is required
}
