package main

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var pprofLine = regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+/debug/pprof/)`)

// BACKPLANE_PPROF_ADDR opens the profiles on a loopback listener of their
// own; the MCP listener does not serve them.
func TestServePprofListener(t *testing.T) {
	g := newServeDir(t)
	g.env = append(g.env, pprofEnv+"=127.0.0.1:0")
	p := startServe(t, g)
	m := pprofLine.FindStringSubmatch(p.log())
	if m == nil {
		t.Fatalf("serve did not log where the profiles are:\n%s", p.log())
	}
	code, body := httpGet(t, m[1]+"cmdline", "")
	if code != http.StatusOK || !strings.Contains(body, "serve") {
		t.Errorf("cmdline: %d %q, want 200 and serve's command line", code, body)
	}
	if code, _ := httpGet(t, p.base+"/debug/pprof/cmdline", "alice-token"); code != http.StatusNotFound {
		t.Errorf("the MCP listener answers /debug/pprof/cmdline with %d, want 404", code)
	}
	if err := p.stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// Without the variable there is no profiling listener.
func TestServeNoPprofByDefault(t *testing.T) {
	g := newServeDir(t)
	p := startServe(t, g)
	if strings.Contains(p.log(), "/debug/pprof/") {
		t.Errorf("serve opened a profiling listener without %s:\n%s", pprofEnv, p.log())
	}
	if err := p.stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// An address that is not a loopback IP is refused before serving.
func TestServePprofRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "localhost:0", "10.1.2.3:6060", "6060"} {
		g := newServeDir(t)
		g.env = append(g.env, pprofEnv+"="+addr)
		r := g.run(t, "", "serve", "--http", "127.0.0.1:0")
		if r.code == 0 || !strings.Contains(r.stderr, pprofEnv) || !strings.Contains(r.stderr, "loopback") {
			t.Errorf("%s=%s: exit %d, stderr %q; want a refusal naming the variable", pprofEnv, addr, r.code, r.stderr)
		}
	}
}

// serve collects garbage at GOGC=400 unless the environment says otherwise,
// as its own /metrics report (the Go runtime's go_gc_gogc_percent).
func TestServeGCPercent(t *testing.T) {
	for _, c := range []struct{ env, want string }{{"", "400"}, {"GOGC=150", "150"}} {
		g := newServeDir(t)
		// Whatever GOGC the tests run under is not serve's.
		g.env = slices.DeleteFunc(g.env, func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") })
		if c.env != "" {
			g.env = append(g.env, c.env)
		}
		p := startServe(t, g)
		code, body := httpGet(t, p.base+"/metrics", "ops-token")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %s", code, body)
		}
		m := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no go_gc_gogc_percent:\n%s", body)
		}
		if m[1] != c.want {
			t.Errorf("env %q: go_gc_gogc_percent %s, want %s", c.env, m[1], c.want)
		}
		if err := p.stop(t); err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	}
}
