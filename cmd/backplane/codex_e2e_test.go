package main

// The end-to-end test of `backplane hook codex` with the real Codex CLI
// (pinned by testdata/agents), driven by a scripted fake Responses API
// model server, entirely offline: like TestClaudeCodeEndToEnd, the test
// re-runs itself inside a network namespace that has only loopback, where
// the fake server, the hook, serve and the agent all run. docs/agents.md
// says how to run it.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// codexBin is the pinned CLI's native binary, which npm installs from the
// platform package @openai/codex lists as an optional dependency (the
// package's bin/codex.js only finds and starts it).
func codexBin() string {
	triple := map[string]string{"linux/amd64": "x86_64-unknown-linux-musl", "linux/arm64": "aarch64-unknown-linux-musl"}[runtime.GOOS+"/"+runtime.GOARCH]
	pkg := map[string]string{"amd64": "codex-linux-x64", "arm64": "codex-linux-arm64"}[runtime.GOARCH]
	return filepath.Join("../../testdata/agents/node_modules/@openai", pkg, "vendor", triple, "bin", "codex")
}

// codexE2EConfig governs Codex's shell and apply_patch. A patch is edit on
// every file it touches: docs/ needs an approval, src/ is allowed, .env is
// denied.
const codexE2EConfig = `
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
    allow: ["bash(git status*)", "bash(touch ran-*)", "edit(src/**)"]
    approve: ["edit(docs/**)"]
    deny: ["bash(*rm -rf*)", "edit(**/.env)"]
`

// codexModelName is a model of the CLI's bundled catalog whose tools
// include the freeform apply_patch (an unknown model gets fallback
// metadata, without it).
const codexModelName = "gpt-5.5"

func TestCodexEndToEnd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Codex end-to-end test runs on Linux (network namespaces)")
	}
	if os.Getenv(insideNetnsEnv) == "" {
		if _, err := os.Stat(codexBin()); err != nil {
			t.Skipf("the Codex CLI is not installed (npm ci in testdata/agents; scripts/test does it where npm is): %v", err)
		}
		runInsideLoopbackNetns(t, "shell_allowed_runs", "shell_denied,_the_model_gets_the_reason", "patch_approved_by_the_operator,_then_runs",
			"patch_with_a_denied_file_refused_whole", "gateway_stopped,_the_hook_blocks")
		return
	}
	requireOnlyLoopback(t)
	codex, err := filepath.Abs(codexBin())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("shell allowed runs", func(t *testing.T) { codexShellAllowed(t, codex) })
	t.Run("shell denied, the model gets the reason", func(t *testing.T) { codexShellDenied(t, codex) })
	t.Run("patch approved by the operator, then runs", func(t *testing.T) { codexPatchApproved(t, codex) })
	t.Run("patch with a denied file refused whole", func(t *testing.T) { codexPatchDenied(t, codex) })
	t.Run("gateway stopped, the hook blocks", func(t *testing.T) { codexGatewayStopped(t, codex) })
}

// item is one output item of a scripted model answer: an assistant
// message (text), the shell tool (cmd) or apply_patch (patch).
type item struct {
	text  string
	cmd   string
	patch string
}

// codexModel is a scripted OpenAI Responses API on 127.0.0.1 (POST
// /v1/responses, answered as server-sent events). A request of the
// agent's loop (one that offers the exec_command tool) is answered by
// script, given the tool outputs the conversation holds so far; any other
// request gets a short message.
type codexModel struct {
	t      *testing.T
	script func(step int, outputs []toolResult) []item
	srv    *httptest.Server

	mu       sync.Mutex
	requests int
	outputs  []toolResult // the tool outputs of the last main-loop request
	other    []string
	ids      int
}

// newCodexModel starts the model; its script is set once what the
// script reads exists (setScript), since the run needs the model's URL
// first. The script is read under the model's lock, which orders the
// test's writes before the handler's reads.
func newCodexModel(t *testing.T) *codexModel {
	m := &codexModel{t: t}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *codexModel) setScript(script func(step int, outputs []toolResult) []item) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script = script
}

func (m *codexModel) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		m.mu.Lock()
		m.other = append(m.other, r.Method+" "+r.URL.Path)
		m.mu.Unlock()
		m.t.Logf("fake model: %s %s (answered 404)", r.Method, r.URL)
		http.NotFound(w, r)
		return
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		m.t.Errorf("fake model: a /responses body that is not JSON: %v", err)
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	outputs := toolOutputs(req)
	main := offersTool(req, "exec_command")
	m.mu.Lock()
	m.requests++
	if main {
		m.outputs = outputs
	}
	script := m.script
	m.mu.Unlock()
	items := []item{{text: "ok"}}
	if main && script != nil {
		items = script(len(outputs), outputs)
	}
	m.stream(w, items)
}

