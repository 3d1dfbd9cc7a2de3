package main

import (
	"strings"
	"testing"
	"time"
)

// refusedConfig has the Go test server under the subset: its tool
// remote_ref ($ref) and, with MCPTEST_FULL, full_unchecked ($schema in its
// output schema) are refused.
func refusedDir(t *testing.T) *gwDir {
	t.Helper()
	g := newGWDir(t, "store: state\npolicy:\n  - caller: alice\n    allow: [\"go.*\"]\nserve:\n  stdio_caller: alice\nservers:\n"+
		"  - name: go\n    command: ["+mcpTestServer(t)+"]\n    env: [MCPTEST_FULL]\n")
	g.setEnv("MCPTEST_FULL", "1")
	return g
}

// wantRefusedReport checks a report names the refused tool, its keyword,
// the server's line and the line that accepts it.
func wantRefusedReport(t *testing.T, where, out string) {
	t.Helper()
	for _, want := range []string{
		"server go (backplane.yaml:8):",
		"go.full_unchecked: $schema",
		"go.remote_ref: $ref",
		"set this line on server go (backplane.yaml:8): validator: draft2020-12",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("%s does not say %q:\n%s", where, want, out)
		}
	}
}

// TestToolsListNamesRefusedTools: tools list, policy check and serve's
// start-up summary name per server the tools the subset refuses, the
// keywords, and the line that accepts them.
func TestToolsListNamesRefusedTools(t *testing.T) {
	g := refusedDir(t)
	r := g.run(t, "", "tools", "list")
	r.wantCode(t, exitOK)
	wantRefusedReport(t, "tools list", r.stdout)
	m := g.runJSON(t, exitOK, "", "tools", "list")
	if list, _ := m["refused_by_server"].([]any); len(list) != 1 {
		t.Errorf("tools list --json: refused_by_server %v, want one server", m["refused_by_server"])
	}
	for _, v := range m["tools"].([]any) {
		e := v.(map[string]any)
		if e["name"] != "go.full" {
			continue
		}
		d, _ := e["descriptor"].(map[string]any)
		if _, ok := d["outputSchema"]; !ok {
			t.Errorf("tools list --json: go.full's descriptor %v has no outputSchema", e["descriptor"])
		}
	}

	r = g.run(t, "", "policy", "check")
	wantRefusedReport(t, "policy check", r.stdout)
	if !strings.Contains(r.stdout, "note: server go") {
		t.Errorf("policy check: the report is not a note:\n%s", r.stdout)
	}

	p := startServe(t, g)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.log(), "validator: draft2020-12") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	wantRefusedReport(t, "serve's summary", p.log())
}

// TestToolsInvalidResultThroughTheBinary: a result that breaks its tool's
// output schema reaches the caller of backplane call as invalid_result with
// the pointer, and the journal lists the call "ran; result refused:
// invalid_result" and shows the result as the tool answered it.
func TestToolsInvalidResultThroughTheBinary(t *testing.T) {
	g := refusedDir(t)
	r := g.run(t, "", "call", "--caller", "alice", "--json", "go.full_bad", `{"bad":true}`)
	r.wantCode(t, 1)
	e, _ := decodeObject(t, r.stdout)["error"].(map[string]any)
	if e["class"] != "invalid_result" || e["pointer"] != "/inner/label" || e["step"] != "invoke" {
		t.Errorf("the error: %v", e)
	}
	if errs, _ := e["errors"].([]any); len(errs) != 2 {
		t.Errorf("violations: %v, want /inner/label and /n", e["errors"])
	}
	// The journal's status is succeeded (it ran; failed would say it
	// provably did not), said plainly so that no operator reads a success.
	r = g.run(t, "", "journal", "list")
	if !strings.Contains(r.stdout, "ran; result refused: invalid_result") || strings.Contains(r.stdout, "succeeded") {
		t.Errorf("journal list:\n%s", r.stdout)
	}
	r = g.run(t, "", "journal", "list", "--json")
	if !strings.Contains(r.stdout, `"result_refused":true`) || !strings.Contains(r.stdout, `"status":"succeeded"`) {
		t.Errorf("journal list --json:\n%s", r.stdout)
	}
	id, _ := e["call_id"].(string)
	r = g.run(t, "", "journal", "show", id)
	if !strings.Contains(r.stdout, "outcome:") || !strings.Contains(r.stdout, "ran; result refused: invalid_result") ||
		!strings.Contains(r.stdout, "never the result below") || !strings.Contains(r.stdout, `"label"`) {
		t.Errorf("journal show %s:\n%s", id, r.stdout)
	}
	ok := g.run(t, "", "call", "--caller", "alice", "--json", "go.full_bad", `{"n":2}`)
	ok.wantCode(t, exitOK)
	if !strings.Contains(ok.stdout, `"label":"ok"`) {
		t.Errorf("a conforming result: %s", ok.stdout)
	}
}
