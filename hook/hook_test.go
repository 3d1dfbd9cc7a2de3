package hook_test

// Recorded hook inputs (testdata/, the workspace written as $WS) decided by
// a real gateway over a real policy and store, with the built-in tools'
// real schemas behind a backend that fails the test if it is ever run:
// a hook decides, it never runs anything.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/hook"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

type env struct {
	ws      string
	g       *gateway.Gateway
	st      store.Store
	invoked atomic.Int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ws := t.TempDir()
	for _, d := range []string{"docs", "src"} {
		if err := os.Mkdir(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{"src/main.go": "package main\n", ".env": "A=1\n", "docs/a.md": "x p\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := policy.Compile([]policy.Rule{{
		Caller:  "agent",
		Allow:   []string{"bash(git status*)", "read", "glob", "grep", "url_fetch(domain:docs.example.com)", "demo.note", "edit(docs/**)", "edit(src/**)"},
		Approve: []string{"write(docs/**)", "edit(docs/hello.txt)"},
		Deny:    []string{"read(**/.env)", "edit(**/.env)", "bash(*rm -rf*)"},
	}}, &policy.Options{Workspace: []string{ws}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{ws: ws, st: memstore.New()}
	e.g = gateway.New(&gateway.Options{Store: e.st, Policy: rules})
	never := tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
		e.invoked.Add(1)
		return nil, errors.New("a hook decision invoked a backend")
	})
	for _, s := range schemas.All() {
		if err := e.g.Register(context.Background(), tool.Tool{Name: s.Name, Description: s.Description, InputSchema: s.InputSchema, Backend: never}); err != nil {
			t.Fatal(err)
		}
	}
	note := `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`
	if err := e.g.Register(context.Background(), tool.Tool{Name: "demo.note", InputSchema: json.RawMessage(note), Backend: never}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) opts() *hook.Options {
	return &hook.Options{Caller: "agent", MapOptions: hook.MapOptions{
		Workspace: e.ws,
		MCPTool: func(server, tool string) (string, bool) {
			if server == "demo" {
				return "demo." + tool, true
			}
			return "", false
		},
		MCPServer: func(url, command string) (string, bool) {
			return "demo", command == "npx demo-server"
		},
	}}
}

func (e *env) input(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.ReplaceAll(string(b), "$WS", e.ws))
}

