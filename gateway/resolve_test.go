package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// TestResolveSaysWhatTheOperatorFound: an uncertain call (unknown_outcome)
// resolved by an operator no longer says unknown_outcome: executed, no
// error class (it ran); not executed, execution_failure (proven not run,
// as an idempotent retry answers). Who resolved it, its status and its
// message keep that it was uncertain; the audit event says what it was.
func TestResolveSaysWhatTheOperatorFound(t *testing.T) {
	// The store's rule names the tool classes by their strings.
	if store.ResolvedClass(false, "") != string(tool.ClassExecutionFailure) || store.ResolvedClass(true, string(tool.ClassUnknownOutcome)) != "" {
		t.Fatalf("store.ResolvedClass disagrees with package tool's classes")
	}
	for _, executed := range []bool{true, false} {
		var audit bytes.Buffer
		g, _ := liveGateway(t, &audit)
		ctx := context.Background()
		_, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "flaky", Arguments: json.RawMessage(`{}`)})
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Class != tool.ClassUnknownOutcome {
			t.Fatalf("call: %v, want unknown_outcome", err)
		}
		before, err := g.GetIntent(ctx, ge.CallID)
		if err != nil {
			t.Fatal(err)
		}
		in, err := g.ResolveIntent(ctx, ge.CallID, executed, "ops", "checked the host")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus, wantClass := store.StatusExecuted, ""
		if !executed {
			wantStatus, wantClass = store.StatusNotExecuted, string(tool.ClassExecutionFailure)
		}
		if in.Status != wantStatus || in.ErrorClass != wantClass || in.ResolvedBy != "ops" || in.ErrorMessage != before.ErrorMessage {
			t.Errorf("resolved executed=%v: %s, class %q, by %q, message %q; want %s, class %q, by ops, the uncertain call's message %q",
				executed, in.Status, in.ErrorClass, in.ResolvedBy, in.ErrorMessage, wantStatus, wantClass, before.ErrorMessage)
		}
		var ev map[string]any
		for line := range strings.Lines(audit.String()) {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "resolve" {
				ev = m
			}
		}
		if ev == nil || ev["was"] != "uncertain" || ev["was_error_class"] != "unknown_outcome" || ev["error_class"] != wantClass || ev["resolved_by"] != "ops" {
			t.Errorf("the resolve audit event %v: want it to say the call was uncertain (unknown_outcome), who resolved it and the class now", ev)
		}
	}
}
