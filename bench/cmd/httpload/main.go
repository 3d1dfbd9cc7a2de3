// Command httpload compares gateways that serve a stdio MCP server over
// streamable HTTP: Backplane's `backplane serve`, mcp-proxy and
// supergateway (npm), and a floor, rawhttp (plain net/http answering with
// canned bodies of the same sizes). It is run by scripts/bench-http, which
// builds and installs what it needs; it is no test (it measures time, on
// whatever else the machine is doing).
//
// It starts each gateway once, on 127.0.0.1 only, with the same upstream
// (the -echo program, started by the gateway), opens -clients MCP clients
// to each with the official Go SDK client, warms them up, then runs
// -rounds rounds; within a round the gateways take turns, in an order
// rotated by one each round, so that each sees the same machine states. A
// round makes -calls tools/call requests of the echo tool, spread over the
// clients, each client one request at a time, each request bounded by
// -timeout. A call that fails, times out or whose answer is not the echo
// is counted as an error and the round goes on. For each round and
// gateway it prints calls/s, p50 and p99 latency, errors, and the CPU
// time per call of the gateway's process, of its upstream and of the
// clients, this process (utime+stime from /proc/PID/stat, before and
// after the round), with /proc/loadavg; then the medians, as a Markdown
// table with the CPU-bound ceiling the three imply, and the ratios the targets of
// issue 27 name: each Backplane's calls/s over the fastest peer's (per
// round, then the median) and its CPU per call over rawhttp's.
//
// Backplane runs with a configuration written to a temporary folder: a
// SQLite store in that folder, serve.http on a free loopback port, one
// caller token, a policy allowing only the upstream's echo tool; the audit
// log goes to the store folder (the default). Its clients speak -protocol
// (2026-07-28: no session, every request self-contained; 2025-11-25: a
// session each), or the version a gateway name gives (backplane@2025-11-25).
// mcp-proxy runs with --server stream and no API key, supergateway with
// --outputTransport streamableHttp --stateful (a session per client, as
// its stateless mode starts an upstream per request), kept on loopback by
// bench/http/loopback.cjs; both speak 2025-11-25 (they serve no
// 2026-07-28), as does rawhttp.
//
// To compare builds or settings in the same run, -gateways may also name
// backplane-b (the binary of -backplane-b) and either with more
// environment: backplane:GOGC=100, backplane@2025-11-25:GOGC=100.
//
// With -cpuprofile FILE, after the rounds, Backplane's process is profiled
// under the same load for -profile-seconds (through its opt-in pprof
// listener, BACKPLANE_PPROF_ADDR): the CPU profile is written to FILE and
// the allocations of those seconds to FILE.allocs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// sessionVersion is what the clients of the peers propose: the newest
// version they serve (over sessions).
const sessionVersion = "2025-11-25"

// statelessVersion is the MCP revision without sessions.
const statelessVersion = "2026-07-28"

const token = "bench-token"

type options struct {
	backplane, backplaneB  string
	mcpProxy, echo         string
	supergateway, rawHTTP  string
	loopbackJS             string
	protocol               string
	gateways               []string
	clients, calls, warmup int
	rounds                 int
	timeout                time.Duration
	cpuProfile             string
	profileSeconds         int
	keep                   bool
}

