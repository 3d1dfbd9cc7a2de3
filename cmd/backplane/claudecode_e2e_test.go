package main

// The end-to-end test of `backplane hook claude-code` with the real
// Claude Code CLI (pinned by testdata/agents), driven by a scripted fake
// model server, entirely offline: the test re-runs itself inside a network
// namespace that has only loopback, where the fake server, the hook and
// the agent all run. docs/agents.md says how to run it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// builtBinaryEnv names the backplane binary already built, for a copy
	// of the test binary re-run inside the namespace (see TestMain).
	builtBinaryEnv = "BACKPLANE_TEST_BUILT_BINARY"
	// insideNetnsEnv is set for the copy of the test run inside the
	// network namespace: only there is the agent started.
	insideNetnsEnv = "BACKPLANE_TEST_INSIDE_NETNS"
	// claudeCodeBin is the pinned CLI's native binary (npm ci in
	// testdata/agents links it there from its platform package).
	claudeCodeBin = "../../testdata/agents/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
)

// claudeE2EConfig governs the agent's own tools. bash(git status) is an
// exact entry: the allowed run must be decided by it, not by a pattern.
const claudeE2EConfig = `
workspace: ws
builtin:
  enable: [read, write, edit, bash, glob, grep]
  safety:
    bash: {requires_approval: false}
    write: {requires_approval: false}
    edit: {requires_approval: false}
operators:
  - {name: ops, token: ops-token}
serve:
  tokens:
    tok-agent: agent
policy:
  - caller: agent
    allow: ["bash(git status)", "bash(touch ran-*)", read, "edit(src/**)"]
    approve: ["write(docs/**)"]
    deny: ["bash(*rm -rf*)", "edit(**/.env)"]
`

func TestClaudeCodeEndToEnd(t *testing.T) {
	if os.Getenv(insideNetnsEnv) == "" {
		if _, err := os.Stat(claudeCodeBin); err != nil {
			t.Skipf("the Claude Code CLI is not installed (npm ci in testdata/agents; scripts/test does it where npm is): %v", err)
		}
		runInsideLoopbackNetns(t, "bash_allowed_runs", "bash_denied,_the_model_gets_the_reason", "write_approved_by_the_operator,_then_runs",
			"edit_under_a_denied_path_refused", "gateway_stopped,_the_hook_blocks")
		return
	}
	requireOnlyLoopback(t)
	claude, err := filepath.Abs(claudeCodeBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("bash allowed runs", func(t *testing.T) { claudeBashAllowed(t, claude) })
	t.Run("bash denied, the model gets the reason", func(t *testing.T) { claudeBashDenied(t, claude) })
	t.Run("write approved by the operator, then runs", func(t *testing.T) { claudeWriteApproved(t, claude) })
	t.Run("edit under a denied path refused", func(t *testing.T) { claudeEditDenied(t, claude) })
	t.Run("gateway stopped, the hook blocks", func(t *testing.T) { claudeGatewayStopped(t, claude) })
}

// runInsideLoopbackNetns re-runs the test t (a top-level test) in a new
// network namespace (only loopback, brought up) and mount namespace (a
// resolv.conf naming 127.0.0.1 bound over /etc/resolv.conf), and fails
// unless each of subtests (as go test names them) passed there. The agent
// is never started outside it.
func runInsideLoopbackNetns(t *testing.T, subtests ...string) {
	if os.Geteuid() != 0 {
		t.Skip("the agent end-to-end tests need root to make their network namespace (unshare -n)")
	}
	for _, tool := range []string{"unshare", "ip", "mount", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the agent end-to-end tests need %s: %v", tool, err)
		}
	}
	// Some kernels or containers refuse new namespaces: say so and skip,
	// rather than fail on what the machine cannot do.
	if out, err := exec.Command("unshare", "-n", "-m", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare -n -m is refused here: %v %s", err, out)
	}
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The whole run is bounded: five agent runs of a few seconds each,
	// with room for a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	script := `set -e; ip link set lo up; mount --bind "$1" /etc/resolv.conf; shift; exec "$@"`
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--mount", "sh", "-c", script, "sh", resolv,
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=160s")
	cmd.Env = append(os.Environ(), insideNetnsEnv+"=1", builtBinaryEnv+"="+binary)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("inside the namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the test inside the namespace failed: %v", err)
	}
	// A copy that skipped or ran nothing would exit 0 too.
	for _, sub := range subtests {
		if !strings.Contains(string(out), "--- PASS: "+t.Name()+"/"+sub) {
			t.Errorf("subtest %s did not pass inside the namespace", sub)
		}
	}
}

