package storetest

import (
	"errors"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// Budget reservations, taken in CommitIntent and released only when a call
// is proven not to have run.

func testBudgetUpToQuota(f *fixture) {
	t := f.t
	for range 3 {
		f.commitNew("alice", "note", res("caller", "alice", 3, 1))
	}
	// A reservation of nothing fits a full quota.
	f.commitNew("alice", "free", res("caller", "alice", 3, 0))
	in := f.intent("alice", "note")
	_, err := f.s.CommitIntent(f.ctx, req(in, res("caller", "alice", 3, 1)))
	wantBudgetError(t, "fourth reservation of 1 against quota 3", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 3, Requested: 1, Quota: 3})
	f.absent(in.CallID)

	// One reservation of exactly the quota.
	f.commitNew("bob", "danger", res("caller", "bob", 3, 3))
	in = f.intent("bob", "note")
	_, err = f.s.CommitIntent(f.ctx, req(in, res("caller", "bob", 3, 1)))
	wantBudgetError(t, "reservation of 1 after one of the whole quota", err,
		store.BudgetError{Scope: "caller", Key: "bob", Used: 3, Requested: 1, Quota: 3})
	f.absent(in.CallID)
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 3, {"caller", "bob"}: 3})
}

// A refused reservation writes nothing: no intent, no reservation, no
// idempotency key; the same request succeeds once budget is released.
func testBudgetExceededWritesNothing(f *fixture) {
	t := f.t
	held := f.commitNew("alice", "note", res("caller", "alice", 2, 1))
	f.commitNew("alice", "note", res("caller", "alice", 2, 1))

	in := f.intent("alice", "note")
	in.Session = "s1"
	in.IdempotencyKey = "k"
	r := req(in, res("session", "s1", 10, 1), res("caller", "alice", 2, 1))
	existing, err := f.s.CommitIntent(f.ctx, r)
	wantBudgetError(t, "reservation over quota", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 2, Requested: 1, Quota: 2})
	if existing != nil {
		t.Errorf("a BudgetError returned an existing intent %s", existing.CallID)
	}
	f.absent(in.CallID)
	_, err = f.s.GetIntentByKey(f.ctx, "alice", "k")
	wantErr(t, "GetIntentByKey after a refused commit", err, store.ErrNotFound)
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 2})
	list, err := f.s.ListIntents(f.ctx, store.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Errorf("%d intents after a refused commit, want 2", len(list))
	}

	f.settle(held.CallID, store.StatusFailed)
	f.commit(r)
	wantIntent(t, f.get(in.CallID), f.stored(in))
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 2, {"session", "s1"}: 1})
}

func testBudgetSingleAboveQuota(f *fixture) {
	t := f.t
	in := f.intent("alice", "note")
	_, err := f.s.CommitIntent(f.ctx, req(in, res("caller", "alice", 0, 1)))
	wantBudgetError(t, "reservation of 1 against quota 0", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 0, Requested: 1, Quota: 0})
	f.absent(in.CallID)
	in = f.intent("alice", "note")
	_, err = f.s.CommitIntent(f.ctx, req(in, res("caller", "alice", 3, 5)))
	wantBudgetError(t, "reservation of 5 against quota 3", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 0, Requested: 5, Quota: 3})
	f.absent(in.CallID)
	f.wantUsage(nil)
}

// The quota checked is the one in the request (the limit in force), against
// everything the (scope, key) holds.
func testBudgetQuotaInForce(f *fixture) {
	t := f.t
	for range 3 {
		f.commitNew("alice", "note", res("caller", "alice", 5, 1))
	}
	in := f.intent("alice", "note")
	_, err := f.s.CommitIntent(f.ctx, req(in, res("caller", "alice", 2, 1)))
	wantBudgetError(t, "quota lowered below what is held", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 3, Requested: 1, Quota: 2})
	f.absent(in.CallID)
	f.commitNew("alice", "note", res("caller", "alice", 4, 1))
	in = f.intent("alice", "note")
	_, err = f.s.CommitIntent(f.ctx, req(in, res("caller", "alice", 4, 1)))
	wantBudgetError(t, "quota 4 full", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 4, Requested: 1, Quota: 4})
	f.commitNew("alice", "note", res("caller", "alice", 10, 6))
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 10})
}

