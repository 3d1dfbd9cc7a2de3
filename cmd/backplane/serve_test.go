package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// serveConfig serves the nine built-in tools of the folder: alice may call
// every one (write needs an approval, as by default), bob only read.
const serveConfig = `operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: ["*"]
  - caller: bob
    allow: [read]
serve:
  tokens: {"alice-token": alice, "bob-token": bob}
  stdio_caller: alice
  approval_wait: 30s
`

// The official TypeScript SDK client, run by node: the client no one here
// wrote.
func tsClient(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the TypeScript SDK client cannot run")
	}
	root, _ := filepath.Abs(filepath.Join("..", "..", "testdata"))
	sdk := filepath.Join(root, "mcp-peers", "node_modules", "@modelcontextprotocol", "sdk", "package.json")
	if _, err := os.Stat(sdk); err != nil {
		t.Skip("@modelcontextprotocol/sdk is not installed in testdata/mcp-peers (npm ci there): " + err.Error())
	}
	return node, filepath.Join(root, "mcp-client", "client.mjs")
}

// tsReport is what client.mjs prints.
type tsReport struct {
	ConnectError *struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	} `json:"connectError"`
	ProtocolVersion string `json:"protocolVersion"`
	Tools           []struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
	} `json:"tools"`
	Calls []struct {
		Name   string `json:"name"`
		Result *struct {
			IsError           bool                          `json:"isError"`
			Content           []struct{ Type, Text string } `json:"content"`
			StructuredContent map[string]any                `json:"structuredContent"`
			Meta              map[string]any                `json:"_meta"`
		} `json:"result"`
		Error *struct {
			Code    float64 `json:"code"`
			Message string  `json:"message"`
		} `json:"error"`
	} `json:"calls"`
	tsSteps
	raw []byte // the report as printed
}

// runTSClient runs client.mjs with the plan and the transport arguments.
func runTSClient(t *testing.T, g *gwDir, plan string, args ...string) (tsReport, string) {
	t.Helper()
	node, script := tsClient(t)
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(planFile, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script, "--plan", planFile}, args...)...)
	cmd.Dir = g.dir
	cmd.Env = g.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var rep tsReport
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("client.mjs: %v, output not JSON (%v):\n%s\nstderr:\n%s", err, jerr, out.String(), errOut.String())
	}
	rep.raw = out.Bytes()
	return rep, errOut.String()
}

func canonical(t *testing.T, b []byte) string {
	t.Helper()
	v, err := jsonstrict.Decode(b, nil)
	if err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	c, err := canonjson.Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	return string(c)
}

// checkCatalog checks that the listed tools are exactly names, each with the
// built-in's description and schema (compared as JSON values: the client
// decoded and re-encoded them).
func checkCatalog(t *testing.T, rep tsReport, names []string) {
	t.Helper()
	var got []string
	for _, tool := range rep.Tools {
		got = append(got, tool.Name)
	}
	if !slices.Equal(got, names) {
		t.Fatalf("listed %v, want %v", got, names)
	}
	builtins := map[string]schemas.Tool{}
	for _, b := range schemas.All() {
		builtins[b.Name] = b
	}
	for _, tool := range rep.Tools {
		b := builtins[tool.Name]
		if tool.Description != b.Description {
			t.Errorf("%s: description %q, want %q", tool.Name, tool.Description, b.Description)
		}
		if canonical(t, tool.InputSchema) != canonical(t, b.InputSchema) {
			t.Errorf("%s: schema %s\nwant %s", tool.Name, tool.InputSchema, b.InputSchema)
		}
		if len(tool.OutputSchema) == 0 || canonical(t, tool.OutputSchema) != canonical(t, b.OutputSchema) {
			t.Errorf("%s: output schema %s\nwant %s", tool.Name, tool.OutputSchema, b.OutputSchema)
		}
	}
}

var allBuiltins = []string{"ask_user_question", "bash", "edit", "glob", "grep", "ls", "read", "url_fetch", "write"}

const tsPlan = `{"calls":[
  {"name":"read","arguments":{"path":"notes.txt"}},
  {"name":"read","arguments":{"path":7,"offset":0,"extra":true}},
  {"name":"no_such_tool","arguments":{}}
]}`

