package assemble

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
)

// heldServerConfig writes a configuration whose server "slow" is the test
// server holding its start until the returned gate file exists.
func heldServerConfig(t *testing.T, extra string) (cfg *config.Config, gate string) {
	t.Helper()
	dir := t.TempDir()
	gate = filepath.Join(dir, "gate")
	t.Setenv("MCPTEST_START_GATE", gate)
	path := filepath.Join(dir, config.DefaultFile)
	text := `policy:
  - caller: alice
    allow: ["*"]
builtin: {enable: []}
servers:
  - name: slow
    command: [` + mcpTestServer(t) + `]
    env: [MCPTEST_START_GATE]
` + extra
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c, gate
}

// lineWriter collects what is written and signals each write.
type lineWriter struct {
	mu    sync.Mutex
	b     strings.Builder
	wrote chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A server that takes long to start gets a "still starting" line on
// stderr, naming it and its connect_timeout, and Open then succeeds.
func TestSlowServerStartSaysSo(t *testing.T) {
	c, gate := heldServerConfig(t, "    connect_timeout: 5m\n")
	stderr := &lineWriter{wrote: make(chan struct{}, 1)}
	type outcome struct {
		rt  *Runtime
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rt, err := Open(context.Background(), c, &Options{Stderr: stderr, AuditLog: filepath.Join(t.TempDir(), "audit.log")})
		done <- outcome{rt, err}
	}()
	for !strings.Contains(stderr.String(), "still starting server slow") {
		select {
		case <-stderr.wrote:
		case o := <-done:
			t.Fatalf("Open returned while the server was held: %v\nstderr: %s", o.err, stderr)
		case <-time.After(60 * time.Second):
			t.Fatalf("no progress line on stderr: %q", stderr)
		}
	}
	if !strings.Contains(stderr.String(), "of connect_timeout 5m0s") {
		t.Errorf("the progress line does not name the connect timeout: %q", stderr)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("Open after the gate opened: %v", o.err)
	}
	defer o.rt.Close()
	if _, _, ok := o.rt.Gateway.Tool("slow.greet"); !ok {
		t.Error("slow.greet is not registered")
	}
}

// connect_timeout bounds the start; the error names the server's line
// and the timeout.
func TestConnectTimeoutFromTheConfiguration(t *testing.T) {
	c, _ := heldServerConfig(t, "    connect_timeout: 1s\n")
	if c.Servers[0].ConnectTimeout != time.Second {
		t.Fatalf("ConnectTimeout = %v", c.Servers[0].ConnectTimeout)
	}
	_, err := Open(context.Background(), c, &Options{AuditLog: filepath.Join(t.TempDir(), "audit.log")})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != 6 || !errors.Is(err, upstream.ErrStartTimeout) || !strings.Contains(err.Error(), "1s") {
		t.Fatalf("Open: %v, want ErrStartTimeout at line 6 naming 1s", err)
	}
}

// The configuration's default is the upstream package's.
func TestDefaultConnectTimeoutsAgree(t *testing.T) {
	if config.DefaultConnectTimeout != upstream.DefaultConnectTimeout {
		t.Errorf("config.DefaultConnectTimeout %v, upstream.DefaultConnectTimeout %v", config.DefaultConnectTimeout, upstream.DefaultConnectTimeout)
	}
}
