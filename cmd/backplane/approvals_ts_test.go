package main

import (
	"context"
	"os"
	"os/exec"
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
	// The client waits 1.5s, as in the finding, and (so that a loaded
	// machine cannot make it quit before the server has the call) until
	// the test has seen the request pending.
	signal := filepath.Join(t.TempDir(), "abandon-now")
	plan := `{"calls":[{"name":"write","arguments":{"path":"abandoned.txt","content":"x\n"},"abandonAfterMs":1500,"abandonWhenFile":` + jsonString(signal) + `}]}`
	node, script := tsClient(t)
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(planFile, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, "--plan", planFile, "--http", p.base+"/mcp", "--token", "alice-token")
	cmd.Dir, cmd.Env = g.dir, g.env
	var out, errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited // the exit, or the nil the test put back once it had read it
	})
	id := waitPending(t, g)
	if err := os.WriteFile(signal, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the TypeScript client: %v\n%s", err, errOut.String())
		}
		exited <- nil // for the cleanup
	case <-time.After(90 * time.Second):
		t.Fatalf("the TypeScript client did not exit:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "mcp-client: abandoning write") || !strings.Contains(out.String(), `"abandoned":true`) {
		t.Fatalf("the client did not abandon its call: %s\n%s", out.String(), errOut.String())
	}
	// The client has exited; its call is still pending. An operator
	// approves it.
	if a := g.approvalsByID(t)[id]; a["status"] != "pending" {
		t.Fatalf("after the client quit: %v", a)
	}
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