func main() {
	var o options
	var gateways string
	flag.StringVar(&o.backplane, "backplane", "", "the backplane binary")
	flag.StringVar(&o.backplaneB, "backplane-b", "", "a second backplane binary, the gateway backplane-b (another build, to compare)")
	flag.StringVar(&o.mcpProxy, "mcp-proxy", "", "the mcp-proxy program (bench/http/node_modules/.bin/mcp-proxy)")
	flag.StringVar(&o.supergateway, "supergateway", "", "the supergateway program (bench/http/node_modules/.bin/supergateway)")
	flag.StringVar(&o.loopbackJS, "loopback-js", "", "bench/http/loopback.cjs, preloaded into supergateway so that it listens on 127.0.0.1 only (required with supergateway)")
	flag.StringVar(&o.rawHTTP, "rawhttp", "", "the rawhttp program (bench/cmd/rawhttp), the gateway raw")
	flag.StringVar(&o.protocol, "protocol", statelessVersion, "the MCP version backplane's clients speak: 2026-07-28 (stateless) or 2025-11-25 (sessions); a gateway name's @VERSION overrides it")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Second, "bound of each call; one that takes longer is an error")
	flag.StringVar(&o.echo, "echo", "", "the upstream: a stdio MCP server with an echo tool taking {message} (bench/cmd/echoserver)")
	flag.StringVar(&gateways, "gateways", "backplane,mcp-proxy",
		"the gateways to compare (the order of the first round; rotated by one each round): backplane, backplane-b (-backplane-b), mcp-proxy, supergateway, raw (-rawhttp);\nbackplane@VERSION speaks VERSION (see -protocol); backplane:K=V:K=V is backplane with more environment (backplane:GOGC=400)")
	flag.IntVar(&o.clients, "clients", 8, "concurrent MCP clients per gateway (sessions, at 2025-11-25)")
	flag.IntVar(&o.calls, "calls", 4000, "calls per round and gateway, spread over the sessions")
	flag.IntVar(&o.warmup, "warmup", 500, "calls per gateway before the first round, not measured")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "after the rounds, write a CPU profile of backplane's process under the same load to this file")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 10, "how long -cpuprofile profiles")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary folder (backplane's store, audit log and configuration)")
	flag.Parse()
	o.gateways = strings.Split(gateways, ",")
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "httpload:", err)
		os.Exit(1)
	}
}

// gateway is one running gateway process and the sessions open to it.
type gateway struct {
	name     string
	cmd      *exec.Cmd
	url      string
	pprof    string // backplane's pprof listener, when profiling
	sessions []*mcp.ClientSession
	protocol string // what its clients speak
	tool     string
	timeout  time.Duration
	stderr   *tailBuffer
	exited   chan struct{} // closed when the process has exited
}

// result is one round of one gateway.
type result struct {
	callsPerSec      float64
	p50, p99         time.Duration
	cpuPerCall       time.Duration // the gateway's process
	upstreamPerCall  time.Duration // its upstream's process
	clientPerCall    time.Duration // this process: the clients driving it
	upstreamObserved bool
	errors           int    // calls that failed, timed out or did not echo
	firstError       string // the first of them
	load             string // /proc/loadavg after the round
}

