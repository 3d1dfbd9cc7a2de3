package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/server"
)

// BenchmarkHTTPCall is tools/call over streamable HTTP on a loopback port:
// 8 Go SDK client sessions, each one call at a time, to the fixture's echo
// tool (a SQLite store). Besides time per call it reports cpu-us/op, the
// CPU time of the whole process (client and server, from getrusage) per
// call, which is what a change to the HTTP path moves; compare builds
// with `go test -c` and alternate runs.
//
//	go test ./server -run '^$' -bench HTTPCall -benchtime 3000x -count 3
func BenchmarkHTTPCall(b *testing.B) {
	benchHTTPCalls(b, 8)
}

func benchHTTPCalls(b *testing.B, sessions int) {
	f := newFixture(b)
	hs := httpServer(b, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}}))
	css := make([]*mcp.ClientSession, sessions)
	for i := range css {
		cs, err := connectHTTP(b, hs, "tok-a", nil)
		if err != nil {
			b.Fatal(err)
		}
		css[i] = cs
		call(b, cs, "echo", map[string]any{"text": "warm"})
	}
	var next atomic.Int64
	var failed atomic.Value
	cpu0 := cpuTime()
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, cs := range css {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
				if err != nil || res.IsError {
					failed.CompareAndSwap(nil, fmt.Sprintf("call %d: %v %v", n, err, res))
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if msg := failed.Load(); msg != nil {
		b.Fatal(msg)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHTTPCallRaw is tools/call over HTTP on a loopback port from a
// client that costs next to nothing (net/http posting prepared bodies,
// reading the whole answer and checking it holds a result), so that
// allocs/op and B/op are the server's: 8 clients, each one call at a
// time, to the fixture's echo tool (a SQLite store). 2026-07-28 sends
// self-contained requests (the fast path, fastpath.go); 2025-11-25 calls
// in 8 sessions opened by initialize (the SDK's session handler).
//
//	go test ./server -run '^$' -bench HTTPCallRaw -benchtime 3000x -count 3
func BenchmarkHTTPCallRaw(b *testing.B) {
	for _, version := range []string{server.ModernProtocolVersion, "2025-11-25"} {
		b.Run(version, func(b *testing.B) { benchRawCalls(b, version, 8) })
	}
}

func benchRawCalls(b *testing.B, version string, clients int) {
	f := newFixture(b)
	hs := httpServer(b, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}}))
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * clients}}
	modern := version == server.ModernProtocolVersion
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + version + `","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}},`
	if !modern {
		meta = ""
	}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `"name":"echo","arguments":{"text":"hello"}}}`)
	post := func(session string, body []byte, method, name string) ([]byte, http.Header, error) {
		req, err := http.NewRequest(http.MethodPost, hs.URL+server.PathMCP, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		h := req.Header
		h.Set("Authorization", "Bearer tok-a")
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		if method != "initialize" {
			h.Set("Mcp-Protocol-Version", version)
		}
		if modern {
			h.Set("Mcp-Method", method)
			h.Set("Mcp-Name", name)
		}
		if session != "" {
			h.Set("Mcp-Session-Id", session)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, out)
		}
		return out, resp.Header, err
	}
	sessions := make([]string, clients)
	if !modern {
		for i := range sessions {
			_, h, err := post("", []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`), "initialize", "")
			if err != nil {
				b.Fatal(err)
			}
			sessions[i] = h.Get("Mcp-Session-Id")
			if _, _, err := post(sessions[i], []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), "notifications/initialized", ""); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, ss := range sessions { // warm up
		if out, _, err := post(ss, body, "tools/call", "echo"); err != nil || !bytes.Contains(out, []byte(`"result"`)) {
			b.Fatalf("warm-up: %v %s", err, out)
		}
	}
	var next atomic.Int64
	var failed atomic.Value
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, ss := range sessions {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				out, _, err := post(ss, body, "tools/call", "echo")
				if err != nil || !bytes.Contains(out, []byte(`"result"`)) || bytes.Contains(out, []byte(`"isError":true`)) {
					failed.CompareAndSwap(nil, fmt.Sprintf("call %d: %v %s", n, err, out))
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if msg := failed.Load(); msg != nil {
		b.Fatal(msg)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}