// requireOnlyLoopback refuses to go on unless the namespace has no link
// but loopback and names no resolver but 127.0.0.1: nothing the agent
// does may reach beyond this machine.
func requireOnlyLoopback(t *testing.T) {
	out, err := exec.Command("ip", "-o", "link").Output()
	if err != nil {
		t.Fatalf("ip -o link: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) < 2 || f[1] != "lo:" {
			t.Fatalf("refusing to run the agent: a link other than loopback exists: %s", line)
		}
	}
	rc, err := os.ReadFile("/etc/resolv.conf")
	if err != nil || strings.TrimSpace(string(rc)) != "nameserver 127.0.0.1" {
		t.Fatalf("refusing to run the agent: /etc/resolv.conf is %q (%v), want only nameserver 127.0.0.1", rc, err)
	}
	// And a route out does not exist: an address beyond loopback is
	// unreachable at once.
	if c, err := net.DialTimeout("tcp", "192.0.2.1:80", 2*time.Second); err == nil {
		c.Close()
		t.Fatal("refusing to run the agent: 192.0.2.1 is reachable from the namespace")
	}
}

// block is one content block of a scripted model answer: text, or a
// tool_use when name is set.
type block struct {
	text  string
	name  string
	input map[string]any
}

// toolResult is what the agent sent back for one of the model's tool uses.
type toolResult struct {
	text    string
	isError bool
}

// fakeModel is a scripted Anthropic Messages API on 127.0.0.1. A request
// of the agent's main loop (one that offers the Bash tool) is answered by
// script, given how many tool results the conversation holds so far, so a
// retried request gets the same answer; other requests (the agent's side
// queries) get a short end_turn text.
type fakeModel struct {
	t      *testing.T
	script func(step int, results []toolResult) []block
	srv    *httptest.Server

	mu       sync.Mutex
	requests []map[string]any // every /v1/messages body, in order
	results  []toolResult     // the tool results of the last main-loop request
	other    []string         // requests to any other endpoint
	ids      int
}

