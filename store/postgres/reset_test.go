package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// A reset marks the usage rows it removes (schema version 10): a call
// counted before the reset gives nothing back when it fails, one counted
// in the row made after the reset gives its amount back, twice over for a
// second reset, and a key the reset did not touch is not marked.
func TestResetMarksOnlyWhatItRemoved(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	s := openStore(t, schema, nil)
	commit := func(id, key string, amount int64) {
		t.Helper()
		_, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: intent(id, "alice"),
			Reservations: []budget.Reservation{{Scope: "caller", Key: key, Quota: 100, Amount: amount}}})
		must(t, err)
	}
	used := func(key string) int64 {
		t.Helper()
		us, err := s.BudgetUsage(ctx)
		must(t, err)
		for _, u := range us {
			if u.Key == key {
				return u.Used
			}
		}
		return -1 // no row
	}
	fail := func(id string) {
		t.Helper()
		must(t, s.Settle(ctx, id, store.Settlement{Status: store.StatusFailed, At: time.Now()}))
	}
	commit("before", "alice", 5)
	commit("other", "bob", 7)
	if _, err := s.ResetBudget(ctx, "caller", "alice"); err != nil {
		t.Fatal(err)
	}
	commit("after-1", "alice", 3)
	commit("after-2", "alice", 2)
	fail("before")
	if u := used("alice"); u != 5 {
		t.Errorf("after the call reserved before the reset failed, alice holds %d, want 5 (nothing given back)", u)
	}
	fail("after-1")
	if u := used("alice"); u != 2 {
		t.Errorf("after a call reserved after the reset failed, alice holds %d, want 2", u)
	}
	fail("other")
	if u := used("bob"); u != 0 {
		t.Errorf("bob, never reset, holds %d after his call failed, want 0", u)
	}
	if _, err := s.ResetBudget(ctx, "caller", "alice"); err != nil {
		t.Fatal(err)
	}
	commit("after-3", "alice", 4)
	fail("after-2")
	fail("after-3")
	if u := used("alice"); u != 0 {
		t.Errorf("after a second reset, alice holds %d, want 0 (after-2 gives nothing, after-3 its 4)", u)
	}
}
