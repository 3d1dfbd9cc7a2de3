package config

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// issueExample is the servers and serve sections of the MCP issue,
// verbatim.
const issueExample = `servers:
  - name: everything
    command: [npx, -y, "@modelcontextprotocol/server-everything"]
    validator: subset            # the default; or draft2020-12
  - name: remote
    url: http://127.0.0.1:9000/mcp
    headers: {Authorization: "Bearer upstream-secret"}
    validator: draft2020-12
serve:
  http: 127.0.0.1:8787           # streamable HTTP at /mcp, /metrics, /healthz
  tokens: {"local-dev-token": alice}   # bearer token -> caller
  stdio_caller: alice            # the caller for ` + "`backplane serve --stdio`" + `
`

func TestServersAcceptedAsWritten(t *testing.T) {
	// Beside the keys of the earlier example.
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(append(append(example, '\n'), issueExample...), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exampleLines := strings.Count(string(example), "\n") + 1
	want := []ServerConfig{
		{Name: "everything", Command: []string{"npx", "-y", "@modelcontextprotocol/server-everything"}, Validator: "subset", Line: exampleLines + 2},
		{Name: "remote", URL: "http://127.0.0.1:9000/mcp", Headers: map[string]string{"Authorization": "Bearer upstream-secret"}, Validator: "draft2020-12", Line: exampleLines + 5},
	}
	if !reflect.DeepEqual(c.Servers, want) {
		t.Errorf("Servers =\n%+v\nwant\n%+v", c.Servers, want)
	}
	if len(c.Tools) != 1 || c.Tools[0].Name != "note" {
		t.Errorf("the earlier keys were not kept: tools %+v", c.Tools)
	}
	// The validator defaults to subset.
	c, err = Parse([]byte("servers:\n  - name: a\n    command: [x]\n"), "backplane.yaml")
	if err != nil || c.Servers[0].Validator != "subset" {
		t.Errorf("default validator: %+v, %v", c.Servers, err)
	}
}

func TestServersErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		line int
		msg  string
	}{
		{"not a list", "servers: {a: 1}\n", 1, "servers must be a list"},
		{"no name", "servers:\n  - command: [x]\n", 2, "a server needs a name"},
		{"dotted name", "servers:\n  - name: a.b\n    command: [x]\n", 2, `server name "a.b"`},
		{"empty name", "servers:\n  - name: \"\"\n    command: [x]\n", 2, `server name ""`},
		{"duplicate name", "servers:\n  - name: a\n    command: [x]\n  - name: a\n    url: http://h/mcp\n", 4, "server a is already defined at line 2"},
		{"neither", "servers:\n  - name: a\n    validator: subset\n", 2, "server a needs a command"},
		{"both", "servers:\n  - name: a\n    command: [x]\n    url: http://h/mcp\n", 4, "a command or a url, not both"},
		{"empty command", "servers:\n  - name: a\n    command: []\n", 3, "command must name a program"},
		{"command a string", "servers:\n  - name: a\n    command: npx server\n", 3, "command must be a list"},
		{"env with url", "servers:\n  - name: a\n    url: http://h/mcp\n    env: [X]\n", 4, "env applies to a command"},
		{"bad env", "servers:\n  - name: a\n    command: [x]\n    env: [A-B]\n", 4, `"A-B" is not an environment variable name`},
		{"headers with command", "servers:\n  - name: a\n    command: [x]\n    headers: {A: b}\n", 4, "headers apply to a url"},
		{"bad url", "servers:\n  - name: a\n    url: ftp://h/x\n", 3, "url must be an http:// or https:// URL"},
		{"url without host", "servers:\n  - name: a\n    url: \"http:///mcp\"\n", 3, "with a host"},
		{"bad header name", "servers:\n  - name: a\n    url: http://h/mcp\n    headers:\n      \"Bad Header\": x\n", 5, `"Bad Header" is not an HTTP header name`},
		{"header not a string", "servers:\n  - name: a\n    url: http://h/mcp\n    headers:\n      X-Token: 123456789\n", 5, "the value of X-Token must be a string"},
		{"header with a newline", "servers:\n  - name: a\n    url: http://h/mcp\n    headers:\n      X-Token: \"s3cr3t\\r\\nX: y\"\n", 5, "control character"},
		{"bad validator", "servers:\n  - name: a\n    command: [x]\n    validator: draft7\n", 4, `validator "draft7": subset or draft2020-12`},
		{"unknown key", "servers:\n  - name: a\n    command: [x]\n    dir: /tmp\n", 4, `unknown key "dir" in a server`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "backplane.yaml")
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want a *config.Error", err, err)
			}
			if ce.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v, want line %d saying %q", err, tc.line, tc.msg)
			}
			// Header values are secrets.
			if strings.Contains(err.Error(), "123456789") || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the message quotes a header value: %v", err)
			}
		})
	}
}

// --- Open, with the Go test server of backend/mcp ---

var (
	testServerOnce sync.Once
	testServerDir  string // removed by TestMain when the tests end
	testServerPath string
	testServerErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testServerDir != "" {
		os.RemoveAll(testServerDir)
	}
	os.Exit(code)
}

// mcpTestServer builds backend/mcp's test server once, for every test of
// the package (so not in a t.TempDir, which the first test would remove).
func mcpTestServer(t *testing.T) string {
	t.Helper()
	testServerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "backplane-config-test")
		if err != nil {
			testServerErr = err
			return
		}
		testServerDir = dir
		testServerPath = filepath.Join(dir, "mcptestserver")
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			goTool = "go"
		}
		out, err := exec.Command(goTool, "build", "-o", testServerPath, "../backend/mcp/testdata/mcptestserver").CombinedOutput()
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
	path = filepath.Join(dir, DefaultFile)
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
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := c.Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := call(rt, "alice", "go.greet", `{"name":"ann"}`)
	if err != nil || !strings.Contains(string(res.Result), "hello, ann") {
		t.Fatalf("go.greet: %v, %v", res, err)
	}
	if src := rt.ToolSource("go.greet"); src != "server go" {
		t.Errorf("ToolSource = %q", src)
	}
	if u, ok := rt.Upstream("go"); !ok || !u.Connected() {
		t.Errorf("Upstream(go) = %v, %v", u, ok)
	}
	tool, _, _ := rt.Gateway.Tool("go.greet")
	if !tool.Pinned {
		t.Error("go.greet is not pinned")
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
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(context.Background(), nil)
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 6 || !strings.Contains(err.Error(), "go.greet collides") {
		t.Fatalf("Open: %v, want a collision at the server's line 6", err)
	}
	for _, pid := range serverPIDs(t, logFile) {
		waitGone(t, pid)
	}
}

func TestOpenFailsOnAServerThatCannotStart(t *testing.T) {
	path, logFile := serverConfig(t, `  - name: broken
    command: [./no-such-program]
`)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(context.Background(), nil)
	var ce *Error
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