func newFakeModel(t *testing.T, script func(step int, results []toolResult) []block) *fakeModel {
	m := &fakeModel{t: t, script: script}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	switch r.URL.Path {
	case "/v1/messages":
	case "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"input_tokens": 10}`)
		return
	default:
		// Whatever else the agent asks for is answered harmlessly and
		// logged, so that a new endpoint shows in the test log.
		m.mu.Lock()
		m.other = append(m.other, r.Method+" "+r.URL.Path)
		m.mu.Unlock()
		m.t.Logf("fake model: %s %s (answered {})", r.Method, r.URL)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
		return
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		m.t.Errorf("fake model: a /v1/messages body that is not JSON: %v", err)
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	var blocks []block
	results := toolResults(req)
	m.mu.Lock()
	m.requests = append(m.requests, req)
	main := offersTool(req, "Bash")
	if main {
		m.results = results
	}
	m.mu.Unlock()
	if main {
		blocks = m.script(len(results), results)
	} else {
		blocks = []block{{text: "ok"}}
	}
	if stream, _ := req["stream"].(bool); stream {
		m.stream(w, blocks)
	} else {
		m.whole(w, blocks)
	}
}

// offersTool reports whether the request offers the named tool.
func offersTool(req map[string]any, name string) bool {
	tools, _ := req["tools"].([]any)
	for _, tl := range tools {
		if o, _ := tl.(map[string]any); o["name"] == name {
			return true
		}
	}
	return false
}

// toolResults is every tool_result the request's conversation carries, in
// order, its content flattened to text.
func toolResults(req map[string]any) []toolResult {
	var out []toolResult
	msgs, _ := req["messages"].([]any)
	for _, mv := range msgs {
		msg, _ := mv.(map[string]any)
		content, _ := msg["content"].([]any)
		for _, cv := range content {
			c, _ := cv.(map[string]any)
			if c["type"] != "tool_result" {
				continue
			}
			r := toolResult{}
			r.isError, _ = c["is_error"].(bool)
			switch v := c["content"].(type) {
			case string:
				r.text = v
			case []any:
				for _, pv := range v {
					if p, _ := pv.(map[string]any); p["type"] == "text" {
						s, _ := p["text"].(string)
						r.text += s
					}
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// stopReason is tool_use when the answer uses a tool, else end_turn.
func stopReason(blocks []block) string {
	for _, b := range blocks {
		if b.name != "" {
			return "tool_use"
		}
	}
	return "end_turn"
}

func (m *fakeModel) nextID(prefix string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids++
	return fmt.Sprintf("%s_e2e%04d", prefix, m.ids)
}

// stream answers with the Messages API's server-sent events: message_start,
// per block content_block_start, content_block_delta (text_delta or
// input_json_delta) and content_block_stop, then message_delta with the
// stop reason and message_stop.
func (m *fakeModel) stream(w http.ResponseWriter, blocks []block) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	bw := bufio.NewWriter(w)
	event := func(name string, data map[string]any) {
		data["type"] = name
		b, _ := json.Marshal(data)
		fmt.Fprintf(bw, "event: %s\ndata: %s\n\n", name, b)
	}
	event("message_start", map[string]any{"message": map[string]any{
		"id": m.nextID("msg"), "type": "message", "role": "assistant", "model": "claude-e2e-fake",
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 10, "output_tokens": 1},
	}})
	event("ping", map[string]any{})
	for i, b := range blocks {
		if b.name == "" {
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": b.text}})
		} else {
			in, _ := json.Marshal(b.input)
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{
				"type": "tool_use", "id": m.nextID("toolu"), "name": b.name, "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(in)}})
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": stopReason(blocks), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 20},
	})
	event("message_stop", map[string]any{})
	bw.Flush()
}

// whole answers a request that did not ask for a stream with one Message.
func (m *fakeModel) whole(w http.ResponseWriter, blocks []block) {
	content := []any{}
	for _, b := range blocks {
		if b.name == "" {
			content = append(content, map[string]any{"type": "text", "text": b.text})
		} else {
			content = append(content, map[string]any{"type": "tool_use", "id": m.nextID("toolu"), "name": b.name, "input": b.input})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": m.nextID("msg"), "type": "message", "role": "assistant", "model": "claude-e2e-fake",
		"content": content, "stop_reason": stopReason(blocks), "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 10, "output_tokens": 20},
	})
}

// lastResults is the tool results of the last main-loop request.
func (m *fakeModel) lastResults() []toolResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	side := 0
	for _, req := range m.requests {
		if !offersTool(req, "Bash") {
			side++
		}
	}
	m.t.Logf("the fake model answered %d /v1/messages requests (%d side queries); other endpoints: %q", len(m.requests), side, m.other)
	for i, r := range m.results {
		m.t.Logf("the model received tool result %d (error %v): %s", i, r.isError, r.text)
	}
	return m.results
}

// claudeRun is one agent run's setup: the gateway's folder (its
// configuration and store), the workspace, the fresh HOME with the hook
// installed.
type claudeRun struct {
	g    *gwDir
	ws   string
	home string
}

func newClaudeRun(t *testing.T) *claudeRun {
	t.Helper()
	g := newGWDir(t, claudeE2EConfig)
	ws := filepath.Join(g.dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A repository, so that git status has something to say.
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	home := t.TempDir()
	// The hook as a user installs it: the command names the binary and
	// the configuration by absolute paths.
	settings := filepath.Join(home, ".claude", "settings.json")
	r := g.run(t, "", "hook", "install", "claude-code", "--file", settings, "--caller", "agent")
	r.wantCode(t, exitOK)
	g.run(t, "", "hook", "install", "claude-code", "--file", settings, "--check").wantCode(t, exitOK)
	return &claudeRun{g: g, ws: ws, home: home}
}

// claudeOutput is the part of `claude -p --output-format json` read here.
type claudeOutput struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	IsError bool   `json:"is_error"`
	Result  string `json:"result"`
}

// run starts the agent on prompt against the fake model, with every
// switch for non-essential traffic set, stdin from /dev/null and a
// timeout, and returns its final JSON.
func (c *claudeRun) run(t *testing.T, claude string, m *fakeModel, prompt string) claudeOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "timeout", "-k", "5", "70", claude, "-p", prompt,
		"--output-format", "json", "--max-turns", "8", "--model", "claude-sonnet-4-5")
	cmd.Dir = c.ws
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + c.home,
		"TMPDIR=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + m.srv.URL,
		"ANTHROPIC_API_KEY=test",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_BUG_COMMAND=1",
		// The hook finds its configuration from the installed command;
		// nothing of the test's environment leaks in.
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	cmd.Stdin = devnull
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("claude ran %v; stderr: %s", time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("claude -p: %v\nstdout: %s", err, out)
	}
	var o claudeOutput
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("claude's output is not its JSON result: %v\n%s", err, out)
	}
	return o
}

// wantDone checks that the agent ran to the model's scripted last words.
func wantDone(t *testing.T, o claudeOutput, words string) {
	t.Helper()
	if o.Type != "result" || o.Subtype != "success" || o.IsError || !strings.Contains(o.Result, words) {
		t.Errorf("claude's result %+v, want success ending with %q", o, words)
	}
}

func claudeBashAllowed(t *testing.T, claude string) {
	c := newClaudeRun(t)
	m := newFakeModel(t, func(step int, _ []toolResult) []block {
		if step == 0 {
			return []block{{text: "Checking."}, {name: "Bash", input: map[string]any{"command": "git status", "description": "Show the status"}}}
		}
		return []block{{text: "E2E done: status shown."}}
	})
	wantDone(t, c.run(t, claude, m, "Show the git status."), "E2E done: status shown.")
	res := m.lastResults()
	if len(res) != 1 {
		t.Fatalf("the model received %d tool results, want 1: %+v", len(res), res)
	}
	// git's own words: the command ran.
	if res[0].isError || !strings.Contains(res[0].text, "No commits yet") {
		t.Errorf("the model received %+v, want git status's output", res[0])
	}
	// And the hook decided it: a decision-only journal entry of bash.
	list := c.g.runJSON(t, exitOK, "", "journal", "list")
	intents, _ := list["intents"].([]any)
	if len(intents) != 1 {
		t.Fatalf("journal %v, want the one decided call", list)
	}
	if e := intents[0].(map[string]any); e["tool"] != "bash" || e["caller"] != "agent" || e["error_class"] != "decision_only" || e["session"] == "" {
		t.Errorf("journal entry %v, want a decision-only bash by agent in the agent's session", e)
	}
}

func claudeBashDenied(t *testing.T, claude string) {
	c := newClaudeRun(t)
	victim := filepath.Join(c.ws, "x")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newFakeModel(t, func(step int, _ []toolResult) []block {
		if step == 0 {
			return []block{{name: "Bash", input: map[string]any{"command": "git status && rm -rf x", "description": "Status, then clean up"}}}
		}
		return []block{{text: "E2E done: refused."}}
	})
	wantDone(t, c.run(t, claude, m, "Show the status and remove x."), "E2E done: refused.")
	res := m.lastResults()
	if len(res) != 1 {
		t.Fatalf("the model received %d tool results, want 1: %+v", len(res), res)
	}
	// The rule's reason, as Backplane words it, reached the model.
	if !res[0].isError || !strings.Contains(res[0].text, "rm -rf") || !strings.Contains(res[0].text, "denied") {
		t.Errorf("the model received %+v, want an error carrying Backplane's deny reason", res[0])
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("x is gone: %v", err)
	}
}

func claudeWriteApproved(t *testing.T, claude string) {
	c := newClaudeRun(t)
	target := filepath.Join(c.ws, "docs", "new.md")
	write := block{name: "Write", input: map[string]any{"file_path": target, "content": "# New\n\nWritten by the agent.\n"}}
	m := newFakeModel(t, func(step int, results []toolResult) []block {
		switch step {
		case 0:
			return []block{write}
		case 1:
			// The first attempt was refused pending an approval: the
			// operator approves the request the model was told about,
			// then the model tries the same Write again.
			if _, err := os.Stat(target); err == nil {
				t.Errorf("the write ran before its approval")
			}
			r := results[0]
			list := c.g.runJSON(t, exitOK, "", "approvals", "list", "--status", "pending")
			aps, _ := list["approvals"].([]any)
			if len(aps) != 1 {
				t.Errorf("approvals %v, want one pending", list)
				return []block{{text: "E2E failed: no pending approval."}}
			}
			id, _ := aps[0].(map[string]any)["id"].(string)
			if !r.isError || !strings.Contains(r.text, id) || !strings.Contains(r.text, "approv") {
				t.Errorf("the model received %+v, want an error naming approval %s", r, id)
			}
			if a := c.g.operator(t, "approvals", "approve", id, "--reason", "e2e"); a.code != exitOK {
				t.Errorf("approvals approve %s: %d %s %s", id, a.code, a.stdout, a.stderr)
			}
			return []block{{text: "Approved; trying again."}, write}
		default:
			return []block{{text: "E2E done: written."}}
		}
	})
	wantDone(t, c.run(t, claude, m, "Write docs/new.md."), "E2E done: written.")
	res := m.lastResults()
	if len(res) != 2 {
		t.Fatalf("the model received %d tool results, want 2: %+v", len(res), res)
	}
	if res[1].isError {
		t.Errorf("the approved attempt failed: %+v", res[1])
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "# New\n\nWritten by the agent.\n" {
		t.Errorf("docs/new.md after the approved attempt: %q, %v", b, err)
	}
}

func claudeEditDenied(t *testing.T, claude string) {
	c := newClaudeRun(t)
	env := filepath.Join(c.ws, ".env")
	if err := os.WriteFile(env, []byte("TOKEN=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newFakeModel(t, func(step int, _ []toolResult) []block {
		switch step {
		case 0:
			// Claude Code edits only a file it has read: read it first
			// (allowed by the policy's read).
			return []block{{name: "Read", input: map[string]any{"file_path": env}}}
		case 1:
			return []block{{name: "Edit", input: map[string]any{"file_path": env, "old_string": "TOKEN=1", "new_string": "TOKEN=2"}}}
		default:
			return []block{{text: "E2E done: edit refused."}}
		}
	})
	wantDone(t, c.run(t, claude, m, "Change the token in .env."), "E2E done: edit refused.")
	res := m.lastResults()
	if len(res) != 2 {
		t.Fatalf("the model received %d tool results, want 2: %+v", len(res), res)
	}
	if res[0].isError || !strings.Contains(res[0].text, "TOKEN=1") {
		t.Errorf("the read: %+v, want the file's content", res[0])
	}
	if !res[1].isError || !strings.Contains(res[1].text, `denied by "edit(**/.env)"`) {
		t.Errorf("the edit: %+v, want Backplane's deny naming edit(**/.env)", res[1])
	}
	if b, _ := os.ReadFile(env); string(b) != "TOKEN=1\n" {
		t.Errorf(".env is now %q", b)
	}
}

// The hook asks a running serve (--url) in the namespace; once serve is
// stopped, the hook cannot reach it and blocks (exit 2), which Claude
// Code honours: a command the policy allows does not run.
func claudeGatewayStopped(t *testing.T, claude string) {
	c := newClaudeRun(t)
	p := startServe(t, c.g)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok-agent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	settings := filepath.Join(c.home, ".claude", "settings.json")
	if err := os.Remove(settings); err != nil {
		t.Fatal(err)
	}
	c.g.run(t, "", "hook", "install", "claude-code", "--file", settings, "--url", p.base, "--token-file", token).wantCode(t, exitOK)
	first, second := filepath.Join(c.ws, "ran-1"), filepath.Join(c.ws, "ran-2")
	m := newFakeModel(t, func(step int, _ []toolResult) []block {
		switch step {
		case 0:
			return []block{{name: "Bash", input: map[string]any{"command": "touch ran-1"}}}
		case 1:
			// Allowed through serve; now the gateway goes away.
			if err := p.stop(t); err != nil {
				t.Logf("serve exit: %v", err)
			}
			return []block{{name: "Bash", input: map[string]any{"command": "touch ran-2"}}}
		default:
			return []block{{text: "E2E done: blocked."}}
		}
	})
	wantDone(t, c.run(t, claude, m, "Touch two files."), "E2E done: blocked.")
	res := m.lastResults()
	if len(res) != 2 {
		t.Fatalf("the model received %d tool results, want 2: %+v", len(res), res)
	}
	if _, err := os.Stat(first); err != nil || res[0].isError {
		t.Errorf("the call allowed through serve did not run: %v %+v", err, res[0])
	}
	if _, err := os.Stat(second); err == nil {
		t.Error("the command ran with the gateway stopped")
	}
	if !res[1].isError || !strings.Contains(res[1].text, "cannot be reached") {
		t.Errorf("with the gateway stopped the model received %+v, want the hook's block naming the unreachable gateway", res[1])
	}
}