// checkTSCalls checks the answers to tsPlan.
func checkTSCalls(t *testing.T, rep tsReport) {
	t.Helper()
	if len(rep.Calls) != 3 {
		t.Fatalf("%d calls reported", len(rep.Calls))
	}
	ok := rep.Calls[0].Result
	if ok == nil || ok.IsError || ok.StructuredContent["path"] != "notes.txt" || !strings.Contains(ok.StructuredContent["content"].(string), "hello from the workspace") {
		t.Errorf("read notes.txt: %+v", rep.Calls[0])
	}
	if ok != nil && (len(ok.Content) != 1 || ok.Content[0].Type != "text" || !strings.Contains(ok.Content[0].Text, "hello from the workspace")) {
		t.Errorf("read notes.txt content: %+v", ok.Content)
	}
	// read declares an output schema: the error object is in
	// _meta["backplane/error"], not in structuredContent, which this
	// client (TypeScript SDK 1.x) would validate against the output schema
	// and throw instead of returning the result.
	bad := rep.Calls[1].Result
	if bad == nil || !bad.IsError || bad.StructuredContent != nil {
		t.Fatalf("invalid read: %+v", rep.Calls[1])
	}
	ge, _ := bad.Meta["backplane/error"].(map[string]any)
	if ge["class"] != "validation" {
		t.Fatalf("invalid read: _meta %v, want the validation error in backplane/error", bad.Meta)
	}
	var pointers []string
	for _, e := range ge["errors"].([]any) {
		pointers = append(pointers, e.(map[string]any)["pointer"].(string))
	}
	slices.Sort(pointers)
	if !slices.Equal(pointers, []string{"/extra", "/offset", "/path"}) {
		t.Errorf("violations at %v, want /extra, /offset and /path", pointers)
	}
	if len(bad.Content) == 0 || !strings.Contains(bad.Content[0].Text, "/offset") {
		t.Errorf("the text content does not list the violations: %+v", bad.Content)
	}
	if e := rep.Calls[2].Error; e == nil || e.Code != -32602 {
		t.Errorf("unknown tool: %+v, want a protocol error -32602", rep.Calls[2])
	}
}

func newServeDir(t *testing.T) *gwDir {
	g := newGWDir(t, serveConfig)
	if err := os.WriteFile(filepath.Join(g.dir, "notes.txt"), []byte("hello from the workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestServeStdioTypeScriptClient(t *testing.T) {
	g := newServeDir(t)
	rep, stderr := runTSClient(t, g, tsPlan, "--stdio", "--", binary, "serve", "--stdio")
	if rep.ConnectError != nil {
		t.Fatalf("connect: %+v\n%s", rep.ConnectError, stderr)
	}
	if rep.ProtocolVersion != "2025-11-25" {
		t.Errorf("protocol version %q", rep.ProtocolVersion)
	}
	checkCatalog(t, rep, allBuiltins)
	checkTSCalls(t, rep)
	// The calls are alice's, in the journal.
	j := g.journal(t)
	callers := map[string]bool{}
	for _, e := range j {
		callers[e["caller"].(string)] = true
	}
	if len(j) != 1 || !callers["alice"] {
		t.Errorf("journal %v: want the one read that ran, by alice", j)
	}
}

// serveProc is `backplane serve --http` running in the background.
type serveProc struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	mu     sync.Mutex
	stderr bytes.Buffer
	exited chan struct{} // closed once the process has exited
	err    error         // its exit error, once exited is closed
}

var listenLine = regexp.MustCompile(`url=http://(127\.0\.0\.1:\d+)/mcp`)

func startServe(t *testing.T, g *gwDir, args ...string) *serveProc {
	t.Helper()
	return startProc(t, g.command("", append([]string{"serve", "--http", "127.0.0.1:0"}, args...)...), listenLine, "http://")
}

func (p *serveProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop sends SIGTERM and returns the exit error.
func (p *serveProc) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not stop within 20s of SIGTERM:\n%s", p.log())
		return nil
	}
}

