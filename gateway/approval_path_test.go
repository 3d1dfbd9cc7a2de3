package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/builtin"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// An approval is bound to the file its call's path led to, not only to the
// text of the arguments: the real built-in write, a real workspace, and a
// link swapped between the approval and the call that would use it. The
// call is refused (forbidden, naming both paths, with an audit step), the
// approval is left unused, and the call made when the link leads back to
// the approved file uses it.
func TestApprovalBoundToResolvedPath(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		ctx := context.Background()
		ws := t.TempDir()
		for _, f := range []string{"notes/f.txt", "secret/f.txt"} {
			if err := os.Mkdir(filepath.Join(ws, filepath.Dir(f)), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, f), []byte("before\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		// A link to a folder: a write replaces a file, and refuses a final link.
		link := filepath.Join(ws, "current")
		swap := func(to string) {
			t.Helper()
			os.Remove(link)
			if err := os.Symlink(to, link); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("notes", link); err != nil {
			t.Fatal(err)
		}
		set, err := builtin.New(&builtin.Options{Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { set.Close() })
		rules, err := policy.Compile([]policy.Rule{{Caller: "alice", Allow: []string{"write(**)"}, Approve: []string{"write(**)"}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var audit auditLog
		st := mk(t)
		g := gateway.New(&gateway.Options{Store: st, Policy: rules, Operators: []string{"ops"},
			Logger: slog.New(slog.NewJSONHandler(&audit, nil))})
		w, _ := set.Tool("write")
		if err := g.Register(ctx, w); err != nil {
			t.Fatal(err)
		}
		wait := new(time.Duration)
		call := func() (*gateway.CallResult, error) {
			return g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "write", ApprovalWait: wait,
				Arguments: json.RawMessage(`{"path":"current/f.txt","content":"approved\n"}`)})
		}
		_, err = call()
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Class != tool.ClassApprovalRequired {
			t.Fatalf("first call: %v, want approval_required", err)
		}
		id, _ := ge.Details["approval_id"].(string)
		a, err := st.GetApproval(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a.ResolvedPath != "notes/f.txt" {
			t.Fatalf("the request records resolved path %q, want notes/f.txt", a.ResolvedPath)
		}
		if _, err := g.DecideApproval(ctx, id, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
			t.Fatal(err)
		}

		// The link now leads to another file: same text, same digest.
		swap("secret")
		mark := audit.Mark(t)
		_, err = call()
		if !errors.As(err, &ge) || ge.Class != tool.ClassForbidden || ge.Step != "commit" ||
			!strings.Contains(ge.Message, `"notes/f.txt"`) || !strings.Contains(ge.Message, `"secret/f.txt"`) ||
			ge.Details["approval_id"] != id || ge.Details["approved_path"] != "notes/f.txt" || ge.Details["resolved_path"] != "secret/f.txt" {
			t.Fatalf("the call after the swap: %#v, want forbidden at commit naming both paths", err)
		}
		changed := false
		for _, s := range stepsOf(t, audit.Since(t, mark)) {
			if s["step"] == "commit" && s["outcome"] == "path_changed" && s["approved_path"] == "notes/f.txt" && s["resolved_path"] == "secret/f.txt" {
				changed = true
			}
		}
		if !changed {
			t.Errorf("no audit step commit path_changed with both paths in %v", audit.Since(t, mark))
		}
		for _, f := range []string{"notes/f.txt", "secret/f.txt"} {
			if b, _ := os.ReadFile(filepath.Join(ws, f)); string(b) != "before\n" {
				t.Errorf("%s = %q after the refused call: it ran", f, b)
			}
		}
		if a, err := st.GetApproval(ctx, id); err != nil || a.ConsumedBy != "" {
			t.Fatalf("the approval after the refusal: %+v, %v; want it unused", a, err)
		}
		if n := countIntents(t, st); n != 0 {
			t.Errorf("%d intents recorded by a refused call", n)
		}

		// Back to the approved file: the approval is used, once.
		swap("notes")
		if res, err := call(); err != nil || res.IsError {
			t.Fatalf("the call with the link back: %+v, %v", res, err)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "notes/f.txt")); string(b) != "approved\n" {
			t.Errorf("notes/f.txt = %q, want the approved content", b)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "secret/f.txt")); string(b) != "before\n" {
			t.Errorf("secret/f.txt = %q: written", b)
		}
		if a, err := st.GetApproval(ctx, id); err != nil || a.ConsumedBy == "" {
			t.Fatalf("the approval after the call: %+v, %v; want it consumed", a, err)
		}
	})
}

func countIntents(t *testing.T, st store.Store) int {
	t.Helper()
	in, err := st.ListIntents(context.Background(), store.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(in)
}

// An approval recorded before resolved paths were kept (ResolvedPath "",
// as the migration leaves every older row) stays good for a tool without
// a path argument, and is refused for a path tool, whose file it cannot
// vouch for.
func TestApprovalWithoutResolvedPath(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		ctx := context.Background()
		ws := t.TempDir()
		set, err := builtin.New(&builtin.Options{Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { set.Close() })
		rules, err := policy.Compile([]policy.Rule{{Caller: "alice", Allow: []string{"write(**)", "danger"}, Approve: []string{"write(**)", "danger"}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := mk(t)
		g := gateway.New(&gateway.Options{Store: st, Policy: rules, Operators: []string{"ops"}})
		w, _ := set.Tool("write")
		var runs int
		if err := g.Register(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := g.Register(ctx, tool.Tool{Name: "danger", InputSchema: json.RawMessage(`{"type":"object"}`),
			Backend: tool.BackendFunc(func(context.Context, *tool.Call) (*tool.Result, error) {
				runs++
				return &tool.Result{Content: json.RawMessage(`{}`)}, nil
			})}); err != nil {
			t.Fatal(err)
		}
		wait := new(time.Duration)
		// oldApproval turns the call's request into one as an older row
		// reads back: the same call, no resolved path, approved.
		oldApproval := func(toolName, args string) string {
			t.Helper()
			_, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: toolName, Arguments: json.RawMessage(args), ApprovalWait: wait})
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Class != tool.ClassApprovalRequired {
				t.Fatalf("%s: %v, want approval_required", toolName, err)
			}
			a, err := st.GetApproval(ctx, ge.Details["approval_id"].(string))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.DecideApproval(ctx, a.ID, gateway.ApprovalDecision{Operator: "ops", Approve: false, Channel: gateway.ChannelCLI}); err != nil {
				t.Fatal(err)
			}
			old := *a
			old.ID, old.ResolvedPath, old.CreatedAt = a.ID+"-old", "", a.CreatedAt.Add(time.Millisecond)
			if err := st.CreateApproval(ctx, &old); err != nil {
				t.Fatal(err)
			}
			if _, err := g.DecideApproval(ctx, old.ID, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
				t.Fatal(err)
			}
			return old.ID
		}
		id := oldApproval("danger", `{"x":1}`)
		if _, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "danger", Arguments: json.RawMessage(`{"x":1}`), ApprovalWait: wait}); err != nil || runs != 1 {
			t.Fatalf("danger with an approval without a resolved path: %v (runs %d), want it used", err, runs)
		}
		if a, _ := st.GetApproval(ctx, id); a == nil || a.ConsumedBy == "" {
			t.Errorf("the older approval of danger was not consumed: %+v", a)
		}
		id = oldApproval("write", `{"path":"f.txt","content":"x"}`)
		_, err = g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "write", Arguments: json.RawMessage(`{"path":"f.txt","content":"x"}`), ApprovalWait: wait})
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Class != tool.ClassForbidden || ge.Details["approved_path"] != "" || ge.Details["resolved_path"] != "f.txt" {
			t.Fatalf("write with an approval without a resolved path: %#v, want forbidden naming f.txt", err)
		}
		if _, err := os.Stat(filepath.Join(ws, "f.txt")); err == nil {
			t.Error("f.txt was written")
		}
		if a, _ := st.GetApproval(ctx, id); a == nil || a.ConsumedBy != "" {
			t.Errorf("the older approval of write was consumed: %+v", a)
		}
	})
}
