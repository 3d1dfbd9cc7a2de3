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