func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeHTTPTypeScriptClient(t *testing.T) {
	g := newServeDir(t)
	p := startServe(t, g)
	mcpURL := p.base + "/mcp"

	rep, stderr := runTSClient(t, g, tsPlan, "--http", mcpURL, "--token", "alice-token")
	if rep.ConnectError != nil {
		t.Fatalf("connect: %+v\n%s\n%s", rep.ConnectError, stderr, p.log())
	}
	checkCatalog(t, rep, allBuiltins)
	checkTSCalls(t, rep)

	// bob's token: fewer tools, and a tool bob may never call answers
	// exactly as an unknown one does (its existence and schema stay hidden).
	rep, _ = runTSClient(t, g, `{"calls":[{"name":"ls","arguments":{}},{"name":"no_such_tool","arguments":{}}]}`, "--http", mcpURL, "--token", "bob-token")
	checkCatalog(t, rep, []string{"read"})
	hidden, unknown := rep.Calls[0].Error, rep.Calls[1].Error
	if hidden == nil || unknown == nil || hidden.Code != -32602 || hidden.Code != unknown.Code ||
		strings.ReplaceAll(hidden.Message, "ls", "X") != strings.ReplaceAll(unknown.Message, "no_such_tool", "X") {
		t.Errorf("bob calling ls: %+v; an unknown tool: %+v; want the same protocol error", rep.Calls[0], rep.Calls[1])
	}

	// A wrong token: 401 before MCP.
	rep, _ = runTSClient(t, g, `{}`, "--http", mcpURL, "--token", "not-a-token")
	if rep.ConnectError == nil || rep.ConnectError.Code != float64(401) {
		t.Errorf("wrong token: %+v, want a connect error with code 401", rep.ConnectError)
	}
	if code, _ := httpGet(t, p.base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d", code)
	}
	if code, body := httpGet(t, p.base+"/healthz", ""); code != http.StatusOK || strings.TrimSpace(body) != `{"ok":true,"state":"ok"}` {
		t.Errorf("/healthz: %d %s", code, body)
	}

	// The metrics count what happened; operators read them, callers not.
	if code, _ := httpGet(t, p.base+"/metrics", "alice-token"); code != http.StatusForbidden {
		t.Errorf("/metrics with a caller's token: %d, want 403", code)
	}
	code, metrics := httpGet(t, p.base+"/metrics", "ops-token")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`backplane_mcp_tool_calls_total{outcome="succeeded",tool="read"} 1`,
		`backplane_mcp_tool_calls_total{outcome="refused",tool="read"} 1`,
		`backplane_mcp_tool_calls_total{outcome="refused",tool="(unknown)"} 3`,
		`backplane_mcp_tool_call_refusals_total{class="validation"} 1`,
		`backplane_mcp_tool_call_refusals_total{class="not_found"} 3`,
		`backplane_mcp_tool_call_duration_seconds_count{tool="read"} 2`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// SIGTERM: a graceful stop, exit 0.
	if err := p.stop(t); err != nil {
		t.Errorf("serve exited with %v after SIGTERM:\n%s", err, p.log())
	}
	if !strings.Contains(p.log(), "stopped") {
		t.Errorf("no stop in the log:\n%s", p.log())
	}
}