// The reservations of one request (caller and session scopes) are taken
// all or none.
func testBudgetAllOrNothing(f *fixture) {
	t := f.t
	both := func(session string, callerQuota, sessionQuota int64, sessionFirst bool) *store.CommitRequest {
		in := f.intent("alice", "note")
		in.Session = session
		c, s := res("caller", "alice", callerQuota, 1), res("session", session, sessionQuota, 1)
		if sessionFirst {
			return req(in, s, c)
		}
		return req(in, c, s)
	}
	f.commit(both("s1", 10, 2, false))
	f.commit(both("s1", 10, 2, true))
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 2, {"session", "s1"}: 2})

	// The session is full; the caller's reservation, fine on its own, must
	// not be taken either, whichever comes first in the request.
	for _, sessionFirst := range []bool{false, true} {
		r := both("s1", 10, 2, sessionFirst)
		_, err := f.s.CommitIntent(f.ctx, r)
		wantBudgetError(t, "session scope full", err,
			store.BudgetError{Scope: "session", Key: "s1", Used: 2, Requested: 1, Quota: 2})
		f.absent(r.Intent.CallID)
	}
	// The caller is full; the fresh session's reservation is not taken.
	for _, sessionFirst := range []bool{false, true} {
		r := both("s2", 2, 5, sessionFirst)
		_, err := f.s.CommitIntent(f.ctx, r)
		wantBudgetError(t, "caller scope full", err,
			store.BudgetError{Scope: "caller", Key: "alice", Used: 2, Requested: 1, Quota: 2})
		f.absent(r.Intent.CallID)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 2, {"session", "s1"}: 2})
}

func testBudgetUsageSums(f *fixture) {
	f.wantUsage(nil)
	f.commitNew("alice", "note", res("caller", "alice", 100, 1), res("session", "s1", 100, 1))
	f.commitNew("alice", "note", res("caller", "alice", 100, 2), res("session", "s1", 100, 2))
	f.commitNew("alice", "note", res("caller", "alice", 100, 3), res("session", "s2", 100, 3))
	f.commitNew("bob", "note", res("caller", "bob", 100, 4), res("session", "s2", 100, 4))
	f.commitNew("bob", "note") // no budget configured
	f.commitNew("carol", "free", res("caller", "carol", 100, 0))
	f.wantUsage(map[usageKey]int64{
		{"caller", "alice"}: 6, {"caller", "bob"}: 4,
		{"session", "s1"}: 3, {"session", "s2"}: 7,
	})
}

// The empty key is a key like any other: calls without a session share the
// session bucket "".
func testBudgetEmptyKey(f *fixture) {
	t := f.t
	f.commitNew("alice", "note", res("session", "", 2, 1))
	f.commitNew("bob", "note", res("session", "", 2, 1))
	in := f.intent("carol", "note")
	_, err := f.s.CommitIntent(f.ctx, req(in, res("session", "", 2, 1)))
	wantBudgetError(t, "empty session key full", err,
		store.BudgetError{Scope: "session", Key: "", Used: 2, Requested: 1, Quota: 2})
	f.absent(in.CallID)
	f.commitNew("carol", "note", res("session", "x", 2, 2))
	f.wantUsage(map[usageKey]int64{{"session", ""}: 2, {"session", "x"}: 2})
}

// Budget is released only when an intent settles failed or is resolved not
// executed, and then freed for new reservations.
func testBudgetRelease(f *fixture) {
	t := f.t
	rs := func() []budget.Reservation {
		return []budget.Reservation{res("caller", "alice", 100, 2), res("session", "s", 100, 1)}
	}
	want := func(n int64) {
		t.Helper()
		f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 2 * n, {"session", "s"}: n})
	}
	succeeded := f.commitNew("alice", "note", rs()...)
	failed := f.commitNew("alice", "note", rs()...)
	uncertain := f.commitNew("alice", "note", rs()...)
	executed := f.commitNew("alice", "note", rs()...)
	notExecuted := f.commitNew("alice", "note", rs()...)
	want(5)
	f.settle(succeeded.CallID, store.StatusSucceeded)
	want(5)
	f.settle(failed.CallID, store.StatusFailed)
	want(4)
	f.settle(uncertain.CallID, store.StatusUncertain)
	f.settle(executed.CallID, store.StatusUncertain)
	f.settle(notExecuted.CallID, store.StatusUncertain)
	want(4)
	at := f.base.Add(hour)
	if err := f.s.ResolveIntent(f.ctx, executed.CallID, true, "operator", at); err != nil {
		t.Fatal(err)
	}
	want(4)
	if err := f.s.ResolveIntent(f.ctx, notExecuted.CallID, false, "operator", at); err != nil {
		t.Fatal(err)
	}
	want(3)
	// Refused transitions release nothing more.
	_ = f.s.Settle(f.ctx, failed.CallID, store.Settlement{Status: store.StatusFailed, At: at})
	_ = f.s.ResolveIntent(f.ctx, notExecuted.CallID, false, "operator", at)
	want(3)

	// Released budget is available again; held budget is not.
	f.commitNew("bob", "note", res("caller", "bob", 1, 1))
	blocked := f.intent("bob", "note")
	_, err := f.s.CommitIntent(f.ctx, req(blocked, res("caller", "bob", 1, 1)))
	var be *store.BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("second reservation of bob's quota 1: %v, want a BudgetError", err)
	}
	list, err := f.s.ListIntents(f.ctx, store.IntentFilter{Caller: "bob"})
	if err != nil || len(list) != 1 {
		t.Fatalf("bob's intents: %v, %v", list, err)
	}
	f.settle(list[0].CallID, store.StatusFailed)
	f.commit(req(blocked, res("caller", "bob", 1, 1)))
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 6, {"session", "s"}: 3, {"caller", "bob"}: 1})
}
