package main

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/server"
)

// structuredOf is a result's structured object as JSON: its
// structuredContent, or, for an error result of a tool that declares an
// output schema (the built-ins), the error Backplane put in
// _meta["backplane/error"] instead (server.MetaError); "null" when neither.
func structuredOf(res *mcp.CallToolResult) []byte {
	v := res.StructuredContent
	if v == nil && res.IsError {
		v = res.Meta[server.MetaError]
	}
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return b
}

// structuredMap is structuredOf decoded, nil when it is not an object.
func structuredMap(res *mcp.CallToolResult) map[string]any {
	var m map[string]any
	json.Unmarshal(structuredOf(res), &m)
	return m
}
