package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeApprovalAbandonedByTypeScriptClient is finding 17 of issue 22,
// as it was found: the official TypeScript SDK client starts a write that
// needs approval, waits 1.5s, closes its transport and exits; an operator
// approves meanwhile. The abandoned call must not write the file nor
// consume the approval (on the old code it did both, within the resume
// grace, while the server still waited for the client to resume); the
// client's retry consumes it, once.
func TestServeApprovalAbandonedByTypeScriptClient(t *testing.T) {
	// The grace is short so that the test does not wait 10s for the
	// withdrawal; the approval wait is long so that the call is still
	// waiting when the operator decides.
	g := newGWDir(t, `operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: ["*"]
    approve: [write]
serve:
  tokens: {"alice-token": alice}
  approval_wait: 20s
  resume: {grace: 3s}
`)
	p := startServe(t, g)
	plan := `{"calls":[{"name":"write","arguments":{"path":"abandoned.txt","content":"x\n"},"abandonAfterMs":1500}]}`
	rep, stderr := runTSClient(t, g, plan, "--http", p.base+"/mcp", "--token", "alice-token")
	if rep.ConnectError != nil || !strings.Contains(stderr, "mcp-client: abandoning write") {
		t.Fatalf("the client did not abandon its call: %s\n%s", rep.raw, stderr)
	}
	// The client has exited; its call is still pending.
	id := waitPending(t, g)
	g.operator(t, "approvals", "approve", id).wantCode(t, exitOK)

	written := filepath.Join(g.dir, "abandoned.txt")
	waitFor(t, "the abandoned call to withdraw (or, the bug, to write the file)", func() bool {
		_, err := os.Stat(written)
		return err == nil || strings.Contains(readAudit(t, g), `"outcome":"withdrawn","approval_id":"`+id+`"`)
	})
	if _, err := os.Stat(written); err == nil {
		t.Fatalf("the abandoned call wrote the file\nserve:\n%s", p.log())
	}
	if a := g.approvalsByID(t)[id]; a["status"] != "approved" || a["consumed_by"] != nil {
		t.Fatalf("after the abandoned call: %v", a)
	}

	// The retry (the Go SDK's client, the same caller) consumes it.
	cs := connectAlice(t, p, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, sc := callTool(t, ctx, cs, "write", map[string]any{"path": "abandoned.txt", "content": "x\n"})
	if res.IsError {
		t.Fatalf("the retry: %+v", sc)
	}
	if a := g.approvalsByID(t)[id]; a["consumed_by"] == nil {
		t.Errorf("the retry did not consume request %s: %v", id, a)
	}
	if b, err := os.ReadFile(written); err != nil || string(b) != "x\n" {
		t.Errorf("after the retry: %q, %v", b, err)
	}
}