func run(o options) error {
	if o.clients < 1 || o.calls < o.clients || o.rounds < 1 {
		return errors.New("need -clients >= 1, -calls >= -clients and -rounds >= 1")
	}
	dir, err := os.MkdirTemp("", "httpload-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("temporary folder:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var gws []*gateway
	defer func() {
		for _, g := range gws {
			g.stop()
		}
	}()
	for _, name := range o.gateways {
		var g *gateway
		switch base, _, _ := strings.Cut(name, ":"); {
		case strings.HasPrefix(base, "backplane"):
			g, err = startBackplane(ctx, o, name, filepath.Join(dir, fmt.Sprint(len(gws))))
		case name == "mcp-proxy":
			g, err = startMCPProxy(ctx, o)
		case name == "supergateway":
			g, err = startSupergateway(ctx, o)
		case name == "raw":
			g, err = startRaw(ctx, o)
		default:
			err = fmt.Errorf("unknown gateway %q (backplane, backplane-b, mcp-proxy, supergateway, raw)", name)
		}
		if err != nil {
			return err
		}
		g.timeout = o.timeout
		gws = append(gws, g)
		if err := g.open(ctx, o.clients); err != nil {
			return fmt.Errorf("%s: %w\n%s", name, err, g.stderr)
		}
		if res, err := g.round(ctx, o.warmup); err != nil || res.errors > 0 {
			return fmt.Errorf("%s: warm-up: %v %s\n%s", name, err, res.firstError, g.stderr)
		}
	}

	fmt.Printf("%d clients per gateway, %d calls per round, %d rounds, timeout %s per call; upstream %s\n", o.clients, o.calls, o.rounds, o.timeout, o.echo)
	fmt.Printf("load average at start: %s\n", loadAverage())
	all := map[string][]result{}
	for r := 1; r <= o.rounds; r++ {
		// Rotate the order by one each round: every gateway takes every
		// place in turn.
		order := make([]*gateway, len(gws))
		for i := range gws {
			order[i] = gws[(i+r-1)%len(gws)]
		}
		for _, g := range order {
			res, err := g.round(ctx, o.calls)
			if err != nil {
				return fmt.Errorf("%s: round %d: %w\n%s", g.name, r, err, g.stderr)
			}
			all[g.name] = append(all[g.name], res)
			fmt.Printf("round %d %-26s %8.0f calls/s  p50 %7s  p99 %7s  CPU/call %6s  upstream CPU/call %s  client CPU/call %s  errors %d  (load %s)\n",
				r, g.label(), res.callsPerSec, us(res.p50), us(res.p99), us(res.cpuPerCall), upstreamCPU(res), us(res.clientPerCall), res.errors, res.load)
			if res.errors > 0 {
				fmt.Printf("        first error: %s\n", res.firstError)
			}
		}
	}
	fmt.Println()
	report(gws, all, o)
	for _, g := range gws {
		fmt.Printf("%-26s peak RSS %s, upstream %s\n", g.label(), peakRSS(g.cmd.Process.Pid), peakRSS(firstOr0(descendants(g.cmd.Process.Pid))))
	}
	fmt.Printf("load average at end: %s\n", loadAverage())

	if o.cpuProfile != "" {
		for _, g := range gws {
			if g.name == "backplane" || strings.HasPrefix(g.name, "backplane@") || strings.HasPrefix(g.name, "backplane:") { // the first plain one
				if err := g.profile(ctx, o); err != nil {
					return fmt.Errorf("profile: %w", err)
				}
				fmt.Printf("CPU profile of %s (%ds under the same load): %s\n", g.label(), o.profileSeconds, o.cpuProfile)
				break
			}
		}
	}
	return nil
}

// label names g with the version its clients speak.
func (g *gateway) label() string {
	if strings.Contains(g.name, "@") {
		return g.name
	}
	return g.name + " (" + g.protocol + ")"
}

// isPeer reports whether g is one of the gateways Backplane is compared
// with (not Backplane, not the raw floor).
func (g *gateway) isPeer() bool { return g.name == "mcp-proxy" || g.name == "supergateway" }

// report prints the medians of the rounds as a Markdown table, then each
// Backplane's calls/s over the fastest peer's and its CPU per call over
// the raw floor's.
func report(gws []*gateway, all map[string][]result, o options) {
	fmt.Printf("medians of %d rounds, %d clients (load per round in the lines above):\n\n", o.rounds, o.clients)
	fmt.Println("| gateway | calls/s | p50 | p99 | CPU per call | upstream CPU per call | client CPU per call | CPU-bound ceiling | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	med := map[string]result{}
	for _, g := range gws {
		m := median(all[g.name])
		med[g.name] = m
		errs := 0
		for _, r := range all[g.name] {
			errs += r.errors
		}
		fmt.Printf("| %s | %.0f | %s | %s | %s | %s | %s | %s | %d |\n", g.label(), m.callsPerSec, ms(m.p50), ms(m.p99), us(m.cpuPerCall), upstreamCPU(m), us(m.clientPerCall), ceiling(m), errs)
	}
	fmt.Println()
	fmt.Printf("CPU-bound ceiling: the calls/s at which the gateway, its upstream and the clients, at their CPU per call, would use all %d cores.\n\n", runtime.NumCPU())
	var raw *gateway
	for _, g := range gws {
		if g.name == "raw" {
			raw = g
		}
	}
	for _, b := range gws {
		if !strings.HasPrefix(b.name, "backplane") {
			continue
		}
		// Per round: over the fastest peer of that round (the same
		// machine state).
		var ratios []float64
		for i, br := range all[b.name] {
			fastest := 0.0
			for _, p := range gws {
				if p.isPeer() {
					fastest = max(fastest, all[p.name][i].callsPerSec)
				}
			}
			if fastest > 0 {
				ratios = append(ratios, br.callsPerSec/fastest)
			}
		}
		if len(ratios) > 0 {
			slices.Sort(ratios)
			fmt.Printf("%s / fastest peer, calls/s: median %.2fx (per round, sorted: %s)\n", b.label(), medianOf(ratios), fmtRatios(ratios))
		}
		if raw != nil && med[raw.name].cpuPerCall > 0 {
			var cpu []float64
			for i, br := range all[b.name] {
				if rr := all[raw.name][i].cpuPerCall; rr > 0 {
					cpu = append(cpu, float64(br.cpuPerCall)/float64(rr))
				}
			}
			slices.Sort(cpu)
			fmt.Printf("%s / raw net/http, CPU per call: median %.1fx (per round, sorted: %s)\n", b.label(), medianOf(cpu), fmtRatios(cpu))
		}
	}
}

func medianOf(v []float64) float64 {
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// startBackplane writes a configuration into dir and starts `backplane
// serve`; name is backplane or backplane-b (the binary of -backplane-b),
// with :K=V:K=V for more environment.
func startBackplane(ctx context.Context, o options, name, dir string) (*gateway, error) {
	base, e, hasEnv := strings.Cut(name, ":")
	base, version, hasVersion := strings.Cut(base, "@")
	if !hasVersion {
		version = o.protocol
	}
	if version != statelessVersion && version != sessionVersion {
		return nil, fmt.Errorf("%s: protocol version %q: want %s or %s", name, version, statelessVersion, sessionVersion)
	}
	var bin, flagName string
	switch base {
	case "backplane":
		bin, flagName = o.backplane, "-backplane"
	case "backplane-b":
		bin, flagName = o.backplaneB, "-backplane-b"
	default:
		return nil, fmt.Errorf("unknown gateway %q", name)
	}
	if bin == "" {
		return nil, fmt.Errorf("%s is required", flagName)
	}
	var env []string
	if hasEnv {
		env = strings.Split(e, ":")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// JSON is YAML: every string quoted, whatever the paths hold. One
	// caller makes every call: serve.rate_limit (100/s by default) is off,
	// or it would be what is measured, and the caller may hold a session
	// per client (16 by default).
	cfg := fmt.Sprintf(`{
  "store": %q,
  "workspace": %q,
  "serve": {"http": "127.0.0.1:%d", "tokens": {%q: "bench"}, "rate_limit": {"per_second": 0}, "max_sessions_per_caller": %d},
  "policy": [{"caller": "bench", "allow": ["echo.echo"]}],
  "servers": [{"name": "echo", "command": [%q]}]
}
`, filepath.Join(dir, "state"), filepath.Join(dir, "workspace"), port, token, max(16, o.clients), o.echo)
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "backplane.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	g := &gateway{name: name, url: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), tool: "echo.echo", protocol: version}
	g.cmd = exec.CommandContext(ctx, bin, "serve", "--config", path)
	g.cmd.Env = append(os.Environ(), env...)
	if o.cpuProfile != "" {
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		g.pprof = fmt.Sprintf("127.0.0.1:%d", pp)
		g.cmd.Env = append(g.cmd.Env, "BACKPLANE_PPROF_ADDR="+g.pprof)
	}
	return g, g.start(port)
}

// startMCPProxy starts mcp-proxy over the upstream, streamable HTTP only.
func startMCPProxy(ctx context.Context, o options) (*gateway, error) {
	if o.mcpProxy == "" {
		return nil, errors.New("-mcp-proxy is required")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	g := &gateway{name: "mcp-proxy", url: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), tool: "echo", protocol: sessionVersion}
	g.cmd = exec.CommandContext(ctx, o.mcpProxy, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--server", "stream", "--streamEndpoint", "/mcp", "--", o.echo)
	return g, g.start(port)
}

// startSupergateway starts supergateway over the upstream, streamable
// HTTP with a session per client (its stateless mode would start an
// upstream per request), listening on 127.0.0.1 only (-loopback-js).
func startSupergateway(ctx context.Context, o options) (*gateway, error) {
	if o.supergateway == "" || o.loopbackJS == "" {
		return nil, errors.New("-supergateway and -loopback-js are required")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	g := &gateway{name: "supergateway", url: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), tool: "echo", protocol: sessionVersion}
	g.cmd = exec.CommandContext(ctx, o.supergateway, "--stdio", o.echo, "--outputTransport", "streamableHttp",
		"--stateful", "--port", strconv.Itoa(port), "--streamableHttpPath", "/mcp", "--logLevel", "none")
	g.cmd.Env = append(os.Environ(), "NODE_OPTIONS=--require "+o.loopbackJS)
	return g, g.start(port)
}

// startRaw starts the raw net/http floor (no upstream).
func startRaw(ctx context.Context, o options) (*gateway, error) {
	if o.rawHTTP == "" {
		return nil, errors.New("-rawhttp is required")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	g := &gateway{name: "raw", url: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), tool: "echo", protocol: sessionVersion}
	g.cmd = exec.CommandContext(ctx, o.rawHTTP, "-addr", fmt.Sprintf("127.0.0.1:%d", port))
	return g, g.start(port)
}

// start starts the process and waits until it accepts connections on port.
func (g *gateway) start(port int) error {
	g.stderr = &tailBuffer{max: 8 << 10}
	g.cmd.Stdout, g.cmd.Stderr = g.stderr, g.stderr
	// Its own process group: stop ends the upstream it started, too.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	g.exited = make(chan struct{})
	go func() { g.cmd.Wait(); close(g.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-g.exited:
			return fmt.Errorf("%s exited before listening:\n%s", g.name, g.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not listen on port %d after 60s:\n%s", g.name, port, g.stderr)
		}
	}
}

func (g *gateway) stop() {
	for _, s := range g.sessions {
		s.Close()
	}
	if g.cmd != nil && g.cmd.Process != nil {
		syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
			<-g.exited
		}
	}
}

// bearerTransport adds the caller's token to every request.
type bearerTransport struct{ base http.RoundTripper }

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return t.base.RoundTrip(r)
}

// open connects n sessions.
func (g *gateway) open(ctx context.Context, n int) error {
	// One connection pool per gateway, large enough for every session's
	// request and its standalone stream.
	hc := &http.Client{Transport: bearerTransport{&http.Transport{MaxIdleConnsPerHost: 4 * n}}}
	client := mcp.NewClient(&mcp.Implementation{Name: "httpload", Version: "v0"}, nil)
	// At 2026-07-28 the client discovers and sends self-contained
	// requests (its default); at 2025-11-25 it opens a session.
	var copts *mcp.ClientSessionOptions
	if g.protocol != statelessVersion {
		copts = &mcp.ClientSessionOptions{ProtocolVersion: g.protocol}
	}
	for range n {
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.url, HTTPClient: hc, MaxRetries: -1}, copts)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		if v := cs.InitializeResult().ProtocolVersion; v != g.protocol {
			cs.Close()
			return fmt.Errorf("the client speaks %s with %s, want %s", v, g.name, g.protocol)
		}
		g.sessions = append(g.sessions, cs)
	}
	return nil
}

// round makes calls calls over the sessions and measures them.
func (g *gateway) round(ctx context.Context, calls int) (result, error) {
	cpu0, err := cpuTime(g.cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	up0, _ := upstreamCPUTime(g.cmd.Process.Pid)
	self0, _ := cpuTime(os.Getpid())
	lat, wall, errs, first := g.drive(ctx, calls, nil)
	self1, _ := cpuTime(os.Getpid())
	cpu1, err := cpuTime(g.cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	res := result{
		callsPerSec: float64(calls) / wall.Seconds(),
		p50:         percentile(lat, 50),
		p99:         percentile(lat, 99),
		cpuPerCall:  (cpu1 - cpu0) / time.Duration(calls),
		// The generator's own CPU: on a machine whose cores the gateway,
		// its upstream and the clients share, the three together bound
		// the calls/s (see report).
		clientPerCall: (self1 - self0) / time.Duration(calls),
		errors:        errs,
		firstError:    first,
		load:          loadAverage(),
	}
	// The upstream's CPU time is measured over the same processes before
	// and after (it is started once, at the gateway's start).
	if up1, ok := upstreamCPUTime(g.cmd.Process.Pid); ok {
		res.upstreamPerCall, res.upstreamObserved = (up1-up0)/time.Duration(calls), true
	}
	return res, nil
}

// drive makes calls calls (or, with stop, calls until stop is closed) from
// every client at once, and returns the latency of every call that
// succeeded, the wall time, and how many failed (an error, the timeout,
// an answer that is not the echo), with the first failure. A failure
// does not stop the others.
func (g *gateway) drive(ctx context.Context, calls int, stop <-chan struct{}) ([]time.Duration, time.Duration, int, string) {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		lat   = make([]time.Duration, 0, calls)
		errs  int
		first string
		wg    sync.WaitGroup
	)
	start := time.Now()
	for c, cs := range g.sessions {
		wg.Go(func() {
			var mine []time.Duration
			for {
				i := next.Add(1)
				if stop == nil && i > int64(calls) {
					break
				}
				if stopped(stop) {
					break
				}
				msg := fmt.Sprintf("call %d of session %d", i, c)
				cctx, cancel := context.WithTimeout(ctx, g.timeout)
				t0 := time.Now()
				res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: g.tool, Arguments: map[string]any{"message": msg}})
				d := time.Since(t0)
				cancel()
				if err == nil {
					err = checkEcho(res, msg)
				}
				if err != nil {
					mu.Lock()
					if errs++; errs == 1 {
						first = err.Error()
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, d)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return lat, time.Since(start), errs, first
}

// stopped reports whether stop (nil: never) is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// checkEcho checks that res is the echo of msg.
func checkEcho(res *mcp.CallToolResult, msg string) error {
	if res.IsError {
		return fmt.Errorf("the call failed: %s", textOf(res))
	}
	if got := textOf(res); got != "Echo: "+msg {
		return fmt.Errorf("the answer is %q, not the echo of %q", got, msg)
	}
	return nil
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// profile takes a CPU profile of backplane's process through its pprof
// listener while the sessions keep calling.
func (g *gateway) profile(ctx context.Context, o options) error {
	if g.pprof == "" {
		return errors.New("backplane was started without a pprof listener")
	}
	cpu0, err := cpuTime(g.cmd.Process.Pid)
	if err != nil {
		return err
	}
	alloc0, aerr := totalAlloc(g.pprof)
	stop := make(chan struct{})
	driven := make(chan error, 1)
	var calls int
	go func() {
		lat, _, errs, first := g.drive(ctx, 0, stop)
		calls = len(lat)
		if errs > 0 {
			driven <- fmt.Errorf("%d calls failed while profiling, the first: %s", errs, first)
			return
		}
		driven <- nil
	}()
	// The CPU profile and the allocations over the same seconds.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, kind := range []string{"profile", "allocs"} {
		file := o.cpuProfile
		if kind == "allocs" {
			file += ".allocs"
		}
		wg.Go(func() {
			errs[i] = fetch(fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", g.pprof, kind, o.profileSeconds), file)
		})
	}
	wg.Wait()
	close(stop)
	if err := <-driven; err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// The profile's samples divided by these calls give CPU per call by
	// function.
	alloc1, aerr1 := totalAlloc(g.pprof)
	if cpu1, err := cpuTime(g.cmd.Process.Pid); err == nil && calls > 0 {
		perCall := "?"
		if aerr == nil && aerr1 == nil {
			perCall = fmt.Sprintf("%.1f KB", float64(alloc1-alloc0)/float64(calls)/1000)
		}
		fmt.Printf("profiled: %d calls, CPU/call %s, allocated per call %s (the runtime's TotalAlloc; load %s); allocations in %s.allocs\n",
			calls, us((cpu1-cpu0)/time.Duration(calls)), perCall, loadAverage(), o.cpuProfile)
	}
	return nil
}

// totalAlloc is the bytes the process at the pprof listener addr has
// allocated so far (runtime.MemStats.TotalAlloc, as its allocs profile's
// text form says it).
func totalAlloc(addr string) (uint64, error) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/allocs?debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "# TotalAlloc = "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no TotalAlloc in the allocs profile")
}

// fetch writes what url answers into file.
func fetch(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// descendants are the processes below pid (the upstream the gateway
// started, and whatever that started), from every thread's children list.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
				out = append(out, descendants(n)...)
			}
		}
	}
	return out
}

// upstreamCPUTime is the CPU time of pid's descendants, and whether there
// are any.
func upstreamCPUTime(pid int) (time.Duration, bool) {
	var sum time.Duration
	pids := descendants(pid)
	for _, p := range pids {
		if t, err := cpuTime(p); err == nil {
			sum += t
		}
	}
	return sum, len(pids) > 0
}

// cpuTime is the user plus system CPU time pid has used, all its threads.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// peakRSS is pid's peak resident set size (VmHWM), as /proc says it.
func peakRSS(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}

func firstOr0(p []int) int {
	if len(p) == 0 {
		return 0
	}
	return p[0]
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// median is the per-field median of the rounds.
func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return result{
		callsPerSec:      pick(func(r result) float64 { return r.callsPerSec }),
		p50:              time.Duration(pick(func(r result) float64 { return float64(r.p50) })),
		p99:              time.Duration(pick(func(r result) float64 { return float64(r.p99) })),
		cpuPerCall:       time.Duration(pick(func(r result) float64 { return float64(r.cpuPerCall) })),
		upstreamPerCall:  time.Duration(pick(func(r result) float64 { return float64(r.upstreamPerCall) })),
		clientPerCall:    time.Duration(pick(func(r result) float64 { return float64(r.clientPerCall) })),
		upstreamObserved: len(rs) > 0 && rs[0].upstreamObserved,
	}
}

func us(d time.Duration) string { return fmt.Sprintf("%dus", d.Microseconds()) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func upstreamCPU(r result) string {
	if !r.upstreamObserved {
		return "n/a"
	}
	return us(r.upstreamPerCall)
}

// ceiling is the calls/s at which the machine's cores would be busy with
// r's three processes alone: NumCPU seconds of CPU per second over the CPU
// one call costs all of them. No gateway can go faster here, whatever its
// latency; at 2x a peer's calls/s, Backplane's three together must cost at
// most half the cores' time per call.
func ceiling(r result) string {
	per := r.cpuPerCall + r.upstreamPerCall + r.clientPerCall
	if per <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", float64(runtime.NumCPU())*float64(time.Second)/float64(per))
}

func fmtRatios(r []float64) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprintf("%.2fx", v)
	}
	return strings.Join(s, " ")
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// tailBuffer keeps the last max bytes written to it: a gateway's output,
// shown when it fails.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
