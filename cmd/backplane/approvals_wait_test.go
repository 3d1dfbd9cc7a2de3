package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeSelfApprovalUnderNoWait is finding 19 of issue 22: under the
// default approval_wait of 0s, a rule with self_approve asks the person at
// the caller's client (before, it never did: the opt-in was a no-op), and
// their yes lets the call run; a rule without it still returns
// approval_required at once, the client not asked.
func TestServeSelfApprovalUnderNoWait(t *testing.T) {
	g := newOperatorsDir(t, "0s")
	p := startServe(t, g)
	e := &elicitCounter{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	cs := connectAlice(t, p, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := os.WriteFile(filepath.Join(g.dir, "e.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, sc := callTool(t, ctx, cs, "edit", map[string]any{"path": "e.txt", "content": "new\n"})
	if res.IsError || e.n.Load() != 1 {
		t.Fatalf("self-approved edit under approval_wait 0s: %+v, asked %d", sc, e.n.Load())
	}
	if b, _ := os.ReadFile(filepath.Join(g.dir, "e.txt")); string(b) != "new\n" {
		t.Errorf("e.txt is %q after the approved edit", b)
	}
	res, sc = callTool(t, ctx, cs, "write", map[string]any{"path": "w.txt", "content": "x"})
	if !res.IsError || sc["class"] != "approval_required" || e.n.Load() != 1 {
		t.Errorf("write (operators only): %+v, asked %d times in all, want once", sc, e.n.Load())
	}
}

// TestServeHonoursApprovalsWait is finding 21 of issue 22: approvals.wait
// is the wait of served calls too (before, serve always set its own, 0s,
// and the key did nothing there); serve.approval_wait, when set,
// overrides it.
func TestServeHonoursApprovalsWait(t *testing.T) {
	const cfg = `operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: ["*"]
    approve: [write]
approvals:
  wait: 45s
serve:
  tokens: {"alice-token": alice}
`
	t.Run("approvals.wait", func(t *testing.T) {
		g := newGWDir(t, cfg)
		p := startServe(t, g)
		cs := connectAlice(t, p, nil)
		type outcome struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "w.txt", "content": "x"}})
			done <- outcome{res, err}
		}()
		id := waitPending(t, g)
		select {
		case o := <-done:
			t.Fatalf("the call returned before any decision (approvals.wait ignored): %v %+v", o.err, o.res.StructuredContent)
		default:
		}
		g.operator(t, "approvals", "approve", id).wantCode(t, exitOK)
		var o outcome
		select {
		case o = <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("the waiting call did not return after the approval:\n%s", p.log())
		}
		if o.err != nil || o.res.IsError {
			t.Fatalf("the waiting call after the approval: %v %+v", o.err, o.res)
		}
		if _, err := os.Stat(filepath.Join(g.dir, "w.txt")); err != nil {
			t.Errorf("the approved write: %v", err)
		}
	})
	t.Run("serve.approval_wait overrides", func(t *testing.T) {
		g := newGWDir(t, cfg+"  approval_wait: 0s\n")
		p := startServe(t, g)
		cs := connectAlice(t, p, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, sc := callTool(t, ctx, cs, "write", map[string]any{"path": "w.txt", "content": "x"})
		if !res.IsError || sc["class"] != "approval_required" || !strings.Contains(sc["message"].(string), "pending") {
			t.Errorf("with serve.approval_wait 0s: %+v", sc)
		}
	})
}
