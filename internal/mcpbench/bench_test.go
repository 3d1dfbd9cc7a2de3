// Package mcpbench measures what the gateway adds to an MCP tool call.
//
// BenchmarkMCPProxy/direct is a trivial tool call (echo) made by a Go SDK
// client to an in-process Go SDK server over the SDK's in-memory transport.
// BenchmarkMCPProxy/gateway is the same call made through backplane's MCP
// server (package server) over the same kind of transport: the whole
// gateway pipeline over a SQLite store in a temporary folder (the real
// default: a synced intent commit and a settlement per call), whose tool is
// that same upstream echo server, reached through an SDK client session.
// BenchmarkMCPProxy/gateway-memstore is the gateway over the in-memory
// store, to tell the store's share from the rest.
//
// BenchmarkMCPProxyStdio/<direct|gateway> is the same comparison with the
// issue's other upstream: the echo tool of the reference server
// @modelcontextprotocol/server-everything (node, installed under
// testdata/mcp-peers), over stdio; the client reaches the gateway's MCP
// server in process. It is skipped when node or the server is missing.
//
// Each reports p50-ns and p99-ns from the latency of every call, besides
// ns/op:
//
//	go test ./internal/mcpbench -run '^$' -bench MCPProxy -benchtime 3000x -count 3
package mcpbench

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/sqlite"
)

type echoIn struct {
	Text string `json:"text"`
}

type echoOut struct {
	Text string `json:"text"`
}

// upstream starts the Go echo server and returns a client session to it.
func upstream(b *testing.B) *mcp.ClientSession {
	b.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo-upstream", Version: "v0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo the text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
			return nil, echoOut(in), nil
		})
	return connect(b, func(ctx context.Context, t mcp.Transport) error {
		_, err := srv.Connect(ctx, t, nil)
		return err
	})
}

// connect links a new Go SDK client to a server over in-memory transports.
func connect(b *testing.B, serve func(context.Context, mcp.Transport) error) *mcp.ClientSession {
	b.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	if err := serve(ctx, st); err != nil {
		b.Fatal(err)
	}
	// Every hop speaks 2025-11-25: the version backplane serves (and
	// proposes to its upstreams), so that both paths do the same work per
	// hop.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v0"}, nil).
		Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: server.ProtocolVersions[0]})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// everything starts the reference server over stdio and returns a client
// session to it, or skips.
func everything(b *testing.B) *mcp.ClientSession {
	b.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		b.Skip("node is not installed")
	}
	bin, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-everything"))
	if _, err := os.Stat(bin); err != nil {
		b.Skip("server-everything is not installed (npm ci in testdata/mcp-peers): " + err.Error())
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v0"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(bin)},
			&mcp.ClientSessionOptions{ProtocolVersion: server.ProtocolVersions[0]})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// everythingEcho is the echo tool of server-everything as the gateway
// registers it for this benchmark: its own schema declares $schema, which
// the subset refuses, so the benchmark declares the same contract inside
// the subset.
var everythingEcho = gateway.Tool{
	Name:        "echo",
	Description: "Echoes back the input string",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string","description":"Message to echo"}},"required":["message"]}`),
}

func BenchmarkMCPProxyStdio(b *testing.B) {
	args := map[string]any{"message": "benchmark call"}
	check := func(res *mcp.CallToolResult) bool {
		return len(res.Content) == 1 && strings.Contains(res.Content[0].(*mcp.TextContent).Text, "benchmark call")
	}
	b.Run("direct", func(b *testing.B) {
		runCalls(b, everything(b), args, check)
	})
	b.Run("gateway", func(b *testing.B) {
		st, err := sqlite.Open(b.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		runCalls(b, gatewayFor(b, st, everythingEcho, everything(b)), args, check)
	})
}

// throughGateway serves a gateway whose echo tool calls the upstream
// session, and returns a client session to that gateway's MCP server.
func throughGateway(b *testing.B, st store.Store, up *mcp.ClientSession) *mcp.ClientSession {
	return gatewayFor(b, st, gateway.Tool{
		Name:        "echo",
		Description: "Echo the text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
	}, up)
}

// gatewayFor registers tool, whose calls go to the upstream tool of the same
// name, in a gateway over st, and returns a client session to the gateway's
// MCP server.
func gatewayFor(b *testing.B, st store.Store, tool gateway.Tool, up *mcp.ClientSession) *mcp.ClientSession {
	b.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "bench", Allow: []string{"echo"}}})
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: st, Policy: rules})
	// The upstream call as an MCP upstream backend makes it: the validated
	// argument bytes out, the result object back as JSON.
	tool.Backend = backend.Func(func(ctx context.Context, c *backend.Call) (*backend.Result, error) {
		res, err := up.CallTool(ctx, &mcp.CallToolParams{Name: tool.Name, Arguments: c.Arguments})
		if err != nil {
			return nil, err
		}
		out, err := json.Marshal(res)
		if err != nil {
			return nil, err
		}
		return &backend.Result{Content: out, IsError: res.IsError}, nil
	})
	if err := g.Register(tool); err != nil {
		b.Fatal(err)
	}
	s := server.New(g, &server.Options{StdioCaller: "bench"})
	return connect(b, func(ctx context.Context, t mcp.Transport) error {
		_, err := s.Connect(ctx, t)
		return err
	})
}

func BenchmarkMCPProxy(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		run(b, upstream(b))
	})
	b.Run("gateway", func(b *testing.B) {
		st, err := sqlite.Open(b.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		run(b, throughGateway(b, st, upstream(b)))
	})
	b.Run("gateway-memstore", func(b *testing.B) {
		run(b, throughGateway(b, memstore.New(), upstream(b)))
	})
}

// run makes b.N calls of the Go echo tool.
func run(b *testing.B, cs *mcp.ClientSession) {
	runCalls(b, cs, map[string]any{"text": "benchmark call"}, func(res *mcp.CallToolResult) bool {
		sc, _ := res.StructuredContent.(map[string]any)
		return sc["text"] == "benchmark call"
	})
}

// runCalls makes b.N echo calls one after the other and reports the latency
// percentiles.
func runCalls(b *testing.B, cs *mcp.ClientSession, args map[string]any, ok func(*mcp.CallToolResult) bool) {
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: "echo", Arguments: args}
	// Warm up (connections, first-call allocations), and check the answer.
	for range 20 {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("echo: %v %+v", err, res)
		}
		if !ok(res) {
			b.Fatalf("echo answered %+v", res)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		res, err := cs.CallTool(ctx, params)
		lat = append(lat, time.Since(start))
		if err != nil || res.IsError {
			b.Fatalf("echo: %v %+v", err, res)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds()), "p99-ns")
}