// toolOutputs is every function_call_output and custom_tool_call_output of
// the request's input, in order, flattened to text. Codex marks no output
// as an error: the text says what happened.
func toolOutputs(req map[string]any) []toolResult {
	var out []toolResult
	in, _ := req["input"].([]any)
	for _, iv := range in {
		it, _ := iv.(map[string]any)
		if it["type"] != "function_call_output" && it["type"] != "custom_tool_call_output" {
			continue
		}
		var r toolResult
		switch v := it["output"].(type) {
		case string:
			r.text = v
		case []any:
			for _, pv := range v {
				if p, _ := pv.(map[string]any); p != nil {
					s, _ := p["text"].(string)
					r.text += s
				}
			}
		case map[string]any: // {"content": ..., "success": ...}
			b, _ := json.Marshal(v)
			r.text = string(b)
		}
		out = append(out, r)
	}
	return out
}

func (m *codexModel) nextID(prefix string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids++
	return fmt.Sprintf("%s_e2e%04d", prefix, m.ids)
}

// stream answers with the Responses API's events: response.created, one
// response.output_item.done per item (a message, a function_call of
// exec_command, a custom_tool_call of apply_patch), response.completed.
func (m *codexModel) stream(w http.ResponseWriter, items []item) {
	id := m.nextID("resp")
	var sb strings.Builder
	event := func(data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(&sb, "event: %s\ndata: %s\n\n", data["type"], b)
	}
	event(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	for _, it := range items {
		var o map[string]any
		switch {
		case it.cmd != "":
			args, _ := json.Marshal(map[string]any{"cmd": it.cmd})
			o = map[string]any{"type": "function_call", "call_id": m.nextID("call"), "name": "exec_command", "arguments": string(args)}
		case it.patch != "":
			o = map[string]any{"type": "custom_tool_call", "call_id": m.nextID("call"), "name": "apply_patch", "input": it.patch}
		default:
			o = map[string]any{"type": "message", "role": "assistant", "id": m.nextID("msg"),
				"content": []any{map[string]any{"type": "output_text", "text": it.text}}}
		}
		event(map[string]any{"type": "response.output_item.done", "item": o})
	}
	event(map[string]any{"type": "response.completed", "response": map[string]any{"id": id, "usage": map[string]any{
		"input_tokens": 10, "input_tokens_details": nil, "output_tokens": 20, "output_tokens_details": nil, "total_tokens": 30}}})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	io.WriteString(w, sb.String())
}

// lastOutputs is the tool outputs of the last main-loop request.
func (m *codexModel) lastOutputs() []toolResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t.Logf("the fake model answered %d /responses requests; other endpoints: %q", m.requests, m.other)
	for i, r := range m.outputs {
		m.t.Logf("the model received tool output %d: %s", i, r.text)
	}
	return m.outputs
}

// codexRun is one agent run's setup: the gateway's folder, the workspace
// (a git repository), and a fresh CODEX_HOME whose config.toml names the
// fake model and whose hooks.json has the hook installed.
type codexRun struct {
	g    *gwDir
	ws   string
	home string
}

// codexConfigTOML is the CLI's configuration: the fake model as the only
// provider, and every switch for traffic beyond it off (the update check,
// analytics, feedback, OpenTelemetry export, history, plugins). The run
// passes --strict-config, so a switch this version does not know fails the
// run rather than being ignored.
func codexConfigTOML(modelURL string) string {
	return `model = "` + codexModelName + `"
model_provider = "backplane_e2e"
check_for_update_on_startup = false
approval_policy = "never"

[model_providers.backplane_e2e]
name = "Backplane e2e fake model"
base_url = "` + modelURL + `/v1"
wire_api = "responses"

[features]
plugins = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[history]
persistence = "none"
`
}

