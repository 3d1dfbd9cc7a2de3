package upstream

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// slowServer is the test server holding its start until the returned gate
// file exists.
func slowServer(t *testing.T) (Server, string) {
	t.Helper()
	srv, _ := testServerSpec(t, "slow")
	gate := filepath.Join(t.TempDir(), "gate")
	t.Setenv("MCPTEST_START_GATE", gate)
	srv.Env = append(srv.Env, "MCPTEST_START_GATE")
	return srv, gate
}

// A start that takes long reports progress while it waits, and stops
// reporting once Connect returns.
func TestSlowStartReportsProgress(t *testing.T) {
	e := newEnv(t)
	srv, gate := slowServer(t)
	var reports atomic.Int64
	reported := make(chan struct{}, 1)
	type outcome struct {
		u   *Upstream
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		u, err := e.tryConnect(srv, &Options{
			ProgressEvery: 10 * time.Millisecond,
			StartProgress: func(time.Duration) {
				reports.Add(1)
				select {
				case reported <- struct{}{}:
				default:
				}
			},
		})
		done <- outcome{u, err}
	}()
	select {
	case <-reported:
	case o := <-done:
		t.Fatalf("Connect returned before the gate opened: %v", o.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no progress report while the server was held")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("Connect after the gate opened: %v", o.err)
	}
	t.Cleanup(func() { o.u.Close() })
	after := reports.Load()
	if res := e.mustCall(t, "slow.greet", `{"name":"x"}`); res == nil {
		t.Fatal("no result")
	}
	if n := reports.Load(); n != after {
		t.Errorf("%d progress reports after Connect returned", n-after)
	}
}

// ConnectTimeout bounds a start that never ends: Connect fails, naming
// the server, with nothing registered.
func TestConnectTimeoutBoundsTheStart(t *testing.T) {
	e := newEnv(t)
	srv, _ := slowServer(t)
	u, err := e.tryConnect(srv, &Options{ConnectTimeout: 300 * time.Millisecond})
	if err == nil {
		u.Close()
		t.Fatal("Connect succeeded although the server never answered")
	}
	if !errors.Is(err, ErrStartTimeout) || !strings.Contains(err.Error(), "server slow") || !strings.Contains(err.Error(), "300ms") {
		t.Errorf("error %q: want ErrStartTimeout, the server's name and the timeout", err)
	}
	if _, _, ok := e.g.Tool("slow.greet"); ok {
		t.Error("slow.greet is registered after a failed Connect")
	}
}

func TestStartProgressStops(t *testing.T) {
	stop := startProgress(nil, 0) // nil: nothing to do
	stop()
	var n atomic.Int64
	stop = startProgress(func(time.Duration) { n.Add(1) }, time.Millisecond)
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	stop()
	after := n.Load()
	time.Sleep(20 * time.Millisecond)
	if n.Load() != after {
		t.Error("reports after stop returned")
	}
}
