package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// policyConfig is issue 11's policy block as written there (lines 5-12),
// with the built-in tools, bash re-flagged so that the policy decides its
// approvals, and the note tool its CEL rule names.
const policyConfig = `builtin:
  safety:
    bash: {requires_approval: false}
policy:
  - caller: alice                        # exact name or glob, as today
    allow: [read, ls, glob, grep, "bash(git status*)", "bash(go test *)"]
    approve: ["write(docs/**)", "edit(docs/**)", "bash(*)"]
    deny: ["bash(*rm -rf*)", "read(**/.env)", "url_fetch(domain:internal.example)"]
    rules:                               # anything a pattern cannot say, in CEL
      - allow: note
        if: 'size(args.text) < 200 && !args.text.contains("password")'
tools:
  - name: note
    input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    command: [sh, -c, 'cat >> "$NOTE_LOG"; echo >> "$NOTE_LOG"; echo ''{"ok":true}''']
    env: [NOTE_LOG]
`

func TestPolicyIssueExamplesThroughCall(t *testing.T) {
	g := newGWDir(t, policyConfig)
	victim := filepath.Join(g.dir, "victim")
	for _, d := range []string{victim, filepath.Join(g.dir, "docs"), filepath.Join(g.dir, "src")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{".env": "SECRET=1\n", "src/a.txt": "source\n"} {
		if err := os.WriteFile(filepath.Join(g.dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// "git status" must succeed when allowed: call exits 1 when the tool
	// reports an error, so the workspace is a repository.
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed: the issue's examples run git status")
	}
	if out, err := exec.Command(gitBin, "init", "-q", g.dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	call := func(code int, tool, args string) map[string]any {
		t.Helper()
		return g.runJSON(t, code, "", "call", "--caller", "alice", tool, args)
	}
	refused := func(class, tool, args, rule string) map[string]any {
		t.Helper()
		e := callError(t, call(exitNegative, tool, args), class)
		if got, _ := details(e)["rule"].(string); rule != "" && !strings.HasSuffix(got, "backplane.yaml:"+rule) {
			t.Errorf("%s %s: rule %q, want line %s (%v)", tool, args, got, rule, e)
		}
		return e
	}

	// Allowed: the main argument matches an allow and nothing stricter.
	callOK(t, call(exitOK, "bash", `{"command":"git status"}`))
	callOK(t, call(exitOK, "read", `{"path":"./docs/../src/a.txt"}`))
	callOK(t, call(exitOK, "read", `{"path":"`+filepath.Join(g.dir, "src/a.txt")+`"}`))
	callOK(t, call(exitOK, "note", `{"text":"hello"}`))

	// Compound commands: each part alone, the strictest wins.
	refused("approval_required", "bash", `{"command":"git status && touch x"}`, "7")
	refused("approval_required", "bash", `{"command":"git status | sh"}`, "7")
	refused("approval_required", "bash", `{"command":"$X status"}`, "7")
	refused("approval_required", "bash", `{"command":"eval git status"}`, "7")
	e := refused("forbidden", "bash", `{"command":"echo $(rm -rf ./victim)"}`, "8")
	if parts, _ := details(e)["parts"].([]any); len(parts) != 2 {
		t.Errorf("parts of the refused command: %v", details(e)["parts"])
	}
	refused("forbidden", "bash", "{\"command\":\"git status; `rm -rf ./victim`\"}", "8")
	refused("forbidden", "bash", `{"command":"(cd . && rm -rf ./victim)"}`, "8")
	refused("validation", "bash", `{"command":"echo $("}`, "")
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a denied command ran: %v", err)
	}
	if _, err := os.Stat(filepath.Join(g.dir, "x")); err == nil {
		t.Fatal("a command that needs approval ran")
	}

	// Paths are cleaned before matching.
	refused("forbidden", "read", `{"path":".env"}`, "8")
	refused("forbidden", "read", `{"path":"docs/../.env"}`, "8")
	refused("forbidden", "read", `{"path":"`+filepath.Join(g.dir, ".env")+`"}`, "8")
	refused("approval_required", "write", `{"path":"docs/a.md","content":"x"}`, "7")
	refused("approval_required", "write", `{"path":"src/../docs/a.md","content":"x"}`, "7")
	refused("forbidden", "write", `{"path":"docs/../src/a.txt","content":"x"}`, "")
	refused("forbidden", "write", `{"path":"docs/../../out","content":"x"}`, "")

	// Domains match the host and its subdomains. alice's rule only denies
	// url_fetch, so to her it is no tool at all (hidden tools look
	// unknown); explain shows the deny that would decide.
	refused("not_found", "url_fetch", `{"url":"https://internal.example/x"}`, "")
	for _, u := range []string{"https://internal.example/x", "https://api.internal.example/x"} {
		m := g.runJSON(t, exitNegative, "", "policy", "explain", "--caller", "alice", "url_fetch", `{"url":"`+u+`"}`)
		if rule, _ := m["rule"].(string); m["decision"] != "deny" || !strings.HasSuffix(rule, "backplane.yaml:8") {
			t.Errorf("explain url_fetch %s: %v", u, m)
		}
	}

	// CEL.
	refused("forbidden", "note", `{"text":"my password"}`, "")
	if n := len(g.notes(t)); n != 1 {
		t.Errorf("the note tool ran %d times, want once", n)
	}
}

func TestPolicyExplain(t *testing.T) {
	g := newGWDir(t, policyConfig)
	m := g.runJSON(t, exitNegative, "", "policy", "explain", "--caller", "alice", "bash", `{"command":"git status && echo $(rm -rf /)"}`)
	if m["decision"] != "deny" || !strings.HasSuffix(m["rule"].(string), "backplane.yaml:8") {
		t.Fatalf("explain: %v", m)
	}
	parts, _ := m["parts"].([]any)
	var got []string
	for _, p := range parts {
		pm := p.(map[string]any)
		got = append(got, pm["text"].(string)+"="+pm["decision"].(string))
	}
	if want := "git status=allow|echo $(rm -rf /)=deny|rm -rf /=deny"; strings.Join(got, "|") != want {
		t.Errorf("parts %q, want %q", strings.Join(got, "|"), want)
	}
	m = g.runJSON(t, exitOK, "", "policy", "explain", "--caller", "alice", "bash", `{"command":"git status"}`)
	if m["decision"] != "allow" || !strings.HasSuffix(m["rule"].(string), "backplane.yaml:6") {
		t.Fatalf("explain: %v", m)
	}
	r := g.run(t, "", "policy", "explain", "--caller", "alice", "read", `{"path":"docs/../.env"}`)
	r.wantCode(t, exitNegative)
	if !strings.Contains(r.stdout, "deny") || !strings.Contains(r.stdout, "backplane.yaml:8") {
		t.Errorf("text explain: %s", r.stdout)
	}
}

func TestPolicyCheck(t *testing.T) {
	g := newGWDir(t, policyConfig)
	g.runJSON(t, exitOK, "", "policy", "check")
	g = newGWDir(t, `policy:
  - caller: alice
    allow: [read, "bash(ls *)", nothing]
    deny: [bash]
  - caller: "*"
    allow: [write]
`)
	m := g.runJSON(t, exitNegative, "", "policy", "check")
	kinds := map[string]string{}
	for _, f := range m["findings"].([]any) {
		fm := f.(map[string]any)
		kinds[fm["entry"].(string)] += fm["kind"].(string) + "@" + fm["rule"].(string) + " "
	}
	for entry, want := range map[string]string{
		"bash(ls *)": "shadowed_by_deny@",
		"nothing":    "unknown_tool@",
		"write":      "allow_needs_approval@",
	} {
		if !strings.Contains(kinds[entry], want) {
			t.Errorf("%s: %q, want %s", entry, kinds[entry], want)
		}
	}
	if kinds["read"] != "" {
		t.Errorf("read: %q", kinds["read"])
	}

	// With operators configured, an approve entry none of them may decide
	// (and that the caller may not decide itself) is reported.
	g = newGWDir(t, `operators:
  - name: ops
    token: ops-token
policy:
  - caller: alice
    approve: [write]
    approvers: [sec-*]
  - caller: alice
    approve: [edit]
    approvers: [ops]
  - caller: alice
    approve: [bash]
    approvers: [sec-*]
    self_approve: true
`)
	m = g.runJSON(t, exitNegative, "", "policy", "check")
	var got []string
	for _, f := range m["findings"].([]any) {
		fm := f.(map[string]any)
		got = append(got, fm["entry"].(string)+":"+fm["kind"].(string))
	}
	if len(got) != 1 || got[0] != "write:no_operator" {
		t.Errorf("findings %v, want only write:no_operator", got)
	}
}

func TestPolicyReloadThroughServe(t *testing.T) {
	allowRead := "policy:\n  - caller: alice\n    allow: [read]\nserve:\n  tokens: {\"alice-token\": alice}\n"
	denyEnv := "policy:\n  - caller: alice\n    allow: [read]\n    deny: [\"read(**/.env)\"]\nserve:\n  tokens: {\"alice-token\": alice}\n"
	g := newGWDir(t, allowRead)
	if err := os.WriteFile(filepath.Join(g.dir, ".env"), []byte("SECRET=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(g.dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, g)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: p.base + "/mcp", HTTPClient: &http.Client{Transport: tokenTransport("alice-token")},
	}, sessionEra)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.log())
	}
	defer cs.Close()
	readEnv := func() (allowed bool, text string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "docs/../.env"}})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return !res.IsError, b.String()
	}
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(g.dir, "backplane.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if ok, text := readEnv(); !ok || !strings.Contains(text, "SECRET") {
		t.Fatalf("before the reload read .env: %v %s", ok, text)
	}
	// backplane reload: the new policy is in force when it answers.
	write(denyEnv)
	if r := g.run(t, "", "reload"); r.code != exitOK || !strings.Contains(r.stdout, "ok") {
		t.Fatalf("reload: %d %s %s\n%s", r.code, r.stdout, r.stderr, p.log())
	}
	if ok, text := readEnv(); ok || !strings.Contains(text, "forbidden") {
		t.Fatalf("after the reload: %v %s", ok, text)
	}
	// An invalid file is refused with its line; the running policy stays.
	write(denyEnv + "  bogus: 1\n")
	r := g.run(t, "", "reload")
	if r.code == exitOK || !strings.Contains(r.stdout+r.stderr, "backplane.yaml:7") {
		t.Fatalf("reload of an invalid file: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if ok, _ := readEnv(); ok {
		t.Fatal("the running policy changed after a refused file")
	}
	// SIGHUP: wait for the audit log to record it, then call. An invalid
	// file is refused by serve too, and audited.
	audit := filepath.Join(g.dir, ".backplane", "audit.log")
	hup := func(outcome string) {
		t.Helper()
		before := strings.Count(readFile(t, audit), `"event":"reload","outcome":"`+outcome+`"`)
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); strings.Count(readFile(t, audit), `"event":"reload","outcome":"`+outcome+`"`) == before; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no reload %s recorded after SIGHUP:\n%s", outcome, p.log())
			}
		}
	}
	write("policy:\n  - caller: alice\n    allow: [\"read([x)\"]\nserve:\n  tokens: {\"alice-token\": alice}\n")
	hup("refused")
	if ok, _ := readEnv(); ok {
		t.Fatal("the running policy changed after a refused file")
	}
	// The configuration is named by its absolute path: the error starts
	// with it.
	if !strings.Contains(readFile(t, audit), `/backplane.yaml:3: allow: entry \"read([x)\"`) {
		t.Errorf("the refusal's line is not in the audit log:\n%s", readFile(t, audit))
	}
	write(allowRead)
	hup("ok")
	if ok, text := readEnv(); !ok {
		t.Fatalf("after SIGHUP: %s", text)
	}
	log := readFile(t, audit)
	if strings.Count(log, `"event":"reload","outcome":"ok"`) != 2 || strings.Count(log, `"event":"reload","outcome":"refused"`) != 1 {
		t.Errorf("the audit log does not record each reload:\n%s", log)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.log())
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// The commands of issue 22, item 2, through backplane call: each was
// allowed by these two entries and ran its $(...) in bash. Now each is
// refused, and the file its substitution would create never appears.
func TestShellEvaluationIsNotAllowedThroughCall(t *testing.T) {
	g := newGWDir(t, `builtin:
  safety:
    bash: {requires_approval: false}
policy:
  - caller: alice
    allow: ["bash(git status*)", "bash(ls *)"]
`)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the issue's commands run git status")
	}
	if out, err := exec.Command("git", "init", "-q", g.dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "bash", `{"command":"git status"}`))
	for i, cmd := range []string{
		"git status; a=(); [[ 'a[$(touch PWNED)]' -eq 0 ]]",
		"git status && a=() && [[ 1 -eq 'a[$(touch PWNED)]' ]]",
		"git status; a=(); [[ -v 'a[$(touch PWNED)]' ]]",
		"git status ${x:='a[$(touch PWNED)]'} $((x))",
		"ls -d ${x:='a[$(touch PWNED)]'} ${!x}",
		"ls -d ${y:='$(touch PWNED)'} ${y@P}",
		"ls -d ${x:='a[$(touch PWNED)]'}; (( x ))",
	} {
		marker := fmt.Sprintf("pwned-%d", i)
		cmd = strings.ReplaceAll(cmd, "PWNED", marker)
		args, _ := json.Marshal(map[string]string{"command": cmd})
		callError(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "bash", string(args)), "forbidden")
		if _, err := os.Stat(filepath.Join(g.dir, marker)); err == nil {
			t.Errorf("%q ran its $(...)", cmd)
		}
	}
	// Issue 22, item 9: a deep command is refused at once, not decided for
	// seconds.
	deep, _ := json.Marshal(map[string]string{"command": strings.Repeat("$(", 21000) + strings.Repeat(")", 21000)})
	m := g.runJSON(t, exitNegative, "", "policy", "explain", "--caller", "alice", "bash", string(deep))
	if reason, _ := m["reason"].(string); m["decision"] != "invalid" || !strings.Contains(reason, "too complex") {
		t.Errorf("explain of $( x 21000: %v", m)
	}
}