func newCodexRun(t *testing.T, m *codexModel) *codexRun {
	t.Helper()
	g := newGWDir(t, codexE2EConfig)
	ws := filepath.Join(g.dir, "ws")
	for _, d := range []string{"docs", "src"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(codexConfigTOML(m.srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(home, "hooks.json")
	if r := g.run(t, "", "hook", "install", "codex", "--file", hooks, "--caller", "agent"); r.code != exitOK || !strings.Contains(r.stdout, "trusted in") {
		t.Fatalf("hook install codex: %d %s %s", r.code, r.stdout, r.stderr)
	}
	g.run(t, "", "hook", "install", "codex", "--file", hooks, "--check").wantCode(t, exitOK)
	return &codexRun{g: g, ws: ws, home: home}
}

// run starts `codex exec` on prompt with stdin from /dev/null and a
// timeout, and returns the agent's last message. Codex runs a hook only
// once it is trusted: the hash hook install wrote into config.toml is
// what makes it run (no --dangerously-bypass-hook-trust), so a Codex that
// trusts otherwise fails every case here that needs the hook.
func (c *codexRun) run(t *testing.T, codex, prompt string) string {
	t.Helper()
	last := filepath.Join(t.TempDir(), "last-message")
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "timeout", "-k", "5", "75", codex, "exec",
		"--strict-config", "--ephemeral", "--color", "never",
		"-s", "workspace-write", "-C", c.ws, "-o", last, prompt)
	cmd.Dir = c.ws
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + c.home,
		"CODEX_HOME=" + c.home,
		"TMPDIR=" + t.TempDir(),
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
	t.Logf("codex ran %v; stdout: %s\nstderr: %s", time.Since(start).Round(time.Millisecond), out, stderr.String())
	if err != nil {
		t.Fatalf("codex exec: %v", err)
	}
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatalf("codex wrote no last message: %v", err)
	}
	return string(b)
}

func wantLast(t *testing.T, got, words string) {
	t.Helper()
	if !strings.Contains(got, words) {
		t.Errorf("codex's last message %q, want %q", got, words)
	}
}

func codexShellAllowed(t *testing.T, codex string) {
	m := newCodexModel(t)
	script := func(step int, _ []toolResult) []item {
		if step == 0 {
			return []item{{cmd: "git status"}}
		}
		return []item{{text: "E2E done: status shown."}}
	}
	c := newCodexRun(t, m)
	m.setScript(script)
	wantLast(t, c.run(t, codex, "Show the git status."), "E2E done: status shown.")
	res := m.lastOutputs()
	if len(res) != 1 {
		t.Fatalf("the model received %d tool outputs, want 1: %+v", len(res), res)
	}
	if !strings.Contains(res[0].text, "No commits yet") {
		t.Errorf("the model received %q, want git status's output", res[0].text)
	}
	list := c.g.runJSON(t, exitOK, "", "journal", "list")
	intents, _ := list["intents"].([]any)
	if len(intents) != 1 {
		t.Fatalf("journal %v, want the one decided call", list)
	}
	if e := intents[0].(map[string]any); e["tool"] != "bash" || e["caller"] != "agent" || e["error_class"] != "decision_only" || e["session"] == "" {
		t.Errorf("journal entry %v, want a decision-only bash by agent in Codex's session", e)
	}
}

func codexShellDenied(t *testing.T, codex string) {
	m := newCodexModel(t)
	script := func(step int, _ []toolResult) []item {
		if step == 0 {
			return []item{{cmd: "git status && rm -rf x"}}
		}
		return []item{{text: "E2E done: refused."}}
	}
	c := newCodexRun(t, m)
	victim := filepath.Join(c.ws, "x")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.setScript(script)
	wantLast(t, c.run(t, codex, "Show the status and remove x."), "E2E done: refused.")
	res := m.lastOutputs()
	if len(res) != 1 {
		t.Fatalf("the model received %d tool outputs, want 1: %+v", len(res), res)
	}
	if !strings.Contains(res[0].text, "rm -rf") || !strings.Contains(res[0].text, "denied") {
		t.Errorf("the model received %q, want Backplane's deny reason", res[0].text)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("x is gone: %v", err)
	}
}

func codexPatchApproved(t *testing.T, codex string) {
	patch := "*** Begin Patch\n*** Add File: docs/new.md\n+# New\n+\n+Written by the agent.\n*** End Patch\n"
	var c *codexRun
	var target string
	m := newCodexModel(t)
	script := func(step int, outputs []toolResult) []item {
		switch step {
		case 0:
			return []item{{patch: patch}}
		case 1:
			if _, err := os.Stat(target); err == nil {
				t.Errorf("the patch ran before its approval")
			}
			list := c.g.runJSON(t, exitOK, "", "approvals", "list", "--status", "pending")
			aps, _ := list["approvals"].([]any)
			if len(aps) != 1 {
				t.Errorf("approvals %v, want one pending", list)
				return []item{{text: "E2E failed: no pending approval."}}
			}
			id, _ := aps[0].(map[string]any)["id"].(string)
			if !strings.Contains(outputs[0].text, id) || !strings.Contains(outputs[0].text, "approv") {
				t.Errorf("the model received %q, want a refusal naming approval %s", outputs[0].text, id)
			}
			if a := c.g.operator(t, "approvals", "approve", id, "--reason", "e2e"); a.code != exitOK {
				t.Errorf("approvals approve %s: %d %s %s", id, a.code, a.stdout, a.stderr)
			}
			return []item{{text: "Approved; trying again."}, {patch: patch}}
		default:
			return []item{{text: "E2E done: written."}}
		}
	}
	c = newCodexRun(t, m)
	target = filepath.Join(c.ws, "docs", "new.md")
	m.setScript(script)
	wantLast(t, c.run(t, codex, "Write docs/new.md."), "E2E done: written.")
	if res := m.lastOutputs(); len(res) != 2 {
		t.Fatalf("the model received %d tool outputs, want 2: %+v", len(res), res)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "# New\n\nWritten by the agent.\n" {
		t.Errorf("docs/new.md after the approved attempt: %q, %v", b, err)
	}
}

func codexPatchDenied(t *testing.T, codex string) {
	patch := "*** Begin Patch\n*** Add File: src/ok.txt\n+fine\n*** Update File: .env\n@@\n-TOKEN=1\n+TOKEN=2\n*** End Patch\n"
	m := newCodexModel(t)
	script := func(step int, _ []toolResult) []item {
		if step == 0 {
			return []item{{patch: patch}}
		}
		return []item{{text: "E2E done: patch refused."}}
	}
	c := newCodexRun(t, m)
	env := filepath.Join(c.ws, ".env")
	if err := os.WriteFile(env, []byte("TOKEN=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m.setScript(script)
	wantLast(t, c.run(t, codex, "Add src/ok.txt and change the token."), "E2E done: patch refused.")
	res := m.lastOutputs()
	if len(res) != 1 {
		t.Fatalf("the model received %d tool outputs, want 1: %+v", len(res), res)
	}
	if !strings.Contains(res[0].text, `denied by "edit(**/.env)"`) {
		t.Errorf("the model received %q, want Backplane's deny naming edit(**/.env)", res[0].text)
	}
	if b, _ := os.ReadFile(env); string(b) != "TOKEN=1\n" {
		t.Errorf(".env is now %q", b)
	}
	// The allowed file of the refused patch is not written either: the
	// patch is decided as a whole.
	if _, err := os.Stat(filepath.Join(c.ws, "src", "ok.txt")); err == nil {
		t.Error("src/ok.txt was written by a refused patch")
	}
	list := c.g.runJSON(t, exitOK, "", "journal", "list")
	if intents, _ := list["intents"].([]any); len(intents) != 0 {
		t.Errorf("journal %v, want nothing journaled for a refused patch", list)
	}
}

// The hook asks a running serve (--url); once serve is stopped, the hook
// cannot reach it and blocks (exit 2), which Codex honours.
func codexGatewayStopped(t *testing.T, codex string) {
	var p *serveProc
	m := newCodexModel(t)
	script := func(step int, _ []toolResult) []item {
		switch step {
		case 0:
			return []item{{cmd: "touch ran-1"}}
		case 1:
			if err := p.stop(t); err != nil {
				t.Logf("serve exit: %v", err)
			}
			return []item{{cmd: "touch ran-2"}}
		default:
			return []item{{text: "E2E done: blocked."}}
		}
	}
	c := newCodexRun(t, m)
	p = startServe(t, c.g)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok-agent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks := filepath.Join(c.home, "hooks.json")
	if err := os.Remove(hooks); err != nil {
		t.Fatal(err)
	}
	// The new hook replaces the old at the same place (group 0): install
	// trusts it anew.
	c.g.run(t, "", "hook", "install", "codex", "--file", hooks, "--url", p.base, "--token-file", token).wantCode(t, exitOK)
	m.setScript(script)
	wantLast(t, c.run(t, codex, "Touch two files."), "E2E done: blocked.")
	res := m.lastOutputs()
	if len(res) != 2 {
		t.Fatalf("the model received %d tool outputs, want 2: %+v", len(res), res)
	}
	if _, err := os.Stat(filepath.Join(c.ws, "ran-1")); err != nil {
		t.Errorf("the call allowed through serve did not run: %v %+v", err, res[0])
	}
	if _, err := os.Stat(filepath.Join(c.ws, "ran-2")); err == nil {
		t.Error("the command ran with the gateway stopped")
	}
	if !strings.Contains(res[1].text, "cannot be reached") {
		t.Errorf("with the gateway stopped the model received %q, want the hook's block naming the unreachable gateway", res[1].text)
	}
}