func TestRecordedInputs(t *testing.T) {
	cases := []struct {
		file    string
		agent   hook.Agent
		want    hook.Outcome
		calls   int    // decision-only journal entries of an allow
		reason  string // in the reason of a refusal
		wantErr error  // a failure to decide (exit 2), not a decision
	}{
		{file: "claude-bash.json", agent: hook.ClaudeCode, want: hook.Allow, calls: 1},
		{file: "claude-bash-rm.json", agent: hook.ClaudeCode, want: hook.Deny, reason: "rm -rf"},
		{file: "claude-write.json", agent: hook.ClaudeCode, want: hook.Approve, reason: "approval"},
		{file: "claude-edit-env.json", agent: hook.ClaudeCode, want: hook.Deny, reason: `denied by "edit(**/.env)"`},
		{file: "claude-multiedit.json", agent: hook.ClaudeCode, want: hook.Allow, calls: 2},
		{file: "claude-read.json", agent: hook.ClaudeCode, want: hook.Allow, calls: 1},
		{file: "claude-read-outside.json", agent: hook.ClaudeCode, want: hook.Deny, reason: "outside the workspace"},
		{file: "claude-grep.json", agent: hook.ClaudeCode, want: hook.Allow, calls: 1},
		{file: "claude-webfetch.json", agent: hook.ClaudeCode, want: hook.Allow, calls: 1},
		{file: "claude-webfetch-other.json", agent: hook.ClaudeCode, want: hook.Deny, reason: "url_fetch"},
		{file: "claude-mcp.json", agent: hook.ClaudeCode, want: hook.Allow, calls: 1},
		{file: "claude-task.json", agent: hook.ClaudeCode, want: hook.Deny, reason: "no Backplane tool"},
		{file: "claude-cwd-outside.json", agent: hook.ClaudeCode, want: hook.Deny, reason: "cwd"},
		{file: "codex-bash.json", agent: hook.Codex, want: hook.Allow, calls: 1},
		{file: "codex-apply-patch.json", agent: hook.Codex, want: hook.Approve, reason: "approval for edit"},
		{file: "codex-apply-patch-env.json", agent: hook.Codex, want: hook.Deny, reason: ".env"},
		{file: "claude-bash.json", agent: hook.Codex, want: hook.Allow, calls: 1}, // the formats agree on Bash
		{file: "gemini-shell.json", agent: hook.Gemini, want: hook.Allow, calls: 1},
		{file: "gemini-shell-dir-outside.json", agent: hook.Gemini, want: hook.Deny, reason: "outside the workspace"},
		{file: "gemini-replace-env.json", agent: hook.Gemini, want: hook.Deny, reason: `denied by "edit(**/.env)"`},
		{file: "gemini-write.json", agent: hook.Gemini, want: hook.Approve, reason: "approval for write"},
		{file: "gemini-web-fetch.json", agent: hook.Gemini, want: hook.Deny, reason: "evil.example.net"},
		{file: "gemini-mcp.json", agent: hook.Gemini, want: hook.Allow, calls: 1},
		{file: "gemini-grep.json", agent: hook.Gemini, want: hook.Allow, calls: 1},
		{file: "cursor-shell.json", agent: hook.Cursor, want: hook.Allow, calls: 1},
		{file: "cursor-shell-rm.json", agent: hook.Cursor, want: hook.Deny, reason: "rm -rf"},
		{file: "cursor-shell-cwd-outside.json", agent: hook.Cursor, want: hook.Deny, reason: "cwd"},
		{file: "cursor-read-env.json", agent: hook.Cursor, want: hook.Deny, reason: `denied by "read(**/.env)"`},
		{file: "cursor-read.json", agent: hook.Cursor, want: hook.Allow, calls: 1},
		{file: "cursor-mcp.json", agent: hook.Cursor, want: hook.Allow, calls: 1},
		{file: "cursor-mcp-other.json", agent: hook.Cursor, want: hook.Deny, reason: "not one behind Backplane"},
		{file: "cursor-after-edit.json", agent: hook.Cursor, wantErr: hook.ErrBadInput}, // reports only: never installed for
	}
	for _, tc := range cases {
		t.Run(string(tc.agent)+"/"+tc.file, func(t *testing.T) {
			e := newEnv(t)
			v, err := hook.Evaluate(context.Background(), tc.agent, e.input(t, tc.file), e.g, e.opts())
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || v.Outcome != hook.Deny {
					t.Fatalf("Evaluate = %+v, %v; want a deny with %v", v, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Evaluate: %v (verdict %+v)", err, v)
			}
			if v.Outcome != tc.want {
				t.Fatalf("outcome %s (%s), want %s", v.Outcome, v.Reason, tc.want)
			}
			if !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("reason %q does not say %q", v.Reason, tc.reason)
			}
			if len(v.CallIDs) != tc.calls {
				t.Errorf("%d journal entries %v, want %d", len(v.CallIDs), v.CallIDs, tc.calls)
			}
			for _, id := range v.CallIDs {
				in, err := e.st.GetIntent(context.Background(), id)
				if err != nil || in.ErrorClass != gateway.DecisionOnly || in.Session == "" {
					t.Errorf("journal entry %s = %+v, %v; want a decision-only entry with the agent's session", id, in, err)
				}
			}
			if n := e.invoked.Load(); n != 0 {
				t.Errorf("a backend ran %d times", n)
			}
		})
	}
}

