package assemble

import (
	"context"
	"errors"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/opsview"
)

// --- Open, with the Go test server of backend/upstream ---

var (
	testServerOnce sync.Once
	testServerDir  string // removed by TestMain
	testServerPath string
	testServerErr  error
)

// goTool is the go command of the toolchain that built the test.
func goTool() string {
	if p := filepath.Join(build.Default.GOROOT, "bin", "go"); build.Default.GOROOT != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testServerDir != "" {
		os.RemoveAll(testServerDir)
	}
	os.Exit(code)
}

// mcpTestServer builds backend/upstream's test server once.
func mcpTestServer(t *testing.T) string {
	t.Helper()
	testServerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "backplane-assemble-test")
		if err != nil {
			testServerErr = err
			return
		}
		testServerDir = dir
		testServerPath = filepath.Join(dir, "mcptestserver")
		out, err := exec.Command(goTool(), "build", "-o", testServerPath, "../backend/upstream/testdata/mcptestserver").CombinedOutput()
		if err != nil {
			testServerErr = errors.New(string(out))
		}
	})
	if testServerErr != nil {
		t.Fatalf("building the test MCP server: %v", testServerErr)
	}
	return testServerPath
}

// serverConfig writes a configuration whose server go runs the test server
// copied into the folder as ./mcptestserver (a path relative to the file).
func serverConfig(t *testing.T, extra string) (path, logFile string) {
	t.Helper()
	dir := t.TempDir()
	bin, err := os.ReadFile(mcpTestServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mcptestserver"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile = filepath.Join(dir, "server.log")
	t.Setenv("MCPTEST_LOG", logFile)
	path = filepath.Join(dir, config.DefaultFile)
	cfg := `policy:
  - caller: alice
    allow: ["*"]
builtin: {enable: []}
servers:
  - name: go
    command: [./mcptestserver]
    env: [MCPTEST_LOG]
` + extra
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, logFile
}

// serverPIDs reads the pids the test server logged at each start.
func serverPIDs(t *testing.T, logFile string) []int {
	t.Helper()
	data, _ := os.ReadFile(logFile)
	var pids []int
	for _, l := range strings.Split(string(data), "\n") {
		if s, ok := strings.CutPrefix(l, "start "); ok {
			pid, _ := strconv.Atoi(s)
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOpenConnectsServers(t *testing.T) {
	path, logFile := serverConfig(t, "")
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := call(rt, "alice", "go.greet", `{"name":"ann"}`)
	if err != nil || !strings.Contains(string(res.Result), "hello, ann") {
		t.Fatalf("go.greet: %v, %v", res, err)
	}
	if u, ok := rt.Upstream("go"); !ok || !u.Connected() {
		t.Errorf("Upstream(go) = %v, %v", u, ok)
	}
	tool, _, _ := rt.Gateway.Tool("go.greet")
	if !tool.Pinned {
		t.Error("go.greet is not pinned")
	}
	if tool.Source != "server go" {
		t.Errorf("go.greet's Source = %q, want the source its registration recorded, server go", tool.Source)
	}
	pids := serverPIDs(t, logFile)
	if len(pids) != 1 {
		t.Fatalf("server started %d times", len(pids))
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids[0])
}

func TestOpenRefusesACollidingServer(t *testing.T) {
	path, logFile := serverConfig(t, `tools:
  - name: go.greet
    input_schema: {type: object}
    command: [cat]
`)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), c, nil)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != 6 || !strings.Contains(err.Error(), "go.greet collides") {
		t.Fatalf("Open: %v, want a collision at the server's line 6", err)
	}
	for _, pid := range serverPIDs(t, logFile) {
		waitGone(t, pid)
	}
}

// TestOpenFailsOnARequiredServerThatCannotStart: a server marked
// required refuses a degraded start (serve's) when it cannot start; a
// one-shot command's Open fails on any server that cannot start.
func TestOpenFailsOnARequiredServerThatCannotStart(t *testing.T) {
	path, logFile := serverConfig(t, `  - name: broken
    command: [./no-such-program]
    required: true
`)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), c, &Options{Degraded: true})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != 9 || !strings.Contains(err.Error(), "server broken") {
		t.Fatalf("Open: %v, want an error at line 9 naming the server", err)
	}
	// The server connected before it was stopped.
	pids := serverPIDs(t, logFile)
	if len(pids) != 1 {
		t.Fatalf("server go started %d times", len(pids))
	}
	waitGone(t, pids[0])
}

