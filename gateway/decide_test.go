package gateway_test

// Gateway.Decide: the pipeline up to the intent, for a tool an agent runs
// itself. The backend is never invoked; every allow is a decision-only
// journal entry that holds its budget.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

func (f *fixture) decideCall(caller, tool, args string) (*gateway.DecideResult, error) {
	return f.g.Decide(context.Background(), gateway.DecideRequest{Caller: caller, Session: "s1", Tool: tool, Arguments: json.RawMessage(args)})
}

func TestDecideAllowJournalsADecisionOnlyEntry(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		note := f.tool("note", nil)
		res, err := f.decideCall("bob", "note", `{"text":"hi"}`)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		if note.Count() != 0 {
			t.Fatalf("the backend was invoked %d times by a decision", note.Count())
		}
		in := f.intent(res.CallID)
		if in.Status != store.StatusSucceeded || in.ErrorClass != gateway.DecisionOnly || !strings.Contains(in.ErrorMessage, "did not run") {
			t.Errorf("journal entry %+v, want succeeded, %s, saying Backplane did not run it", in, gateway.DecisionOnly)
		}
		if in.Session != "s1" || in.Caller != "bob" || in.Tool != "note" {
			t.Errorf("journal entry names %s/%s/%s, want bob/note/s1", in.Caller, in.Tool, in.Session)
		}
		if u := f.used("caller", "bob"); u != 1 {
			t.Errorf("budget used %d after one decision, want 1 (a decision reserves like a call)", u)
		}
		evs := f.log.Events(t)
		last := evs[len(evs)-1]
		if last["msg"] != "call" || last["decision_only"] != true || last["outcome"] != "succeeded" {
			t.Errorf("audit event %v, want a call event marked decision_only", last)
		}
		for _, s := range stepsOf(t, evs[len(evs)-1:]) {
			if s["step"] == "invoke" {
				t.Errorf("audit lists an invoke step for a decision: %v", s)
			}
		}
	})
}

func TestDecideDenyCarriesTheRulesReason(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Rules: []policy.Rule{{Caller: "bob", Allow: []string{"note", "danger"},
			Conditions: []policy.Condition{{Effect: policy.EffectDeny, Tool: "danger", If: `args.text.contains("rm")`}}}}})
		f.tool("note", nil)
		danger := f.tool("danger", nil)
		_, err := f.decideCall("bob", "danger", `{"text":"rm -rf x"}`)
		ge := gwErr(t, err, tool.ClassForbidden)
		if !strings.Contains(ge.Message, "denied") || ge.Details["rule"] == nil {
			t.Errorf("message %q (details %v) does not name the deny rule", ge.Message, ge.Details)
		}
		if ge.CallID != "" || len(f.intents()) != 0 {
			t.Errorf("a denied decision left a journal entry (call id %q, %d intents)", ge.CallID, len(f.intents()))
		}
		if danger.Count() != 0 {
			t.Error("backend invoked")
		}
		// Default deny for what no rule names: an unknown tool reads as
		// one the caller may not know of.
		_, err = f.decideCall("carol", "note", `{"text":"x"}`)
		gwErr(t, err, tool.ClassNotFound)
	})
}

func TestDecideApprovalRequiredThenApprovedOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{})
		danger := f.tool("danger", nil)
		args := `{"text":"rm -rf"}`
		_, err := f.decideCall("alice", "danger", args)
		ge := gwErr(t, err, tool.ClassApprovalRequired)
		id, _ := ge.Details["approval_id"].(string)
		if id == "" {
			t.Fatalf("no approval_id in %v", ge.Details)
		}
		// The request is the one a call with the same arguments finds.
		if again := pendingID(t, f, "alice", "danger", args); again != id {
			t.Errorf("a call found request %s, want the decision's %s", again, id)
		}
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		res, err := f.decideCall("alice", "danger", args)
		if err != nil {
			t.Fatalf("the approved decision: %v", err)
		}
		if res.ApprovalID != id {
			t.Errorf("ApprovalID = %q, want %s", res.ApprovalID, id)
		}
		if a := f.approval(id); a.ConsumedBy != res.CallID {
			t.Errorf("approval consumed by %q, want the decision %s", a.ConsumedBy, res.CallID)
		}
		// Used once: the same decision asked again needs a new approval.
		_, err = f.decideCall("alice", "danger", args)
		ge = gwErr(t, err, tool.ClassApprovalRequired)
		if ge.Details["approval_id"] == id {
			t.Error("the consumed approval was offered again")
		}
		if danger.Count() != 0 {
			t.Errorf("backend invoked %d times by decisions", danger.Count())
		}
	})
}

func TestDecidePreviewConsumesAndRecordsNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 5}}})
		f.tool("danger", nil)
		args := json.RawMessage(`{"text":"x"}`)
		preview := gateway.DecideRequest{Caller: "alice", Tool: "danger", Arguments: args, Preview: true}
		_, err := f.g.Decide(context.Background(), preview)
		ge := gwErr(t, err, tool.ClassApprovalRequired)
		id, _ := ge.Details["approval_id"].(string)
		if err := f.decide(id, true, "bob"); err != nil {
			t.Fatal(err)
		}
		res, err := f.g.Decide(context.Background(), preview)
		if err != nil {
			t.Fatalf("preview of an approved decision: %v", err)
		}
		if res.CallID != "" || res.ApprovalID != id {
			t.Errorf("preview = %+v, want no call id and approval %s", res, id)
		}
		if a := f.approval(id); a.ConsumedBy != "" {
			t.Errorf("a preview consumed the approval (by %s)", a.ConsumedBy)
		}
		if n, u := len(f.intents()), f.totalUsed(); n != 0 || u != 0 {
			t.Errorf("a preview left %d intents and %d budget used", n, u)
		}
		// The real decision then consumes it.
		preview.Preview = false
		res, err = f.g.Decide(context.Background(), preview)
		if err != nil || res.ApprovalID != id || res.CallID == "" {
			t.Fatalf("decision after the preview = %+v, %v; want approval %s consumed", res, err, id)
		}
	})
}
