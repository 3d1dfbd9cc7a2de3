// Package schemas holds the input and output schemas of the nine built-in
// tools. The input schemas are the inputschema validator's regression
// fixtures and the contracts of the built-in backends: one JSON file per
// tool, embedded, so the schemas a model is shown are the ones the gateway
// enforces. Each output schema describes the tool's structured result when
// it is not an error (isError unset), within the same subset; the
// backend's tests run every tool and validate its results against it.
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/agentbackplane/backplane/tool"
)

// Tool is a tool descriptor in the MCP shape (name, description,
// inputSchema, outputSchema).
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

//go:embed *.json
var files embed.FS

// order is the order [All] returns the tools in: the order the built-ins are
// listed to a model, most used first, not alphabetical ([tool.BuiltinNames]).
var order = tool.BuiltinNames()

var (
	loadOnce sync.Once
	loaded   []Tool
)

// load decodes the embedded files once. A malformed file is a build defect
// (the package tests catch it), so it panics rather than returning an error
// every caller would have to handle.
func load() []Tool {
	loadOnce.Do(func() {
		loaded = make([]Tool, 0, len(order))
		for _, name := range order {
			data, err := files.ReadFile(name + ".json")
			if err != nil {
				panic(fmt.Sprintf("schemas: %v", err))
			}
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			var t Tool
			if err := dec.Decode(&t); err != nil {
				panic(fmt.Sprintf("schemas: %s.json: %v", name, err))
			}
			if t.Name != name {
				panic(fmt.Sprintf("schemas: %s.json names the tool %q", name, t.Name))
			}
			loaded = append(loaded, t)
		}
	})
	return loaded
}

// clone copies a tool so callers cannot change the shared schema bytes.
func clone(t Tool) Tool {
	t.InputSchema = bytes.Clone(t.InputSchema)
	t.OutputSchema = bytes.Clone(t.OutputSchema)
	return t
}

// All returns the nine built-in tools in the order read, bash, grep, glob,
// write, url_fetch, edit, ls, ask_user_question. The slice and the schema
// bytes are the caller's own.
func All() []Tool {
	tools := load()
	out := make([]Tool, len(tools))
	for i, t := range tools {
		out[i] = clone(t)
	}
	return out
}

// Lookup returns the built-in tool with the given name.
func Lookup(name string) (Tool, bool) {
	for _, t := range load() {
		if t.Name == name {
			return clone(t), true
		}
	}
	return Tool{}, false
}
