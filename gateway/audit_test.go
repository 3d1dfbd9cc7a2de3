package gateway_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// callEvents are the call events among events.
func callEvents(events []map[string]any) []map[string]any {
	var out []map[string]any
	for _, e := range events {
		if e["msg"] == "call" {
			out = append(out, e)
		}
	}
	return out
}

// stepNames lists the step names inside one call event.
func stepNames(t *testing.T, e map[string]any) []string {
	t.Helper()
	return steps(stepsOf(t, []map[string]any{e}))
}

// TestAuditOneEventPerCall: each call, whatever its end, writes exactly
// one audit event when it returns: its identity, where and how it ended,
// and its steps in order (docs/audit.md).
func TestAuditOneEventPerCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		f.tool("note", nil)
		f.tool("danger", nil)
		f.tool("fs.fail", func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{"text":"no"}`), IsError: true}, nil
		})
		one := func(t *testing.T, mark int) map[string]any {
			t.Helper()
			ev := f.log.Since(t, mark)
			if len(ev) != 1 || ev[0]["msg"] != "call" {
				t.Fatalf("%d events, want one call event: %v", len(ev), ev)
			}
			return ev[0]
		}

		t.Run("succeeded", func(t *testing.T) {
			args := `{"text":"` + secret + `"}`
			// A call inside a trace: the event names the trace.
			tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
			ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, Remote: true}))
			mark := f.log.Mark(t)
			res, err := f.g.Call(ctx, gateway.CallRequest{Caller: "alice", Session: "s9", Tool: "note", Arguments: json.RawMessage(args)})
			if err != nil {
				t.Fatal(err)
			}
			e := one(t, mark)
			digest, _ := canonjson.Digest([]byte(args))
			want := map[string]any{"level": "INFO", "call_id": res.CallID, "caller": "alice", "tool": "note", "session": "s9",
				"trace_id": tid.String(), "args_digest": digest, "step": "settle", "outcome": "succeeded"}
			for k, v := range want {
				if e[k] != v {
					t.Errorf("%s = %v, want %v", k, e[k], v)
				}
			}
			if _, ok := e["error_class"]; ok {
				t.Errorf("a succeeded call has an error_class: %v", e)
			}
			if d, ok := e["duration_ms"].(float64); !ok || d < 0 {
				t.Errorf("duration_ms %v", e["duration_ms"])
			}
			if d, ok := e["invoke_ms"].(float64); !ok || d < 0 {
				t.Errorf("invoke_ms %v", e["invoke_ms"])
			}
			if got := stepNames(t, e); !slices.Equal(got, []string{"validate", "authorize", "approve", "commit", "settle"}) {
				t.Errorf("steps %v", got)
			}
			st := e["steps"].([]any)
			if a := st[1].(map[string]any); a["outcome"] != "allow" || a["rule"] == "" {
				t.Errorf("authorize step %v, want allow with its rule", a)
			}
			if s := st[4].(map[string]any); s["status"] != "succeeded" || s["is_error"] != false {
				t.Errorf("settle step %v", s)
			}
			line := f.log.String()
			if strings.Contains(line, secret) {
				t.Error("the audit log contains an argument value")
			}
		})

		t.Run("tool_error", func(t *testing.T) {
			mark := f.log.Mark(t)
			if _, err := f.call("alice", "fs.fail", `{"text":"x"}`); err != nil {
				t.Fatal(err)
			}
			if e := one(t, mark); e["outcome"] != "tool_error" || e["step"] != "settle" || e["level"] != "INFO" {
				t.Errorf("event %v", e)
			}
		})

		t.Run("refused", func(t *testing.T) {
			mark := f.log.Mark(t)
			_, err := f.call("bob", "note", `{"text":7}`)
			gwErr(t, err, tool.ClassValidation)
			e := one(t, mark)
			if e["outcome"] != "validation" || e["error_class"] != "validation" || e["step"] != "validate" || e["level"] != "WARN" {
				t.Errorf("event %v", e)
			}
			if got := stepNames(t, e); !slices.Equal(got, []string{"validate"}) {
				t.Errorf("steps %v", got)
			}
		})

		t.Run("approval_required", func(t *testing.T) {
			// A call that returns to wait for an approval writes its event
			// then; its retry, once approved, writes its own.
			mark := f.log.Mark(t)
			_, err := f.call("alice", "danger", `{"text":"please"}`)
			id := gwErr(t, err, tool.ClassApprovalRequired).Details["approval_id"].(string)
			e := one(t, mark)
			if e["outcome"] != "approval_required" || e["step"] != "approve" {
				t.Errorf("event %v", e)
			}
			st := stepsOf(t, []map[string]any{e})
			last := st[len(st)-1]
			if last["step"] != "approve" || last["outcome"] != "pending" || last["approval_id"] != id {
				t.Errorf("last step %v, want approve pending %s", last, id)
			}
			if err := f.decide(id, true, "bob"); err != nil {
				t.Fatal(err)
			}
			mark = f.log.Mark(t)
			res, err := f.call("alice", "danger", `{"text":"please"}`)
			if err != nil {
				t.Fatal(err)
			}
			var calls []map[string]any
			for _, ev := range f.log.Since(t, mark) {
				if ev["msg"] == "call" {
					calls = append(calls, ev)
				}
			}
			if len(calls) != 1 || calls[0]["call_id"] != res.CallID || calls[0]["outcome"] != "succeeded" || calls[0]["call_id"] == e["call_id"] {
				t.Errorf("the approved retry's events: %v", calls)
			}
		})

		// Every call above wrote one event, each its own call id.
		ids := map[any]bool{}
		for _, e := range callEvents(f.log.Events(t)) {
			if ids[e["call_id"]] {
				t.Errorf("two events for call %v", e["call_id"])
			}
			ids[e["call_id"]] = true
		}
	})
}
