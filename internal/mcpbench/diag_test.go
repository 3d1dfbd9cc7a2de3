package mcpbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/store/memstore"
)

// logEnv names a folder that, when set, gets what is needed to tell why a
// call stalled: each Go upstream's stderr (a SIGQUIT's goroutine dump
// included; set GOTRACEBACK=all too) and its message log (every JSON-RPC
// message it read and wrote), and, when a call has waited stallAfter, the
// benchmark process's goroutines. The upstream gets the variable by name
// (Server.Env).
const logEnv = "BACKPLANE_MCPBENCH_LOG"

// wireLogEnv, set to 1 beside logEnv, makes each upstream log every
// message too (which slows it, and so changes the timing being studied).
const wireLogEnv = "BACKPLANE_MCPBENCH_WIRELOG"

// stallAfter is how long a call may take before the watchdog dumps the
// goroutines of both processes: far beyond any call's normal latency, well
// within the gateway's 30 s deadline.
const stallAfter = 5 * time.Second

// upstreamLogging sends this upstream process's stderr to a file in dir and
// wraps t to log every message read and written to another.
func upstreamLogging(dir string, t mcp.Transport) mcp.Transport {
	base := filepath.Join(dir, "upstream-"+strconv.Itoa(os.Getpid()))
	if f, err := os.Create(base + ".stderr"); err == nil {
		// fd 2 itself, so that the runtime's own dumps (SIGQUIT) land there.
		syscall.Dup2(int(f.Fd()), 2)
	}
	if os.Getenv(wireLogEnv) != "1" {
		return t
	}
	w, err := os.Create(base + ".wire")
	if err != nil {
		return t
	}
	return &mcp.LoggingTransport{Transport: t, Writer: &stampWriter{w: w}}
}

// stampWriter prefixes each write (one log line) with the time.
type stampWriter struct{ w *os.File }

func (s *stampWriter) Write(p []byte) (int, error) {
	_, err := s.w.Write(append([]byte(time.Now().Format("15:04:05.000000 ")), p...))
	return len(p), err
}

// watchdog watches a sequence of calls: when one has been waiting
// stallAfter, it writes the goroutines of this process to dir and sends
// SIGQUIT to this process's children (the upstreams), once. It does
// nothing without a folder.
type watchdog struct {
	dir     string
	started atomic.Int64 // UnixNano of the call in flight, 0 when none
	stop    chan struct{}
}

func startWatchdog(b testing.TB, dir string) *watchdog {
	w := &watchdog{dir: dir, stop: make(chan struct{})}
	if w.dir == "" {
		return w
	}
	go w.run()
	b.Cleanup(func() { close(w.stop) })
	return w
}

func (w *watchdog) begin() { w.started.Store(time.Now().UnixNano()) }
func (w *watchdog) end()   { w.started.Store(0) }

func (w *watchdog) run() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		s := w.started.Load()
		if s == 0 || time.Since(time.Unix(0, s)) < stallAfter {
			continue
		}
		w.dump()
		return
	}
}

func (w *watchdog) dump() {
	name := filepath.Join(w.dir, "gateway-"+strconv.Itoa(os.Getpid())+".stall")
	fmt.Fprintf(os.Stderr, "a call has waited %v: goroutines in %s, the upstreams' in %s\n", stallAfter, name, filepath.Join(w.dir, "upstream-*.stderr"))
	f, err := os.Create(name)
	if err == nil {
		fmt.Fprintf(f, "a call stalled at %s\n", time.Now().Format("15:04:05.000000"))
		pprof.Lookup("goroutine").WriteTo(f, 2)
		f.Close()
	}
	for _, pid := range children() {
		syscall.Kill(pid, syscall.SIGQUIT)
	}
}

// children are the process ids whose parent is this process (Linux).
func children() []int {
	me := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(me) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stressEnv, set to a duration, makes TestStressChain run.
const stressEnv = "BACKPLANE_MCPBENCH_STRESS"

// TestStressChain makes sequential calls through the gateway-memstore
// chain of BenchmarkMCPProxy (client, ServeStdio on OS pipes, gateway,
// backend/upstream, the Go upstream process) for the duration in
// BACKPLANE_MCPBENCH_STRESS, without the benchmark's restarts, and fails
// on the first call that does not answer: the watchdog leaves its dumps in
// BACKPLANE_MCPBENCH_LOG (a temporary folder when unset, named in the
// failure) and ends the stall after stallAfter. For reproducing rare
// stalls:
//
//	go test -c -o mcp.test ./internal/mcpbench
//	GOTRACEBACK=all BACKPLANE_MCPBENCH_STRESS=2m ./mcp.test -test.run TestStressChain
func TestStressChain(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(stressEnv))
	if err != nil {
		t.Skip(stressEnv + " is not set to a duration")
	}
	dir := os.Getenv(logEnv)
	if dir == "" {
		// A folder of its own, removed when no call stalled.
		dir, err = os.MkdirTemp("", "mcpbench-stress")
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(logEnv, dir)
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(dir)
			}
		})
	}
	cs := throughGateway(t, memstore.New(), goUpstream(t))
	wd := startWatchdog(t, dir)
	params := &mcp.CallToolParams{Name: "up.echo", Arguments: map[string]any{"text": "stress"}}
	n, slow := 0, 0
	var longest time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		start := time.Now()
		wd.begin()
		res, err := cs.CallTool(context.Background(), params)
		wd.end()
		took := time.Since(start)
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %+v (the dumps, if any, are in %s)", n, err, res, dir)
		}
		longest = max(longest, took)
		if took >= slowCall {
			// Most likely a stall that backend/upstream's nudge ended.
			slow++
			t.Logf("call %d took %v", n, took)
		}
	}
	t.Logf("%d calls, %d of them over %v, the longest %v", n, slow, slowCall, longest)
}

// slowCall is a call's latency worth reporting in TestStressChain: far
// above the p99 (tens of milliseconds under load), under the nudge's 1 s.
const slowCall = 500 * time.Millisecond