// TestOpenServerWithoutPrefix: prefix "" exposes the server's tools under
// their own names, which the policy names bare.
func TestOpenServerWithoutPrefix(t *testing.T) {
	path, _ := serverConfig(t, `    prefix: ""
`)
	// Only the bare name is granted: a call by it must pass the policy.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `allow: ["*"]`, `allow: [greet]`, 1))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	res, err := call(rt, "alice", "greet", `{"name":"ann"}`)
	if err != nil || !strings.Contains(string(res.Result), "hello, ann") {
		t.Fatalf("greet: %+v, %v", res, err)
	}
	if _, _, ok := rt.Gateway.Tool("go.greet"); ok {
		t.Error("go.greet is registered too")
	}
	if tl, _, _ := rt.Gateway.Tool("greet"); tl.Source != "server go" {
		t.Errorf("greet's Source = %q, want server go", tl.Source)
	}
}

// TestOpenRefusesBareNameCollisions: a server without a prefix whose tool
// is named like a command tool or another server's tool is refused at
// start, the message naming both lines.
func TestOpenRefusesBareNameCollisions(t *testing.T) {
	for _, c := range []struct {
		name, extra string
		line        int    // the refused server's
		other       string // what the message must say of the other line
	}{
		{"command tool", `    prefix: ""
tools:
  - name: greet
    input_schema: {type: object}
    command: [cat]
`, 6, "the command tool at line 11"},
		{"another server", `    prefix: ""
  - name: second
    command: [./mcptestserver]
    prefix: ""
`, 10, "a tool of server go (line 6)"},
		{"a prefix that makes another server's name", `  - name: second
    command: [./mcptestserver]
    prefix: "go."
`, 9, "a tool of server go (line 6)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, logFile := serverConfig(t, c.extra)
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Open(context.Background(), cfg, nil)
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Line != c.line || !strings.Contains(err.Error(), "collides") || !strings.Contains(err.Error(), c.other) {
				t.Fatalf("Open: %v, want a collision at line %d naming %q", err, c.line, c.other)
			}
			for _, pid := range serverPIDs(t, logFile) {
				waitGone(t, pid)
			}
		})
	}
}

// TestOpenStartsDegradedWithoutABrokenServer: a server not marked required
// that cannot start does not refuse the start (issue 26, item 6): the
// gateway serves the other servers' tools, its health says the broken one
// is down and why (degraded, still ready), and a retry in the background
// connects it once it can start, registering its tools.
func TestOpenStartsDegradedWithoutABrokenServer(t *testing.T) {
	path, _ := serverConfig(t, `  - name: late
    command: [./late-server]
    env: [MCPTEST_LOG]
`)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), c, nil); err == nil || !strings.Contains(err.Error(), "server late") {
		t.Fatalf("a one-shot Open with a broken server: %v, want an error naming it", err)
	}
	rt, err := Open(context.Background(), c, &Options{Degraded: true})
	if err != nil {
		t.Fatalf("a degraded Open with a broken server not marked required: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	if _, _, ok := rt.Gateway.Tool("go.greet"); !ok {
		t.Error("the working server's tools are not registered")
	}
	checks := rt.Gateway.CheckHealth(context.Background())
	if s := opsview.State(checks); s != opsview.StateDegraded || opsview.Ready(checks) != nil || opsview.Healthy(checks) != nil {
		t.Errorf("state %q ready %v, want degraded and ready", s, opsview.Ready(checks))
	}
	for _, c := range checks {
		// The Go SDK test server offers 2026-07-28: the check says so.
		if c.Upstream == "go" && !strings.Contains(c.OK, "MCP 2026-07-28") {
			t.Errorf("the working server's check %q does not name the revision it speaks", c.OK)
		}
	}
	var late *opsview.UpstreamState
	for _, u := range rt.Gateway.Upstreams() {
		if u.Name == "late" {
			late = &u
		}
	}
	if late == nil || late.Up || late.Err == nil || !strings.Contains(late.Err.Error(), "late-server") || late.Phase != "starting" {
		t.Fatalf("the broken server's state: %+v, want down, starting, naming its program", late)
	}
	// The program appears: a retry connects it.
	bin, err := os.ReadFile(mcpTestServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "late-server"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, registered := rt.Gateway.Tool("late.greet")
		if registered && opsview.State(rt.Gateway.CheckHealth(context.Background())) == opsview.StateOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server was not connected within 30s of its program appearing: %+v", rt.Gateway.Upstreams())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if u, ok := rt.Upstream("late"); !ok || !u.Connected() {
		t.Error("the late server is not listed as an upstream")
	}
	for _, u := range rt.Gateway.Upstreams() {
		if u.Phase != "up" || u.Protocol != "2026-07-28" {
			t.Errorf("%s once connected: phase %q protocol %q, want up at 2026-07-28", u.Name, u.Phase, u.Protocol)
		}
	}
}
