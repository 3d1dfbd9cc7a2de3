package server_test

import (
	"context"
	"fmt"
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
