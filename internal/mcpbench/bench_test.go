// Package mcpbench measures what the gateway adds to an MCP tool call, over
// the transports the product uses.
//
// BenchmarkMCPProxy/direct is a trivial tool call (echo) made by a Go SDK
// client to an upstream MCP server process over stdio: this test binary run
// again as a Go SDK server (mcp.StdioTransport) with one echo tool.
// BenchmarkMCPProxy/gateway is the same call made through the gateway: the
// client reaches backplane's MCP server over stdio (Server.ServeStdio on OS
// pipes, as `backplane serve --stdio` runs: blocking pipes taken through
// mcpstream.Polled and mcpstream.PolledOutput as serve takes its stdin
// and stdout, stdio_unix_test.go), and the gateway's tool is that
// same upstream program, started and spoken to by package backend/upstream as
// for a configured `servers:` entry; the gateway runs its whole pipeline
// over a SQLite store in a temporary folder (the real default: a synced
// intent commit and a settlement per call). BenchmarkMCPProxy/
// gateway-memstore is the gateway over the in-memory store, to tell the
// store's share from the rest. Every client side (the benchmark's client,
// and the gateway as the upstream's client) uses the same stdio transport,
// package internal/mcpstream, so the direct leg is the same kind of hop as
// each of the gateway's two.
//
// BenchmarkMCPProxyInterleaved runs the three legs of BenchmarkMCPProxy in
// one run, in blocks of calls taken in turn, so that the p50 ratios are
// taken over the same seconds of the machine: the figure to read for the
// ratios (see interleaved_test.go).
//
// BenchmarkMCPProxyStdio/<direct|gateway> is the same comparison with the
// issue's other upstream: the echo tool of the reference server
// @modelcontextprotocol/server-everything (node, installed under
// testdata/mcp-peers). It is skipped when node or the server is missing.
//
// The process runs with serve's GOGC (400) unless the environment sets
// GOGC (see TestMain).
//
// Each reports p50-ns and p99-ns from the latency of every call, besides
// ns/op, and cpu-ns/op: the CPU time (user and system) the benchmark's
// process spent per call, which is the client's and, in the gateway legs,
// the gateway's (not the upstream process's); on a shared machine it
// varies less than the latencies:
//
//	go test ./internal/mcpbench -run '^$' -bench MCPProxy -benchtime 3000x -count 3
package mcpbench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// upstreamEnv, set to 1, makes this test binary the Go echo server over
// stdio (see TestMain).
const upstreamEnv = "BACKPLANE_MCPBENCH_UPSTREAM"

func TestMain(m *testing.M) {
	if os.Getenv(goStallChildEnv) == "1" {
		goStallChild()
		return
	}
	if os.Getenv(upstreamEnv) == "1" {
		var t mcp.Transport = &mcp.StdioTransport{}
		if dir := os.Getenv(logEnv); dir != "" {
			t = upstreamLogging(dir, t)
		}
		if err := echoServer().Run(context.Background(), t); err != nil {
			fmt.Fprintln(os.Stderr, "echo upstream:", err)
			os.Exit(1)
		}
		return
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// This process hosts the gateway of the gateway legs, which runs as
		// `backplane serve` runs it: serve sets GOGC to 400 unless the
		// environment sets GOGC (serveGCPercent in cmd/backplane/serve.go).
		// The setting is the process's, so the benchmark's client gets it
		// in every leg, direct included; the upstream process keeps Go's
		// default. GOGC=100 in the environment measures at the default.
		debug.SetGCPercent(benchGCPercent)
	}
	os.Exit(m.Run())
}

// benchGCPercent is serve's GOGC (serveGCPercent in cmd/backplane).
const benchGCPercent = 400

type echoIn struct {
	Text string `json:"text"`
}

type echoOut struct {
	Text string `json:"text"`
}

// echoServer is the Go upstream: one read-only echo tool (read-only, so
// that the gateway needs no approval for it).
func echoServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo-upstream", Version: "v0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo the text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
			return nil, echoOut(in), nil
		})
	return srv
}

// upstreamCommand is the Go upstream's command line: this test binary.
func upstreamCommand(b testing.TB) []string {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	return []string{exe}
}

