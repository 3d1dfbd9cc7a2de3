// Command echoserver is the upstream of scripts/bench-http: an MCP server on
// stdin and stdout (the official Go SDK's stdio transport) with one tool,
// echo, which answers {"message": M} with the text "Echo: M". Both gateways
// the script compares start this same program, so that the upstream's cost
// is the same on both sides.
//
// Two environment variables help see what a gateway costs its upstream
// (the gateways pass their environment to it only in part, so set them in
// a wrapper script given as httpload's -echo):
//
//	ECHOSERVER_CPUPROFILE=FILE  a CPU profile of the whole run, written
//	                            when stdin ends or on SIGTERM/SIGINT
//	ECHOSERVER_WIRE=FILE        every message read and written, one a line
//	                            (the SDK's LoggingTransport)
package main

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"

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
	if path := os.Getenv("ECHOSERVER_CPUPROFILE"); path != "" {
		stop := startProfile(path)
		defer stop()
		// A gateway may end its upstream with a signal rather than by
		// closing stdin: the profile is written either way.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		go func() {
			<-sig
			stop()
			os.Exit(0)
		}()
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-echo", Version: "v0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "echo",
		Description: "Echoes back the message.",
		InputSchema: json.RawMessage(schema),
		// Read-only: Backplane runs it without an approval, as the
		// comparison needs (mcp-proxy asks for none).
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, echo)
	var t mcp.Transport = &mcp.StdioTransport{}
	if path := os.Getenv("ECHOSERVER_WIRE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		t = &mcp.LoggingTransport{Transport: t, Writer: f}
	}
	if err := srv.Run(context.Background(), t); err != nil {
		log.Fatal(err)
	}
}

// startProfile starts a CPU profile into path; the function it returns
// stops it (once, from whichever of the two ends comes first).
func startProfile(path string) func() {
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
}
