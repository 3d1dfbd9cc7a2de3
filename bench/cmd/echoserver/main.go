// Command echoserver is the upstream of scripts/bench-http: an MCP server on
// stdin and stdout (the official Go SDK's stdio transport) with one tool,
// echo, which answers {"message": M} with the text "Echo: M". Both gateways
// the script compares start this same program, so that the upstream's cost
// is the same on both sides.
package main

import (
	"context"
	"encoding/json"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// schema is the echo tool's input schema, written out (not inferred) so
// that it stays inside the subset Backplane's validator accepts.
const schema = `{"type":"object","properties":{"message":{"type":"string"}},"required":["message"],"additionalProperties":false}`

type echoIn struct {
	Message string `json:"message"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
}

func main() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-echo", Version: "v0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "echo",
		Description: "Echoes back the message.",
		InputSchema: json.RawMessage(schema),
		// Read-only: Backplane runs it without an approval, as the
		// comparison needs (mcp-proxy asks for none).
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, echo)
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
