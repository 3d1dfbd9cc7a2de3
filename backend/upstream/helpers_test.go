package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/sqlite"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testServer is the Go MCP server of testdata/mcptestserver, built once.
var testServer string

func TestMain(m *testing.M) {
	if os.Getenv("BACKPLANE_MCP_HELPER") == "1" {
		helperGateway()
		return
	}
	os.Exit(buildAndRun(m))
}

// helperGateway is the test binary run as a gateway process that connects
// the test server and waits to be killed (see TestServerDiesWithGateway).
func helperGateway() {
	g := gateway.New(&gateway.Options{Store: memstore.New()})
	_, err := Connect(context.Background(), Server{
		Name: "go", Command: []string{os.Getenv("MCPTEST_SERVER")}, Env: []string{"MCPTEST_LOG", "MCPTEST_LINGER"},
	}, &Options{Registry: g})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "backplane-mcp-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	testServer = filepath.Join(dir, "mcptestserver")
	goTool := "go" // from PATH, as a developer runs it
	build := exec.Command(goTool, "build", "-o", testServer, "./testdata/mcptestserver")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the test server:", err)
		return 2
	}
	return m.Run()
}

// peer returns the command of a reference server installed under
// testdata/mcp-peers, skipping the test when node or the package is absent.
func peer(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the reference MCP servers cannot run")
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-"+name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is not installed (run npm ci in testdata/mcp-peers): %v", bin, err)
	}
	return bin
}

// approveAll decides every approval request: approved, by "operator".
type approveAll struct {
	mu    sync.Mutex
	asked []string
}

func (a *approveAll) Ask(ctx context.Context, req *store.Approval) (gateway.ApprovalAnswer, error) {
	a.mu.Lock()
	a.asked = append(a.asked, req.Tool)
	a.mu.Unlock()
	return gateway.ApprovalAnswer{Approve: true, By: "operator", Channel: "cli"}, nil
}

func (a *approveAll) tools() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.asked...)
}

// env is a test's gateway: a SQLite store in a temporary folder, a policy
// that lets alice call everything, and an approver that approves.
type env struct {
	g        *gateway.Gateway
	st       store.Store
	approver *approveAll
	logs     *syncBuffer
	log      *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, approver: &approveAll{}, logs: &syncBuffer{}}
	e.log = slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.g = gateway.New(&gateway.Options{
		Store: st, Policy: rules, Logger: e.log,
		Approvals: gateway.ApprovalOptions{Approver: e.approver},
		Timeout:   20 * time.Second,
	})
	return e
}

// connect connects srv to the env's gateway and closes it at the end.
func (e *env) connect(t *testing.T, srv Server, opts *Options) *Upstream {
	t.Helper()
	u, err := e.tryConnect(srv, opts)
	if err != nil {
		t.Fatalf("Connect %s: %v", srv.Name, err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

func (e *env) tryConnect(srv Server, opts *Options) (*Upstream, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Registry = e.g
	if o.Logger == nil {
		o.Logger = e.log
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return Connect(ctx, srv, &o)
}

// call calls a tool as alice.
func (e *env) call(t *testing.T, tool, args string) (*gateway.CallResult, *gateway.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: tool, Arguments: json.RawMessage(args)})
	if err == nil {
		return res, nil
	}
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		t.Fatalf("call %s: %T %v, want a *gateway.Error", tool, err, err)
	}
	return nil, ge
}

// mustCall calls a tool and requires a result.
func (e *env) mustCall(t *testing.T, tool, args string) *gateway.CallResult {
	t.Helper()
	res, ge := e.call(t, tool, args)
	if ge != nil {
		t.Fatalf("call %s %s: %v", tool, args, ge)
	}
	return res
}

// intents counts the journal's intents.
func (e *env) intents(t *testing.T) []store.Intent {
	t.Helper()
	list, err := e.st.ListIntents(context.Background(), store.IntentFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// testServerSpec is the Go test server as a Server, its log in a
// temporary file.
func testServerSpec(t *testing.T, name string) (Server, string) {
	t.Helper()
	logFile := filepath.Join(t.TempDir(), "server.log")
	t.Setenv("MCPTEST_LOG", logFile)
	return Server{
		Name:    name,
		Command: []string{testServer},
		Env:     []string{"MCPTEST_LOG", "MCPTEST_DESC", "MCPTEST_START_LIMIT", "MCPTEST_PAGE_SIZE", "MCPTEST_FILLERS", "MCPTEST_FULL"},
	}, logFile
}

// serverLog reads the test server's log lines.
func serverLog(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds or the time is up.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killUpstream kills the upstream program's whole process group.
func killUpstream(t *testing.T, u *Upstream) int {
	t.Helper()
	l, err := u.current()
	if err != nil {
		t.Fatalf("the upstream is down: %v", err)
	}
	pid := l.pid()
	if pid == 0 {
		t.Fatal("no process")
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return pid
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// --- an independent view of a stdio server: JSON-RPC by hand ---

// rawPeer speaks JSON-RPC to a stdio server by hand, without the SDK or
// this package, to see what the server really sends.
type rawPeer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	id  int
}

func startRawPeer(t *testing.T, argv []string, extraEnv ...string) *rawPeer {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	t.Cleanup(func() {
		in.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	// The capabilities the gateway declares by default (DefaultBridge):
	// server-everything offers some tools only to clients that have them.
	p.request(t, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{"roots":{},"elicitation":{"form":{},"url":{}}},"clientInfo":{"name":"raw","version":"1"}}`)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p
}

// request sends a request and returns the raw result of its answer,
// skipping notifications and the server's own requests.
func (p *rawPeer) request(t *testing.T, method, params string) json.RawMessage {
	t.Helper()
	p.id++
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", p.id, method, params)
	for {
		line, err := p.out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", method, err)
		}
		var msg struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			t.Fatalf("%s: a line that is not JSON: %v: %s", method, err, line)
		}
		if msg.ID == nil || *msg.ID != p.id || msg.Method != "" {
			continue
		}
		if msg.Error != nil {
			t.Fatalf("%s: error %s", method, msg.Error)
		}
		return msg.Result
	}
}

// rawTool is a tool as listed on the wire.
type wireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// listAll follows tools/list to the end; pages counts the answers.
func (p *rawPeer) listAll(t *testing.T) (tools []wireTool, pages int) {
	t.Helper()
	cursor := ""
	for {
		params := `{}`
		if cursor != "" {
			params = fmt.Sprintf(`{"cursor":%q}`, cursor)
		}
		var page struct {
			Tools      []wireTool `json:"tools"`
			NextCursor string     `json:"nextCursor"`
		}
		if err := json.Unmarshal(p.request(t, "tools/list", params), &page); err != nil {
			t.Fatal(err)
		}
		pages++
		tools = append(tools, page.Tools...)
		if page.NextCursor == "" {
			return tools, pages
		}
		cursor = page.NextCursor
	}
}

// callTool calls a tool and returns the raw result.
func (p *rawPeer) callTool(t *testing.T, name, args string) json.RawMessage {
	t.Helper()
	return p.request(t, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, name, args))
}

// processGroupAlive returns nil when a process of the group still exists.
func processGroupAlive(pgid int) error {
	return syscall.Kill(-pgid, 0)
}
