package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// A windowed quota refuses within its window, says which window and when
// it resets, and lets calls through again once the clock passes the reset.
func TestBudgetWindowResets(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		clock := newFakeClock() // 03:04:05
		f := newFixture(t, mk, config{Clock: clock, Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 2, Per: time.Hour}}})
		note := f.tool("note", nil)
		for range 2 {
			if _, err := f.call("alice", "note", `{"text":"x"}`); err != nil {
				t.Fatal(err)
			}
		}
		_, err := f.call("alice", "note", `{"text":"x"}`)
		ge := gwErr(t, err, tool.ClassBudgetExceeded)
		if ge.Details["per"] != "1h0m0s" || ge.Details["window_start"] != "2030-01-02T03:00:00Z" || ge.Details["resets_at"] != "2030-01-02T04:00:00Z" {
			t.Errorf("details %v, want the 03:00 window of 1h resetting at 04:00", ge.Details)
		}
		// The last second of the window is still in it.
		clock.Advance(55*time.Minute + 54*time.Second) // 03:59:59
		gwErr(t, errOf(f.call("alice", "note", `{"text":"x"}`)), tool.ClassBudgetExceeded)
		clock.Advance(time.Second) // 04:00:00: a new window
		for range 2 {
			if _, err := f.call("alice", "note", `{"text":"x"}`); err != nil {
				t.Fatalf("in the next window: %v", err)
			}
		}
		if note.Count() != 4 {
			t.Errorf("%d invocations, want 4", note.Count())
		}
		lines, err := f.g.Budgets(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) != 2 || !lines[0].Ended || lines[1].Ended || lines[1].Used != 2 || lines[1].Remaining != 0 ||
			!lines[1].ResetsAt.Equal(time.Date(2030, 1, 2, 5, 0, 0, 0, time.UTC)) {
			t.Errorf("Budgets = %+v, want the ended 03:00 window and the 04:00 one, full, resetting at 05:00", lines)
		}
	})
}

// An operator's reset lets the caller call again at once, and is audited.
func TestBudgetReset(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1}}})
		f.tool("note", nil)
		if _, err := f.call("alice", "note", `{"text":"x"}`); err != nil {
			t.Fatal(err)
		}
		gwErr(t, errOf(f.call("alice", "note", `{"text":"x"}`)), tool.ClassBudgetExceeded)
		if _, err := f.g.ResetBudget(context.Background(), "caller", "alice", ""); !errors.Is(err, gateway.ErrBadBudgetReset) {
			t.Errorf("reset without an operator: %v, want ErrBadBudgetReset", err)
		}
		if _, err := f.g.ResetBudget(context.Background(), "team", "alice", "op"); !errors.Is(err, gateway.ErrBadBudgetReset) {
			t.Errorf("reset of an unknown scope: %v, want ErrBadBudgetReset", err)
		}
		lines, err := f.g.ResetBudget(context.Background(), "caller", "alice", "op")
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) != 1 || lines[0].Used != 1 {
			t.Errorf("reset removed %+v, want alice's 1", lines)
		}
		if _, err := f.call("alice", "note", `{"text":"x"}`); err != nil {
			t.Errorf("after the reset: %v", err)
		}
		var audited bool
		for _, e := range f.log.Events(t) {
			if e["msg"] == "budget" && e["step"] == "reset" && e["outcome"] == "reset" && e["by"] == "op" && e["key"] == "alice" {
				audited = true
			}
		}
		if !audited {
			t.Errorf("no audit event for the reset in %s", f.log.String())
		}
	})
}

func errOf(_ *gateway.CallResult, err error) error { return err }

// KeepPruning prunes on the gateway's clock: a settled call disappears
// once the clock is past its settlement plus keep, and is audited as
// pruned by "retention"; it stops when its context ends.
func TestKeepPruning(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		clock := newFakeClock()
		f := newFixture(t, mk, config{Clock: clock})
		f.tool("note", nil)
		res, err := f.call("alice", "note", `{"text":"x"}`)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			f.g.KeepPruning(ctx, time.Hour, time.Millisecond)
		}()
		clock.Advance(2 * time.Hour)
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := f.raw.GetIntent(context.Background(), res.CallID)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the settled call is still in the journal 30s after the clock passed its retention: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-stopped
		var audited bool
		for _, e := range f.log.Events(t) {
			if e["msg"] == "retention" && e["step"] == "prune" && e["by"] == "retention" && e["intents"] == float64(1) {
				audited = true
			}
		}
		if !audited {
			t.Errorf("no audit event for the prune of 1 intent in %s", f.log.String())
		}
	})
}
