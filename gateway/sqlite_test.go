package gateway_test

// The same tables against the durable store, and what must survive a
// restart: approvals, the journal (idempotent replays) and the budget.

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

func init() {
	storeFactories["sqlite"] = func(t *testing.T) store.Store { return openSQLite(t, t.TempDir()) }
}

// openSQLite opens a real SQLite store in dir, closed when the test ends.
func openSQLite(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(dir, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("sqlite.Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSQLiteApprovalSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	args := `{"text":"deploy"}`

	s1, err := sqlite.Open(dir, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f1 := newFixture(t, nil, config{Store: s1})
	f1.tool("danger", nil)
	id := pendingID(t, f1, "alice", "danger", args)
	if err := f1.decide(id, true, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	f2 := newFixture(t, nil, config{Store: openSQLite(t, dir)})
	danger := f2.tool("danger", nil)
	res, err := f2.call("alice", "danger", args)
	if err != nil {
		t.Fatalf("the call approved before the restart did not proceed: %v", err)
	}
	if danger.Count() != 1 {
		t.Errorf("backend invoked %d times", danger.Count())
	}
	a := f2.approval(id)
	if a.Status != store.ApprovalApproved || a.DecidedBy != "bob" || a.ConsumedBy != res.CallID {
		t.Errorf("approval after restart %+v", a)
	}
	// Used once, also across a restart.
	if again := pendingID(t, f2, "alice", "danger", args); again == id {
		t.Error("the consumed approval was offered again")
	}
}

func TestSQLiteJournalAndBudgetSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	quota := []budget.Quota{{Scope: budget.ScopeCaller, Quota: 2}}
	req := gateway.CallRequest{Caller: "alice", Tool: "note", IdempotencyKey: "k1", Arguments: json.RawMessage(`{"text":"x"}`)}

	s1, err := sqlite.Open(dir, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f1 := newFixture(t, nil, config{Store: s1, Budgets: quota})
	f1.tool("note", nil)
	first, err := f1.do(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	f2 := newFixture(t, nil, config{Store: openSQLite(t, dir), Budgets: quota})
	note := f2.tool("note", nil)
	again, err := f2.do(req)
	if err != nil {
		t.Fatalf("replay after restart: %v", err)
	}
	if !again.Replayed || again.CallID != first.CallID || string(again.Result) != string(first.Result) {
		t.Errorf("replay %+v, want the recorded outcome of %s", again, first.CallID)
	}
	if note.Count() != 0 {
		t.Error("the new process re-invoked a settled call")
	}
	if f2.used("caller", "alice") != 1 {
		t.Errorf("budget used after restart %d, want 1", f2.used("caller", "alice"))
	}
	if _, err := f2.call("alice", "note", `{"text":"y"}`); err != nil {
		t.Fatal(err)
	}
	_, err = f2.call("alice", "note", `{"text":"z"}`)
	ge := gwErr(t, err, tool.ClassBudgetExceeded)
	if num(t, ge.Details["used"]) != 2 {
		t.Errorf("details %v", ge.Details)
	}
}
