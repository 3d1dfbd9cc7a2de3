package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hookConfig governs an agent's own tools: the built-ins give the policy
// its vocabulary (they are never run by a hook).
const hookConfig = `
workspace: ws
builtin:
  enable: [read, write, edit, bash, glob, grep]
  safety:
    bash: {requires_approval: false}
    write: {requires_approval: false}
    edit: {requires_approval: false}
serve:
  tokens:
    tok-agent: agent
policy:
  - caller: agent
    allow: ["bash(git status*)", read, "edit(src/**)"]
    approve: ["write(docs/**)"]
    deny: ["bash(*rm -rf*)", "edit(**/.env)"]
`

func newHookDir(t *testing.T) (*gwDir, string) {
	t.Helper()
	g := newGWDir(t, hookConfig)
	ws := filepath.Join(g.dir, "ws")
	for _, d := range []string{"ws", "ws/docs", "ws/src"} {
		if err := os.Mkdir(filepath.Join(g.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return g, ws
}

// claudeInput is a Claude Code PreToolUse input as the agent sends it.
func claudeInput(t *testing.T, cwd, tool string, input map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"session_id": "sess-1", "transcript_path": "/nowhere.jsonl", "cwd": cwd, "permission_mode": "default",
		"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input, "tool_use_id": "toolu_1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hookAnswer checks a decided hook run (exit 0, nothing on stderr) and
// returns its permissionDecision and reason.
func hookAnswer(t *testing.T, r result) (decision, reason string) {
	t.Helper()
	r.wantCode(t, exitOK)
	if r.stderr != "" {
		t.Errorf("a decided hook wrote to stderr: %s", r.stderr)
	}
	var o struct {
		H map[string]string `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
		t.Fatalf("hook output %q: %v", r.stdout, err)
	}
	if o.H["hookEventName"] != "PreToolUse" {
		t.Errorf("hookEventName %q", o.H["hookEventName"])
	}
	return o.H["permissionDecision"], o.H["permissionDecisionReason"]
}

func TestHookAllowIsJournaledDecisionOnly(t *testing.T) {
	g, ws := newHookDir(t)
	in := claudeInput(t, ws, "Bash", map[string]any{"command": "git status", "description": "status"})
	if d, _ := hookAnswer(t, g.run(t, in, "hook", "claude-code", "--caller", "agent")); d != "allow" {
		t.Fatalf("decision %q, want allow", d)
	}
	m := g.runJSON(t, exitOK, "", "journal", "list")
	list, _ := m["intents"].([]any)
	if len(list) != 1 {
		t.Fatalf("journal %v, want one entry", m)
	}
	e := list[0].(map[string]any)
	if e["tool"] != "bash" || e["caller"] != "agent" || e["session"] != "sess-1" || e["error_class"] != "decision_only" {
		t.Errorf("journal entry %v, want bash by agent in sess-1, decision_only", e)
	}
	if r := g.run(t, "", "journal", "list"); !strings.Contains(r.stdout, "succeeded (decision only)") {
		t.Errorf("journal list does not mark the decision:\n%s", r.stdout)
	}
	// The caller from the token, the same answer.
	r := g.command(in, "hook", "claude-code")
	r.Env = append(r.Env, "BACKPLANE_TOKEN=tok-agent")
	out, err := r.Output()
	if err != nil || !strings.Contains(string(out), `"permissionDecision":"allow"`) {
		t.Errorf("caller from the token: %s, %v", out, err)
	}
	// Codex: an allow prints nothing.
	r2 := g.run(t, in, "hook", "codex", "--caller", "agent")
	r2.wantCode(t, exitOK)
	if r2.stdout != "" || r2.stderr != "" {
		t.Errorf("codex allow printed %q / %q, want nothing", r2.stdout, r2.stderr)
	}
}

func TestHookDenyCarriesTheReason(t *testing.T) {
	g, ws := newHookDir(t)
	in := claudeInput(t, ws, "Bash", map[string]any{"command": "git status && rm -rf x"})
	d, reason := hookAnswer(t, g.run(t, in, "hook", "claude-code", "--caller", "agent"))
	if d != "deny" || !strings.Contains(reason, "rm -rf") || !strings.Contains(reason, "denied") {
		t.Errorf("decision %q reason %q, want deny naming rm -rf", d, reason)
	}
	in = claudeInput(t, ws, "Edit", map[string]any{"file_path": filepath.Join(ws, ".env"), "old_string": "a", "new_string": "b"})
	if d, reason := hookAnswer(t, g.run(t, in, "hook", "claude-code", "--caller", "agent")); d != "deny" || !strings.Contains(reason, `denied by "edit(**/.env)"`) {
		t.Errorf("edit of .env: %q %q, want deny", d, reason)
	}
	// A cwd outside the workspace: denied whatever the command.
	in = claudeInput(t, g.dir, "Bash", map[string]any{"command": "git status"})
	if d, reason := hookAnswer(t, g.run(t, in, "hook", "claude-code", "--caller", "agent")); d != "deny" || !strings.Contains(reason, "workspace") {
		t.Errorf("cwd outside: %q %q, want deny", d, reason)
	}
}

func TestHookApprovalThenAllowedOnce(t *testing.T) {
	g, ws := newHookDir(t)
	in := claudeInput(t, ws, "Write", map[string]any{"file_path": filepath.Join(ws, "docs", "new.md"), "content": "# New\n"})
	hookRun := func() (string, string) {
		return hookAnswer(t, g.run(t, in, "hook", "claude-code", "--caller", "agent"))
	}
	d, reason := hookRun()
	if d != "deny" || !strings.Contains(reason, "approval") {
		t.Fatalf("first attempt %q %q, want deny asking for an approval", d, reason)
	}
	list := g.runJSON(t, exitOK, "", "approvals", "list", "--status", "pending")
	aps, _ := list["approvals"].([]any)
	if len(aps) != 1 {
		t.Fatalf("approvals %v, want one pending", list)
	}
	id := aps[0].(map[string]any)["id"].(string)
	if !strings.Contains(reason, id) {
		t.Errorf("reason %q does not name request %s", reason, id)
	}
	// The operator sees what the agent would write, as a diff.
	if r := g.run(t, "", "approvals", "show", id); !strings.Contains(r.stdout, "+# New") {
		t.Errorf("approvals show %s has no diff of the write:\n%s", id, r.stdout)
	}
	if d, _ := hookAnswer(t, g.run(t, in, "hook", "claude-code", "--caller", "agent", "--pending", "ask")); d != "ask" {
		t.Errorf("--pending ask answered %q", d)
	}
	g.runJSON(t, exitOK, "", "approvals", "approve", id, "--as", "bob")
	if d, reason := hookRun(); d != "allow" {
		t.Fatalf("after the approval %q %q, want allow", d, reason)
	}
	if d, _ := hookRun(); d != "deny" {
		t.Errorf("the approval was used twice: %q", d)
	}
}

// Fail closed: whatever goes wrong, exit 2 with the reason on stderr and
// nothing on stdout, which both agents take as a block.
func TestHookFailsClosed(t *testing.T) {
	g, ws := newHookDir(t)
	good := claudeInput(t, ws, "Bash", map[string]any{"command": "git status"})
	cases := map[string]struct {
		stdin string
		args  []string
		want  string
	}{
		"bad json":      {"{not json", []string{"hook", "claude-code", "--caller", "agent"}, "bad hook input"},
		"control chars": {`{"hook_event_name":"Pre\u001b[31mToolUse"}`, []string{"hook", "claude-code", "--caller", "agent"}, `\x1b`},
		"unknown agent": {good, []string{"hook", "vim", "--caller", "agent"}, "unknown agent"},
		"no caller":     {good, []string{"hook", "claude-code"}, "no caller"},
		"bad token":     {good, []string{"hook", "claude-code", "--token-file", writeFile(t, "tok", "nope\n")}, "not in serve.tokens"},
		"no config":     {good, []string{"hook", "claude-code", "--caller", "agent", "--config", filepath.Join(g.dir, "missing.yaml")}, "missing.yaml"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := g.run(t, tc.stdin, tc.args...)
			r.wantCode(t, exitUsage)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if !strings.Contains(r.stderr, tc.want) || strings.ContainsRune(r.stderr, 0x1b) {
				t.Errorf("stderr %q, want %q and no raw control character", r.stderr, tc.want)
			}
		})
	}
}

// A Bash decision does not start the MCP servers (a hook runs for every
// tool use); an MCP tool use does, and one that cannot start blocks.
func TestHookStartsServersOnlyForTheirTools(t *testing.T) {
	g := newGWDir(t, hookConfig+`
servers:
  - name: broken
    command: [/nonexistent/mcp-server]
`)
	ws := filepath.Join(g.dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	in := claudeInput(t, ws, "Bash", map[string]any{"command": "git status"})
	if d, _ := hookAnswer(t, g.run(t, in, "hook", "claude-code", "--caller", "agent")); d != "allow" {
		t.Errorf("bash with a broken server configured: %q, want allow", d)
	}
	in = claudeInput(t, ws, "mcp__broken__x", map[string]any{})
	r := g.run(t, in, "hook", "claude-code", "--caller", "agent")
	r.wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "broken") || r.stdout != "" {
		t.Errorf("mcp tool of a broken server: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// --url asks the running gateway: the same decisions, the caller from the
// token; a stopped gateway, a wrong token or a refused connection blocks.
func TestHookAsksTheRunningGateway(t *testing.T) {
	g, ws := newHookDir(t)
	p := startServe(t, g)
	hookURL := func(stdin string, extra ...string) result {
		cmd := g.command(stdin, append([]string{"hook", "claude-code", "--url", p.base}, extra...)...)
		cmd.Env = append(cmd.Env, "BACKPLANE_TOKEN=tok-agent")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		return finish(t, cmd.Run(), &out, &errOut, nil)
	}
	allow := claudeInput(t, ws, "Bash", map[string]any{"command": "git status"})
	if d, _ := hookAnswer(t, hookURL(allow)); d != "allow" {
		t.Errorf("allowed command through serve: %q", d)
	}
	deny := claudeInput(t, ws, "Bash", map[string]any{"command": "rm -rf /"})
	if d, reason := hookAnswer(t, hookURL(deny)); d != "deny" || !strings.Contains(reason, "rm -rf") {
		t.Errorf("denied command through serve: %q %q", d, reason)
	}
	// Approval through serve, decided from another process.
	write := claudeInput(t, ws, "Write", map[string]any{"file_path": filepath.Join(ws, "docs", "n.md"), "content": "x"})
	if d, _ := hookAnswer(t, hookURL(write)); d != "deny" {
		t.Fatalf("write needing approval through serve: %q", d)
	}
	id := waitPending(t, g)
	g.runJSON(t, exitOK, "", "approvals", "approve", id, "--as", "bob")
	if d, reason := hookAnswer(t, hookURL(write)); d != "allow" {
		t.Fatalf("approved write through serve: %q %q", d, reason)
	}

	// A token serve does not know: 401, blocked.
	cmd := g.command(allow, "hook", "claude-code", "--url", p.base)
	cmd.Env = append(cmd.Env, "BACKPLANE_TOKEN=wrong")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	r := finish(t, cmd.Run(), &out, &errOut, nil)
	r.wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "401") || r.stdout != "" {
		t.Errorf("wrong token: stdout %q stderr %q", r.stdout, r.stderr)
	}

	// The gateway stopped: unreachable, blocked.
	if err := p.stop(t); err != nil {
		t.Logf("serve exit: %v", err)
	}
	r = hookURL(allow)
	r.wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "cannot be reached") || r.stdout != "" {
		t.Errorf("stopped gateway: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// --wait holds the answer until an operator decides from another process.
func TestHookWaitsForTheOperator(t *testing.T) {
	g, ws := newHookDir(t)
	in := claudeInput(t, ws, "Write", map[string]any{"file_path": filepath.Join(ws, "docs", "w.md"), "content": "w"})
	cmd := g.command(in, "hook", "claude-code", "--caller", "agent", "--wait", "30s")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	id := waitPending(t, g)
	select {
	case err := <-done:
		t.Fatalf("the hook answered before the decision: %v %s %s", err, out.String(), errOut.String())
	default:
	}
	g.runJSON(t, exitOK, "", "approvals", "approve", id, "--as", "bob")
	r := finish(t, <-done, &out, &errOut, nil)
	if d, reason := hookAnswer(t, r); d != "allow" {
		t.Fatalf("after the operator approved during the wait: %q %q", d, reason)
	}
}

func TestHookInstall(t *testing.T) {
	g, _ := newHookDir(t)
	settings := filepath.Join(t.TempDir(), "claude", "settings.json")
	r := g.run(t, "", "hook", "install", "claude-code", "--file", settings, "--caller", "agent")
	r.wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "added to") || !strings.Contains(r.stdout, "--caller agent") {
		t.Errorf("install said %q", r.stdout)
	}
	data, err := os.ReadFile(settings)
	if err != nil {
		t.Fatal(err)
	}
	// The installed command is what the agent runs: run it as the agent
	// would (a shell, another working folder, no BACKPLANE_CONFIG).
	var s struct {
		Hooks struct {
			PreToolUse []struct {
				Hooks []struct{ Command string }
			}
		}
	}
	if err := json.Unmarshal(data, &s); err != nil || len(s.Hooks.PreToolUse) != 1 {
		t.Fatalf("settings %s: %v", data, err)
	}
	agentCmd := exec.Command("/bin/sh", "-c", s.Hooks.PreToolUse[0].Hooks[0].Command)
	agentCmd.Dir = t.TempDir()
	agentCmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	agentCmd.Stdin = strings.NewReader(claudeInput(t, filepath.Join(g.dir, "ws"), "Bash", map[string]any{"command": "git status"}))
	if out, err := agentCmd.Output(); err != nil || !strings.Contains(string(out), `"permissionDecision":"allow"`) {
		t.Errorf("the installed command, run as the agent runs it: %s, %v", out, err)
	}
	if st, _ := os.Stat(settings); st.Mode().Perm() != 0o600 {
		t.Errorf("a new settings file has mode %v, want 0600", st.Mode().Perm())
	}
	g.run(t, "", "hook", "install", "claude-code", "--file", settings, "--check").wantCode(t, exitOK)
	r = g.run(t, "", "hook", "install", "claude-code", "--file", settings, "--caller", "agent")
	if r.code != exitOK || !strings.Contains(r.stdout, "nothing changed") {
		t.Errorf("second install: %d %q", r.code, r.stdout)
	}
	bad := writeFile(t, "bad.json", `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"backplane hook codex"}]}]}}`)
	r = g.run(t, "", "hook", "install", "codex", "--file", bad, "--check")
	if r.code != exitNegative || !strings.Contains(r.stdout, "apply_patch") {
		t.Errorf("check of a matcher that misses apply_patch: %d %q", r.code, r.stdout)
	}
	g.run(t, "", "hook", "install", "claude-code", "--file", settings).wantUsageError(t)
}

func TestHookGemini(t *testing.T) {
	g, ws := newHookDir(t)
	in := func(command string) string {
		b, _ := json.Marshal(map[string]any{"session_id": "g1", "cwd": ws, "hook_event_name": "BeforeTool", "timestamp": "2026-12-01T21:40:00Z",
			"tool_name": "run_shell_command", "tool_input": map[string]any{"command": command}})
		return string(b)
	}
	for command, want := range map[string]string{"git status": "allow", "git status; rm -rf /": "deny"} {
		r := g.run(t, in(command), "hook", "gemini", "--caller", "agent")
		r.wantCode(t, exitOK)
		var o map[string]string
		if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || o["decision"] != want {
			t.Errorf("%q: %s, want decision %s", command, r.stdout, want)
		}
		if want == "deny" && !strings.Contains(o["reason"], "rm -rf") {
			t.Errorf("%q: reason %q", command, o["reason"])
		}
	}
}

// An agent that never closes the hook's stdin: the hook blocks on its own
// before the agent's timeout would let the tool run.
func TestHookBlocksWhenStuck(t *testing.T) {
	g, _ := newHookDir(t)
	cmd := g.command("", "hook", "claude-code", "--caller", "agent", "--timeout", "1s")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cmd.Stdin = pr
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err = cmd.Run()
	pr.Close()
	r := finish(t, err, &out, &errOut, nil)
	r.wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "no decision within") || r.stdout != "" {
		t.Errorf("stuck hook: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the stuck hook took %v to block", d)
	}
}

// Cursor's beforeShellExecution and beforeReadFile, decided from the
// configuration and through a running serve (whose answer the hook
// passes on only when it is the agent's decision format: Cursor's
// permission, Gemini CLI's decision); hook install cursor writes a file
// that checks.
func TestHookCursor(t *testing.T) {
	g, ws := newHookDir(t)
	if err := os.WriteFile(filepath.Join(ws, ".env"), []byte("A=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shell := func(command string) string {
		b, _ := json.Marshal(map[string]any{"conversation_id": "c1", "generation_id": "g1", "hook_event_name": "beforeShellExecution",
			"workspace_roots": []string{ws}, "command": command, "cwd": ws})
		return string(b)
	}
	read := func(file string) string {
		b, _ := json.Marshal(map[string]any{"conversation_id": "c1", "generation_id": "g2", "hook_event_name": "beforeReadFile",
			"workspace_roots": []string{ws}, "file_path": file, "content": "A=1\n"})
		return string(b)
	}
	p := startServe(t, g)
	viaServe := func(agent, stdin string) result {
		cmd := g.command(stdin, "hook", agent, "--url", p.base)
		cmd.Env = append(cmd.Env, "BACKPLANE_TOKEN=tok-agent")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		return finish(t, cmd.Run(), &out, &errOut, nil)
	}
	cases := []struct{ stdin, want, reason string }{
		{shell("git status"), "allow", ""},
		{shell("git status && rm -rf /"), "deny", "rm -rf"},
		{read(filepath.Join(ws, "src", "a.go")), "allow", ""},
		{read(filepath.Join(ws, ".env")), "allow", ""}, // hookConfig allows read; .env is denied only for edit
	}
	for _, tc := range cases {
		for how, r := range map[string]result{
			"config": g.run(t, tc.stdin, "hook", "cursor", "--caller", "agent"),
			"serve":  viaServe("cursor", tc.stdin),
		} {
			r.wantCode(t, exitOK)
			var o map[string]string
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || o["permission"] != tc.want || !strings.Contains(o["agent_message"], tc.reason) {
				t.Errorf("%s %s: %s %s, want permission %s", how, tc.stdin, r.stdout, r.stderr, tc.want)
			}
		}
	}
	gem, _ := json.Marshal(map[string]any{"session_id": "g1", "cwd": ws, "hook_event_name": "BeforeTool",
		"tool_name": "run_shell_command", "tool_input": map[string]any{"command": "git status"}})
	if r := viaServe("gemini", string(gem)); r.code != exitOK || !strings.Contains(r.stdout, `"decision":"allow"`) {
		t.Errorf("gemini through serve: %d %s %s", r.code, r.stdout, r.stderr)
	}

	hooks := filepath.Join(t.TempDir(), "hooks.json")
	r := g.run(t, "", "hook", "install", "cursor", "--file", hooks, "--caller", "agent")
	if r.code != exitOK || !strings.Contains(r.stdout, "beforeReadFile") {
		t.Errorf("hook install cursor: %d %s %s", r.code, r.stdout, r.stderr)
	}
	g.run(t, "", "hook", "install", "cursor", "--file", hooks, "--check").wantCode(t, exitOK)
}
