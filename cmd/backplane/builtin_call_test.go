package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The built-in tools configuration, with write re-flagged and the
// local test server allowlisted for url_fetch.
const builtinConfig = `
workspace: .                   # the root every built-in tool is confined to
builtin:
  enable: [read, write, edit, ls, glob, grep, bash, url_fetch, ask_user_question]
  safety:
    write: {requires_approval: false}   # re-flag one tool
  bash: {timeout: 120s, max_timeout: 600s, env: [PATH, HOME]}
  url_fetch: {allow: [%q]}       # host:port entries exempt from the private-address refusal
policy:
  - caller: alice
    allow: ["*"]
`

// TestEachBuiltinToolThroughCall runs every built-in tool once through the
// real binary's whole pipeline and finds its intent, settled, in the
// journal. Approval-requiring tools (edit, bash) are approved by another
// person from another process first.
func TestEachBuiltinToolThroughCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body><h1>Hello</h1><script>x()</script><p>from the test server</p></body></html>")
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if _, _, err := net.SplitHostPort(host); err != nil {
		t.Fatal(err)
	}
	g := newGWDir(t, fmt.Sprintf(builtinConfig, host))
	if err := os.WriteFile(filepath.Join(g.dir, "hello.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	call := func(tool, args string) map[string]any {
		t.Helper()
		return g.runJSON(t, 0, "", "call", "--caller", "alice", tool, args)
	}
	approveThenCall := func(tool, args string) map[string]any {
		t.Helper()
		m := g.runJSON(t, 1, "", "call", "--caller", "alice", tool, args)
		e := callError(t, m, "approval_required")
		id, _ := details(e)["approval_id"].(string)
		g.runJSON(t, 0, "", "approvals", "approve", id, "--as", "bob")
		return call(tool, args)
	}

	results := map[string]map[string]any{
		"read":      call("read", `{"path":"hello.txt","offset":2,"limit":1}`),
		"write":     call("write", `{"path":"sub/new.txt","content":"alpha\nbeta\n"}`),
		"ls":        call("ls", `{"path":"."}`),
		"glob":      call("glob", `{"pattern":"**/*.txt"}`),
		"grep":      call("grep", `{"pattern":"beta","path":"."}`),
		"url_fetch": call("url_fetch", `{"url":"`+srv.URL+`/page"}`),
		"edit":      approveThenCall("edit", `{"path":"sub/new.txt","old_content":"beta","content":"gamma"}`),
		"bash":      approveThenCall("bash", `{"command":"cat sub/new.txt","timeout":10}`),
	}
	// No terminal in a test run: ask_user_question says it has no channel,
	// a tool-reported error: exit 1, the result printed all the same.
	ask := g.runJSON(t, 1, "", "call", "--caller", "alice", "ask_user_question", `{"question":"Proceed?"}`)
	results["ask_user_question"] = ask
	// The journal lists it as a tool error, apart from the calls that
	// simply succeeded.
	te := g.runJSON(t, 0, "", "journal", "list", "--status", "tool_error")
	if list, _ := te["intents"].([]any); len(list) != 1 || list[0].(map[string]any)["call_id"] != ask["call_id"] ||
		list[0].(map[string]any)["tool_error"] != true {
		t.Errorf("journal list --status tool_error: %v, want only %v", te, ask["call_id"])
	}

	text := func(tool string) string {
		t.Helper()
		m := results[tool]
		callOK(t, m)
		return fmt.Sprint(m["result"])
	}
	for tool, want := range map[string]string{
		"read":      "two",
		"ls":        "hello.txt",
		"glob":      "sub/new.txt",
		"grep":      "beta",
		"url_fetch": "from the test server",
		"bash":      "gamma",
	} {
		if got := text(tool); !strings.Contains(got, want) {
			t.Errorf("%s result %s does not mention %q", tool, got, want)
		}
	}
	if strings.Contains(text("url_fetch"), "x()") {
		t.Errorf("url_fetch kept the script: %s", text("url_fetch"))
	}
	callOK(t, results["write"])
	callOK(t, results["edit"])
	if data, _ := os.ReadFile(filepath.Join(g.dir, "sub", "new.txt")); string(data) != "alpha\ngamma\n" {
		t.Errorf("after write and edit the file holds %q", data)
	}
	if ask["is_error"] != true || !strings.Contains(fmt.Sprint(ask["result"]), "unsupported_capability") {
		t.Errorf("ask_user_question without a terminal: %v", ask)
	}

	// Every call's intent is in the journal, settled succeeded.
	list := g.runJSON(t, 0, "", "journal", "list", "--limit", "100")
	intents, _ := list["intents"].([]any)
	seen := map[string]string{}
	for _, it := range intents {
		m := it.(map[string]any)
		seen[m["tool"].(string)] = m["status"].(string)
	}
	for tool, m := range results {
		id, _ := m["call_id"].(string)
		if seen[tool] != "succeeded" {
			t.Errorf("%s: journal status %q, want succeeded (call %s)", tool, seen[tool], id)
		}
		show := g.runJSON(t, 0, "", "journal", "show", id)
		if show["call_id"] != id || show["tool"] != tool || show["status"] != "succeeded" || show["arguments"] == nil {
			t.Errorf("journal show %s: %v", id, show)
		}
	}
}

// TestBuiltinArgumentsCheckedBeforeTheIntent: integers a built-in tool
// cannot use, which its schema accepts, are refused as validation errors
// before anything is approved, reserved or journaled (issue 12, finding
// 12): no intent, no approval request for bash.
func TestBuiltinArgumentsCheckedBeforeTheIntent(t *testing.T) {
	g := newGWDir(t, fmt.Sprintf(builtinConfig, "127.0.0.1:1"))
	for _, c := range []struct{ tool, args string }{
		{"read", `{"path":"x.txt","limit":1e400}`},
		{"ls", `{"path":".","limit":99999999999999999999}`},
		{"bash", `{"command":"true","timeout":99999999999999999999}`},
	} {
		m := g.runJSON(t, exitNegative, "", "call", "--caller", "alice", c.tool, c.args)
		if e := callError(t, m, "validation"); e["step"] != "validate" {
			t.Errorf("%s %s: refused at %v, want validate", c.tool, c.args, e["step"])
		}
	}
	if j := g.journal(t); len(j) != 0 {
		t.Errorf("the journal holds %d intents, want none: %v", len(j), j)
	}
	if a := g.approvalsByID(t); len(a) != 0 {
		t.Errorf("approval requests were made: %v", a)
	}
}