// An apply_patch that adds a file needing approval and edits an allowed
// one: the approved part's approval is consumed only on the attempt where
// every part is allowed.
func TestPatchApprovalConsumedOnlyWhenAllPartsPass(t *testing.T) {
	e := newEnv(t)
	in := e.input(t, "codex-apply-patch.json")
	v, err := hook.Evaluate(context.Background(), hook.Codex, in, e.g, e.opts())
	if err != nil || v.Outcome != hook.Approve || len(v.ApprovalIDs) != 1 {
		t.Fatalf("first attempt = %+v, %v; want one approval pending", v, err)
	}
	if n := countIntents(t, e.st); n != 0 {
		t.Fatalf("%d journal entries before anything was allowed", n)
	}
	if _, err := e.g.DecideApproval(context.Background(), v.ApprovalIDs[0], gateway.ApprovalDecision{Operator: "op", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	v, err = hook.Evaluate(context.Background(), hook.Codex, in, e.g, e.opts())
	if err != nil || v.Outcome != hook.Allow || len(v.CallIDs) != 2 {
		t.Fatalf("after the approval = %+v, %v; want both files allowed", v, err)
	}
	// Once: the same patch again needs a new approval.
	v, _ = hook.Evaluate(context.Background(), hook.Codex, in, e.g, e.opts())
	if v.Outcome != hook.Approve {
		t.Fatalf("third attempt = %+v, want approval_required again", v)
	}
}

func countIntents(t *testing.T, st store.Store) int {
	t.Helper()
	in, err := st.ListIntents(context.Background(), store.IntentFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(in)
}

// A symbolic link inside the workspace does not make a file outside it
// writable.
func TestSymlinkOutOfTheWorkspaceDenied(t *testing.T) {
	e := newEnv(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(e.ws, "docs", "out")); err != nil {
		t.Skip("cannot create a symbolic link here:", err)
	}
	in := `{"session_id":"s","cwd":"` + e.ws + `","hook_event_name":"PreToolUse","tool_name":"Edit","tool_input":{"file_path":"docs/out/x.md","old_string":"a","new_string":"b"}}`
	v, err := hook.Evaluate(context.Background(), hook.ClaudeCode, []byte(in), e.g, e.opts())
	if err != nil || v.Outcome != hook.Deny || !strings.Contains(v.Reason, "outside the workspace") {
		t.Fatalf("verdict %+v, %v; want deny: outside the workspace", v, err)
	}
}

func TestBadInputDeniesWithAnError(t *testing.T) {
	e := newEnv(t)
	for _, in := range []string{
		``, `null`, `[]`, `{"hook_event_name":"PreToolUse"}`,
		`{"hook_event_name":"PostToolUse","tool_name":"Bash","cwd":"/","tool_input":{}}`,
		`{"hook_event_name":"PreToolUse","tool_name":"Bash","cwd":"relative","tool_input":{"command":"ls"}}`,
		`{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_name":"Read","cwd":"/","tool_input":{}}`,
		`{"hook_event_name":"PreToolUse","tool_name":"Bash","cwd":"` + e.ws + `","tool_input":{"command":7}}`,
	} {
		v, err := hook.Evaluate(context.Background(), hook.ClaudeCode, []byte(in), e.g, e.opts())
		if err == nil || v.Outcome != hook.Deny {
			t.Errorf("%s: verdict %+v, error %v; want deny with an error", in, v, err)
		}
	}
	if _, err := hook.Evaluate(context.Background(), hook.ClaudeCode, e.input(t, "claude-bash.json"), e.g, &hook.Options{}); err == nil {
		t.Error("no caller: no error")
	}
}

// A failure of the decision itself (the store) is an error, so the hook
// blocks with exit 2 rather than answering as if the policy had decided.
func TestDecisionFailureIsAnError(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	v, err := hook.Evaluate(ctx, hook.ClaudeCode, e.input(t, "claude-bash.json"), failing{}, e.opts())
	if !errors.Is(err, hook.ErrDecide) || v.Outcome != hook.Deny {
		t.Fatalf("verdict %+v, error %v; want deny with ErrDecide", v, err)
	}
}

type failing struct{}

func (failing) Decide(context.Context, gateway.DecideRequest) (*gateway.DecideResult, error) {
	return nil, errors.New("connection refused")
}

func TestOutput(t *testing.T) {
	deny := hook.Verdict{Outcome: hook.Deny, Reason: "no"}
	pending := hook.Verdict{Outcome: hook.Approve, Reason: "ask again", ApprovalIDs: []string{"apr_1"}}
	cases := []struct {
		agent    hook.Agent
		v        hook.Verdict
		pending  hook.Pending
		decision string // "" : no output at all
	}{
		{hook.ClaudeCode, hook.Verdict{Outcome: hook.Allow}, "", "allow"},
		{hook.ClaudeCode, deny, "", "deny"},
		{hook.ClaudeCode, pending, hook.PendingDeny, "deny"},
		{hook.ClaudeCode, pending, hook.PendingAsk, "ask"},
		{hook.ClaudeCode, pending, hook.PendingDefer, "defer"},
		{hook.Codex, hook.Verdict{Outcome: hook.Allow}, "", ""},
		{hook.Codex, deny, "", "deny"},
		{hook.Codex, pending, hook.PendingAsk, "deny"}, // Codex enforces only deny
	}
	// Gemini CLI: a top-level decision and reason.
	for _, v := range []hook.Verdict{{Outcome: hook.Allow}, deny, pending} {
		b, err := hook.Output(hook.Gemini, v, hook.PendingAsk)
		var g map[string]string
		if err != nil || json.Unmarshal(b, &g) != nil {
			t.Fatalf("gemini %s: %s, %v", v.Outcome, b, err)
		}
		want := "deny"
		if v.Outcome == hook.Allow {
			want = "allow"
		}
		if g["decision"] != want || g["reason"] != v.Reason {
			t.Errorf("gemini %s: %s, want decision %s with the reason", v.Outcome, b, want)
		}
	}
	// Cursor: permission, with the reason for the user and the agent; ask
	// only for a pending approval with --pending ask.
	for _, tc := range []struct {
		v       hook.Verdict
		pending hook.Pending
		want    string
	}{{hook.Verdict{Outcome: hook.Allow}, "", "allow"}, {deny, "", "deny"}, {pending, hook.PendingDeny, "deny"}, {pending, hook.PendingAsk, "ask"}, {pending, hook.PendingDefer, "deny"}} {
		b, err := hook.Output(hook.Cursor, tc.v, tc.pending)
		var c map[string]string
		if err != nil || json.Unmarshal(b, &c) != nil {
			t.Fatalf("cursor %s: %s, %v", tc.v.Outcome, b, err)
		}
		if c["permission"] != tc.want || c["agent_message"] != tc.v.Reason || c["user_message"] != tc.v.Reason {
			t.Errorf("cursor %s/%s: %s, want permission %s with the reason", tc.v.Outcome, tc.pending, b, tc.want)
		}
	}
	for _, tc := range cases {
		b, err := hook.Output(tc.agent, tc.v, tc.pending)
		if err != nil {
			t.Fatal(err)
		}
		if tc.decision == "" {
			if len(b) != 0 {
				t.Errorf("%s %s: printed %s, want nothing", tc.agent, tc.v.Outcome, b)
			}
			continue
		}
		var raw map[string]map[string]string
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		h := raw["hookSpecificOutput"]
		if h["hookEventName"] != "PreToolUse" || h["permissionDecision"] != tc.decision || h["permissionDecisionReason"] != tc.v.Reason {
			t.Errorf("%s %s/%s: %s, want decision %s with the reason", tc.agent, tc.v.Outcome, tc.pending, b, tc.decision)
		}
	}
}

func TestPatchFiles(t *testing.T) {
	files, err := hook.PatchFiles("*** Begin Patch\n*** Add File: a.txt\n+hi\n*** Update File: b.go\n*** Move to: c.go\n@@\n-x\n+y\n*** End of File\n*** Delete File: d\n*** End Patch\n")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.Op+":"+f.Path)
	}
	if want := "add:a.txt update:b.go move:c.go delete:d"; strings.Join(got, " ") != want {
		t.Errorf("files %v, want %s", got, want)
	}
	if !strings.Contains(files[0].Text, "+hi") || files[1].Text != files[2].Text || !strings.Contains(files[1].Text, "+y") {
		t.Errorf("section texts %q", []string{files[0].Text, files[1].Text, files[2].Text})
	}
	for _, bad := range []string{
		"", "*** Add File: a\n+x\n*** End Patch", "*** Begin Patch\n*** End Patch",
		"*** Begin Patch\n*** Add File: a\n+x\n", "*** Begin Patch\n*** Copy File: a\n*** End Patch",
		"*** Begin Patch\nstray\n*** Add File: a\n*** End Patch", "*** Begin Patch\n*** Add File:   \n*** End Patch",
		"*** Begin Patch\n*** Move to: x\n*** End Patch", "*** Begin Patch\n*** End of File\n*** End Patch",
		"*** Begin Patch\n*** Add File: a\n*** End Patch\nmore",
	} {
		if _, err := hook.PatchFiles(bad); !errors.Is(err, hook.ErrBadInput) {
			t.Errorf("%q: error %v, want ErrBadInput", bad, err)
		}
	}
}

func TestPatchHunksBecomeEdits(t *testing.T) {
	files, err := hook.PatchFiles("*** Begin Patch\n*** Add File: n.txt\n+one\n+two\n*** Update File: a.go\n@@ func f() {\n ctx\n-old\n+new\n@@\n-x\n*** End Patch")
	if err != nil {
		t.Fatal(err)
	}
	if files[0].Added != "one\ntwo\n" {
		t.Errorf("added content %q", files[0].Added)
	}
	want := []hook.Hunk{{Old: "ctx\nold\n", New: "ctx\nnew\n"}, {Old: "x\n", New: ""}}
	if len(files[1].Hunks) != 2 || files[1].Hunks[0] != want[0] || files[1].Hunks[1] != want[1] {
		t.Errorf("hunks %q, want %q", files[1].Hunks, want)
	}
	// Through the mapping: the added file, then one edit per hunk.
	e := newEnv(t)
	in := &hook.Input{Agent: hook.Codex, Cwd: e.ws, ToolName: "apply_patch", ToolInput: json.RawMessage(`{"command":"*** Begin Patch\n*** Add File: src/n.txt\n+one\n*** Update File: src/main.go\n@@\n-package main\n+package other\n*** End Patch"}`)}
	calls, err := hook.Map(in, &e.opts().MapOptions)
	if err != nil || len(calls) != 2 {
		t.Fatalf("calls %v, %v", calls, err)
	}
	var a map[string]string
	if err := json.Unmarshal(calls[1].Arguments, &a); err != nil || a["old_content"] != "package main\n" || a["content"] != "package other\n" ||
		a["path"] != filepath.Join(e.ws, "src", "main.go") {
		t.Errorf("the update's edit %s", calls[1].Arguments)
	}
}

// One wait for the whole tool use: an operator approving the pending part
// during it lets the patch through, both parts committed.
func TestPatchWaitsOnceForItsApprovals(t *testing.T) {
	e := newEnv(t)
	in := e.input(t, "codex-apply-patch.json")
	go func() {
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			as, _ := e.st.ListApprovals(context.Background(), store.ApprovalFilter{Status: store.ApprovalPending}, time.Now())
			if len(as) == 1 {
				e.g.DecideApproval(context.Background(), as[0].ID, gateway.ApprovalDecision{Operator: "op", Approve: true, Channel: gateway.ChannelCLI})
				return
			}
		}
	}()
	opts := e.opts()
	opts.Wait = 15 * time.Second
	start := time.Now()
	v, err := hook.Evaluate(context.Background(), hook.Codex, in, e.g, opts)
	if err != nil || v.Outcome != hook.Allow || len(v.CallIDs) != 2 {
		t.Fatalf("verdict %+v, %v; want both parts allowed after the approval", v, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: the wait did not end at the decision", d)
	}
}