// clientOver connects a Go SDK client over the stdio transport t.
func clientOver(b testing.TB, t mcp.Transport) *mcp.ClientSession {
	b.Helper()
	// Every hop speaks 2025-11-25: the version backplane serves (and
	// proposes to its upstreams), so that both paths do the same work per
	// hop.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "v0"}, nil).
		Connect(context.Background(), t, &mcp.ClientSessionOptions{ProtocolVersion: server.ProtocolVersions[0]})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// direct starts the upstream program and returns a client session to it
// over its stdin and stdout.
func direct(b *testing.B, argv []string, env ...string) *mcp.ClientSession {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return clientOver(b, mcpstream.New(mcpstream.Unclosed(stdout), stdin, nil))
}

// everything is the command of the reference server, or skips.
func everything(b *testing.B) []string {
	b.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		b.Skip("node is not installed")
	}
	bin, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-everything"))
	if _, err := os.Stat(bin); err != nil {
		b.Skip("server-everything is not installed (npm ci in testdata/mcp-peers): " + err.Error())
	}
	return []string{bin}
}

func BenchmarkMCPProxyStdio(b *testing.B) {
	args := map[string]any{"message": "benchmark call"}
	check := func(res *mcp.CallToolResult) bool {
		return len(res.Content) == 1 && strings.Contains(res.Content[0].(*mcp.TextContent).Text, "benchmark call")
	}
	b.Run("direct", func(b *testing.B) {
		runCalls(b, direct(b, everything(b)), "echo", args, check)
	})
	b.Run("gateway", func(b *testing.B) {
		// server-everything's echo declares $schema, which the subset
		// refuses: the draft 2020-12 validator takes it.
		cs := throughGateway(b, sqliteStore(b), upstream.Server{Name: "up", Command: everything(b), Validator: upstream.ValidatorDraft2020})
		runCalls(b, cs, "up.echo", args, check)
	})
}

func sqliteStore(b *testing.B) store.Store {
	st, err := sqlite.Open(b.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// throughGateway connects the upstream srv to a gateway over st, as
// `servers:` does, serves that gateway over stdio on OS pipes, and returns
// a client session to it.
func throughGateway(b testing.TB, st store.Store, srv upstream.Server) *mcp.ClientSession {
	b.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "bench", Allow: []string{"up.echo"}}})
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: st, Policy: rules})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	up, err := upstream.Connect(ctx, srv, &upstream.Options{Registry: g})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { up.Close() })
	s := server.New(g, &server.Options{StdioCaller: "bench"})
	inR, inW, outR, outW := stdioPipes(b)
	served := make(chan error, 1)
	go func() { served <- s.ServeStdio(inR, outW) }()
	b.Cleanup(func() {
		s.Shutdown(context.Background())
		<-served
	})
	return clientOver(b, mcpstream.New(outR, inW, nil))
}

// goUpstream is the Go echo upstream as a `servers:` entry.
func goUpstream(b testing.TB) upstream.Server {
	b.Setenv(upstreamEnv, "1") // passed on by name (Server.Env)
	return upstream.Server{Name: "up", Command: upstreamCommand(b), Env: []string{upstreamEnv, logEnv, wireLogEnv, "GOTRACEBACK"}}
}

func BenchmarkMCPProxy(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		run(b, direct(b, upstreamCommand(b), upstreamEnv+"=1"), "echo")
	})
	b.Run("gateway", func(b *testing.B) {
		run(b, throughGateway(b, sqliteStore(b), goUpstream(b)), "up.echo")
	})
	b.Run("gateway-memstore", func(b *testing.B) {
		run(b, throughGateway(b, memstore.New(), goUpstream(b)), "up.echo")
	})
}

// run makes b.N calls of the Go echo tool.
func run(b *testing.B, cs *mcp.ClientSession, tool string) {
	runCalls(b, cs, tool, map[string]any{"text": "benchmark call"}, func(res *mcp.CallToolResult) bool {
		sc, _ := res.StructuredContent.(map[string]any)
		return sc["text"] == "benchmark call"
	})
}

// runCalls makes b.N echo calls one after the other and reports the latency
// percentiles.
func runCalls(b *testing.B, cs *mcp.ClientSession, tool string, args map[string]any, ok func(*mcp.CallToolResult) bool) {
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	// Warm up (connections, first-call allocations), and check the answer.
	for range 20 {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %+v", tool, err, res)
		}
		if !ok(res) {
			b.Fatalf("%s answered %+v", tool, res)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	wd := startWatchdog(b, os.Getenv(logEnv))
	b.ReportAllocs()
	cpuStart, cpuOK := processCPU()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		wd.begin()
		res, err := cs.CallTool(ctx, params)
		wd.end()
		lat = append(lat, time.Since(start))
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %+v", tool, err, res)
		}
	}
	b.StopTimer()
	if cpuEnd, ok := processCPU(); ok && cpuOK {
		// Less noisy than latency on a shared machine: what one call cost
		// this process in CPU, whoever else wanted the cores.
		b.ReportMetric(float64((cpuEnd-cpuStart).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds()), "p99-ns")
}