// Without elicitation, a call waits for `backplane approvals approve` run
// from another process, and the client hears progress meanwhile.
func TestServeApprovalFromAnotherProcess(t *testing.T) {
	g := newServeDir(t)
	p := startServe(t, g)

	var mu sync.Mutex
	var progress []string
	client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, r.Params.Message)
			mu.Unlock()
		},
	})
	tr := &mcp.StreamableClientTransport{
		Endpoint:   p.base + "/mcp",
		HTTPClient: &http.Client{Transport: tokenTransport("alice-token")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, tr, sessionEra)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.log())
	}
	defer cs.Close()

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "approved.txt", "content": "written after approval\n"}}
		params.SetProgressToken("write-1")
		res, err := cs.CallTool(ctx, params)
		done <- answer{res, err}
	}()

	// Another process sees the pending request and approves it.
	var id string
	deadline := time.Now().Add(20 * time.Second)
	for id == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no pending approval request appeared:\n%s", p.log())
		}
		for aid, a := range g.approvalsByID(t, "--status", "pending") {
			if a["tool"] == "write" && a["caller"] == "alice" {
				id = aid
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Let at least one progress notification go out first (about once a
	// second while waiting).
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(progress)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("no progress notification within 10s of the request")
		}
	}
	g.operator(t, "approvals", "approve", id).wantCode(t, exitOK)

	var a answer
	select {
	case a = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the call did not end within 20s of the approval:\n%s", p.log())
	}
	if a.err != nil || a.res.IsError {
		t.Fatalf("the approved call: %v %+v", a.err, a.res)
	}
	data, err := os.ReadFile(filepath.Join(g.dir, "approved.txt"))
	if err != nil || string(data) != "written after approval\n" {
		t.Errorf("approved.txt: %q, %v", data, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(progress[0], id) {
		t.Errorf("progress message %q does not name the request %s", progress[0], id)
	}
	if got := g.approvalsByID(t)[id]; got["status"] != "approved" || got["decided_by"] != "ops" || got["consumed_by"] == nil {
		t.Errorf("approval after the call: %v", got)
	}
}

type tokenTransport string

func (tok tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(tok))
	return http.DefaultTransport.RoundTrip(r)
}

func TestServeUsageErrors(t *testing.T) {
	g := newGWDir(t, "policy: []\n") // no serve section: no stdio caller
	r := g.run(t, "", "serve", "--stdio")
	r.wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "stdio_caller") {
		t.Errorf("--stdio without a caller: %s", r.stderr)
	}
	r = g.run(t, "", "serve", "--http", "0.0.0.0:0")
	r.wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "not a loopback address") {
		t.Errorf("--http on every interface: %s", r.stderr)
	}
	g.run(t, "", "serve", "--stdio", "--http", "127.0.0.1:0").wantUsageError(t)
	g.run(t, "", "serve", "extra").wantUsageError(t)
}

// Without tokens every HTTP request is refused, and the log says so at
// start.
func TestServeWithoutTokens(t *testing.T) {
	g := newGWDir(t, "policy:\n  - caller: alice\n    allow: [read]\n")
	p := startServe(t, g)
	if !strings.Contains(p.log(), "no bearer tokens are configured") {
		t.Errorf("the start-up log does not warn about the missing tokens:\n%s", p.log())
	}
	for _, path := range []string{"/mcp", "/metrics"} {
		if code, _ := httpGet(t, p.base+path, "anything"); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", path, code)
		}
	}
	if code, _ := httpGet(t, p.base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if err := p.stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// An upstream MCP server's tools, served on: listed with their schemas as
// the upstream declares them ($schema included), their results passed
// through as the upstream sent them.
func TestServeUpstreamToolsToTypeScriptClient(t *testing.T) {
	_, script := tsClient(t)
	everything := filepath.Join(filepath.Dir(filepath.Dir(script)), "mcp-peers", "node_modules", ".bin", "mcp-server-everything")
	if _, err := os.Stat(everything); err != nil {
		t.Skip("server-everything is not installed (npm ci in testdata/mcp-peers): " + err.Error())
	}
	g := newGWDir(t, `policy:
  - caller: alice
    allow: ["everything.echo"]
servers:
  - name: everything
    command: [`+jsonString(everything)+`]
    validator: draft2020-12
serve:
  stdio_caller: alice
`)
	rep, stderr := runTSClient(t, g, `{"calls":[
  {"name":"everything.echo","arguments":{"message":"through the gateway"}},
  {"name":"everything.echo","arguments":{"message":5}}
]}`, "--stdio", "--", binary, "serve", "--stdio")
	if rep.ConnectError != nil {
		t.Fatalf("connect: %+v\n%s", rep.ConnectError, stderr)
	}
	if len(rep.Tools) != 1 || rep.Tools[0].Name != "everything.echo" {
		t.Fatalf("tools %+v", rep.Tools)
	}
	schema := decodeObject(t, string(rep.Tools[0].InputSchema))
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" || schema["properties"].(map[string]any)["message"] == nil {
		t.Errorf("the upstream's schema was not listed unchanged: %s", rep.Tools[0].InputSchema)
	}
	ok := rep.Calls[0].Result
	if ok == nil || ok.IsError || len(ok.Content) != 1 || ok.Content[0].Text != "Echo: through the gateway" || ok.StructuredContent != nil {
		t.Errorf("the upstream's result was not passed through: %+v", rep.Calls[0])
	}
	bad := rep.Calls[1].Result
	if bad == nil || !bad.IsError || bad.StructuredContent["class"] != "validation" || bad.StructuredContent["step"] != "validate" {
		t.Errorf("invalid arguments: %+v", rep.Calls[1])
	}
}
