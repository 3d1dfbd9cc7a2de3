package main

import (
	"strings"
	"testing"
)

// Verbs that work on the store alone do not start the MCP upstreams: an
// upstream that cannot start stops "call", never "journal", "approvals" or
// "budget", which an operator needs most when something is broken.
func TestStoreVerbsDoNotStartUpstreams(t *testing.T) {
	g := newGWDir(t, `
servers:
  - name: broken
    command: [/nonexistent/mcp-server]
policy:
  - caller: alice
    allow: [read]
`)
	for _, args := range [][]string{
		{"journal", "list"},
		{"approvals", "list"},
		{"budget", "show"},
	} {
		g.runJSON(t, 0, "", args...)
	}
	r := g.run(t, "", "call", "--caller", "alice", "read", `{"path":"x"}`)
	if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "broken") {
		t.Fatalf("call with an upstream that cannot start: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
}
