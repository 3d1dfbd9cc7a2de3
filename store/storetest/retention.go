package storetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// Budget windows, the operator's reset, pruning and paging.

func wres(scope, key string, quota, amount int64, w budget.Window) budget.Reservation {
	return budget.Reservation{Scope: scope, Key: key, Quota: quota, Amount: amount, Window: w}
}

// windowUsage returns BudgetUsage keyed by (scope, key, window start, per),
// checking the order BudgetUsage promises.
func (f *fixture) windowUsage() map[string]store.Usage {
	f.t.Helper()
	us, err := f.s.BudgetUsage(f.ctx)
	if err != nil {
		f.t.Fatalf("BudgetUsage: %v", err)
	}
	out := map[string]store.Usage{}
	for i, u := range us {
		if i > 0 && store.CompareUsage(us[i-1], u) >= 0 {
			f.t.Errorf("BudgetUsage out of order at %d: %+v then %+v", i, us[i-1], u)
		}
		out[wkey(u.Scope, u.Key, u.Window)] = u
	}
	return out
}

func wkey(scope, key string, w budget.Window) string {
	if w.IsZero() {
		return scope + "/" + key
	}
	return fmt.Sprintf("%s/%s/%v@%d", scope, key, w.Per, w.Start.Unix())
}

func testBudgetWindows(f *fixture) {
	t := f.t
	w1 := budget.WindowAt(hour, f.base)
	w2 := budget.WindowAt(hour, f.base.Add(hour))
	if !w2.Start.Equal(w1.End()) {
		t.Fatalf("WindowAt: next window starts %v, want %v", w2.Start, w1.End())
	}
	for range 2 {
		f.commitNew("alice", "note", wres("caller", "alice", 2, 1, w1))
	}
	in := f.intent("alice", "note")
	_, err := f.s.CommitIntent(f.ctx, req(in, wres("caller", "alice", 2, 1, w1)))
	wantBudgetError(t, "third reservation in a window of quota 2", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 2, Requested: 1, Quota: 2, Window: w1})
	f.absent(in.CallID)
	// The next window starts afresh; a budget without window is its own.
	f.commitNew("alice", "note", wres("caller", "alice", 2, 2, w2))
	f.commitNew("alice", "note", res("caller", "alice", 5, 1))
	// Two reservations of one request in one window add up.
	in = f.intent("bob", "note")
	_, err = f.s.CommitIntent(f.ctx, req(in, wres("caller", "bob", 3, 2, w1), wres("caller", "bob", 3, 2, w1)))
	wantBudgetError(t, "two reservations of 2 in one window of quota 3", err,
		store.BudgetError{Scope: "caller", Key: "bob", Used: 2, Requested: 2, Quota: 3, Window: w1})
	f.absent(in.CallID)

	got := f.windowUsage()
	want := map[string]store.Usage{
		wkey("caller", "alice", w1):              {Scope: "caller", Key: "alice", Window: w1, Quota: 2, Used: 2},
		wkey("caller", "alice", w2):              {Scope: "caller", Key: "alice", Window: w2, Quota: 2, Used: 2},
		wkey("caller", "alice", budget.Window{}): {Scope: "caller", Key: "alice", Quota: 5, Used: 1},
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("BudgetUsage has no %s", k)
			continue
		}
		if g.Used != w.Used || g.Quota != w.Quota || g.Window.Per != w.Window.Per || !g.Window.Start.Equal(w.Window.Start) {
			t.Errorf("BudgetUsage %s = %+v, want %+v", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && g.Used != 0 {
			t.Errorf("BudgetUsage has an unexpected %s = %+v", k, g)
		}
	}
}

// A release gives the budget back to the window the call counted in.
func testBudgetWindowRelease(f *fixture) {
	t := f.t
	w1 := budget.WindowAt(hour, f.base)
	w2 := budget.WindowAt(hour, f.base.Add(hour))
	a := f.commitNew("alice", "note", wres("caller", "alice", 1, 1, w1))
	f.commitNew("alice", "note", wres("caller", "alice", 1, 1, w2))
	f.settle(a.CallID, store.StatusFailed)
	got := f.windowUsage()
	if u := got[wkey("caller", "alice", w1)]; u.Used != 0 {
		t.Errorf("window 1 holds %d after its call failed, want 0", u.Used)
	}
	if u := got[wkey("caller", "alice", w2)]; u.Used != 1 {
		t.Errorf("window 2 holds %d, want 1 (the release was of window 1)", u.Used)
	}
	f.commitNew("alice", "note", wres("caller", "alice", 1, 1, w1))
}

// A window that is not whole seconds or not aligned to the epoch is
// refused, and nothing is written.
func testBudgetBadWindow(f *fixture) {
	t := f.t
	w := budget.WindowAt(hour, f.base)
	for _, bad := range []budget.Window{
		{Per: hour, Start: w.Start.Add(time.Second)},
		{Per: 1500 * time.Millisecond, Start: time.Unix(0, 0)},
		{Per: 0, Start: w.Start},
	} {
		in := f.intent("alice", "note")
		if _, err := f.s.CommitIntent(f.ctx, req(in, wres("caller", "alice", 5, 1, bad))); err == nil {
			t.Errorf("window %+v accepted", bad)
		}
		f.absent(in.CallID)
	}
	f.wantUsage(map[usageKey]int64{})
}

// ResetBudget forgets (scope, key)'s usage in every window, and only its;
// a reservation made before the reset gives nothing back when released
// after it.
func testBudgetReset(f *fixture) {
	t := f.t
	w1 := budget.WindowAt(hour, f.base)
	held := f.uncertain("alice", "note", wres("caller", "alice", 2, 2, w1), res("caller", "alice", 9, 3))
	f.commitNew("bob", "note", wres("caller", "bob", 2, 1, w1))
	f.commitNew("alice", "note", res("session", "alice", 9, 1)) // same key, other scope

	removed, err := f.s.ResetBudget(f.ctx, "caller", "alice")
	if err != nil {
		t.Fatalf("ResetBudget: %v", err)
	}
	if len(removed) != 2 || removed[0].Used+removed[1].Used != 5 {
		t.Errorf("ResetBudget removed %+v, want the two usages of 2 and 3", removed)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "bob"}: 1, {"session", "alice"}: 1})
	f.commitNew("alice", "note", wres("caller", "alice", 2, 2, w1))
	// The call held before the reset is found not executed: its budget was
	// already forgotten, nothing comes back.
	if err := f.s.ResolveIntent(f.ctx, held.CallID, false, "op", f.base.Add(hour)); err != nil {
		t.Fatal(err)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 2, {"caller", "bob"}: 1, {"session", "alice"}: 1})
	in := f.intent("alice", "note")
	_, err = f.s.CommitIntent(f.ctx, req(in, wres("caller", "alice", 2, 1, w1)))
	wantBudgetError(t, "after reset and a new reservation of the whole quota", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 2, Requested: 1, Quota: 2, Window: w1})

	removed, err = f.s.ResetBudget(f.ctx, "caller", "nobody")
	if err != nil || len(removed) != 0 {
		t.Errorf("ResetBudget of an unused key = %+v, %v; want nothing, nil", removed, err)
	}
}

// Prune deletes settled intents, expired approvals and ended windows older
// than its cut, never a started or uncertain intent.
func testPrune(f *fixture) {
	t := f.t
	w1 := budget.WindowAt(hour, f.base)
	wNow := budget.WindowAt(hour, f.base.Add(3*hour))
	ok := f.commitNew("alice", "note", wres("caller", "alice", 9, 1, w1))
	f.settle(ok.CallID, store.StatusSucceeded) // settled at base+30m
	keyed := f.intent("alice", "note")
	keyed.IdempotencyKey = "k1"
	f.commit(req(keyed, res("caller", "alice", 9, 1)))
	f.settle(keyed.CallID, store.StatusFailed)
	started := f.commitNew("alice", "note", wres("caller", "alice", 9, 1, w1))
	unsure := f.uncertain("alice", "note", wres("caller", "alice", 9, 1, w1))
	resolved := f.uncertain("alice", "note")
	if err := f.s.ResolveIntent(f.ctx, resolved.CallID, true, "op", f.base.Add(4*hour)); err != nil {
		t.Fatal(err)
	}
	current := f.commitNew("bob", "note", wres("caller", "bob", 9, 1, wNow))
	old := f.approval(f.intent("alice", "x")) // expires at base+1h

	// A cut before every settlement prunes no intent.
	r, err := f.s.Prune(f.ctx, f.base)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if r.Intents != 0 || r.Approvals != 0 {
		t.Errorf("Prune(base) = %+v, want no intent and no approval", r)
	}

	r, err = f.s.Prune(f.ctx, f.base.Add(2*hour))
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if r.Intents != 2 || r.Approvals != 1 || r.Windows < 1 {
		t.Errorf("Prune(base+2h) = %+v, want 2 intents, 1 approval, window 1", r)
	}
	f.absent(ok.CallID)
	f.absent(keyed.CallID)
	for _, in := range []store.Intent{started, unsure, resolved, current} {
		f.get(in.CallID) // still there
	}
	if _, err := f.s.GetApproval(f.ctx, old.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("expired approval after Prune: %v, want ErrNotFound", err)
	}
	got := f.windowUsage()
	if _, ok := got[wkey("caller", "alice", w1)]; ok {
		t.Errorf("window %v, ended before the cut, is still listed", w1.Start)
	}
	if u := got[wkey("caller", "bob", wNow)]; u.Used != 1 {
		t.Errorf("the current window holds %d after Prune, want 1", u.Used)
	}
	if u := got[wkey("caller", "alice", budget.Window{})]; u.Used != 0 {
		// keyed's reservation was released when it failed.
		t.Errorf("budget without window holds %d, want 0", u.Used)
	}
	// The pruned call's idempotency key is free again.
	again := f.intent("alice", "note")
	again.IdempotencyKey = "k1"
	f.commit(req(again))
	// Releasing into a pruned window changes nothing and fails nothing.
	if err := f.s.Settle(f.ctx, started.CallID, store.Settlement{Status: store.StatusFailed, At: f.base.Add(3 * hour)}); err != nil {
		t.Fatalf("Settle after its window was pruned: %v", err)
	}
	if err := f.s.ResolveIntent(f.ctx, unsure.CallID, false, "op", f.base.Add(3*hour)); err != nil {
		t.Fatalf("Resolve after its window was pruned: %v", err)
	}
	f.usage() // no negative usage

	// Everything settled is pruned at a later cut; the unsettled never.
	r, err = f.s.Prune(f.ctx, f.base.Add(10*hour))
	if err != nil {
		t.Fatal(err)
	}
	if r.Intents != 3 { // started, unsure, resolved
		t.Errorf("Prune(base+10h) pruned %d intents, want 3", r.Intents)
	}
	f.get(current.CallID)
	f.get(again.CallID)
}

// PageIntents walks the whole journal newest first, a page at a time,
// each intent once, with the filter applied, and survives a prune between
// pages.
func testPageIntents(f *fixture) {
	t := f.t
	var ids []string
	for i := range 25 {
		caller := "alice"
		if i%5 == 0 {
			caller = "bob"
		}
		in := f.commitNew(caller, "note")
		ids = append(ids, in.CallID)
		if i < 3 {
			f.settle(in.CallID, store.StatusSucceeded)
		}
	}
	walk := func(flt store.IntentFilter, pruneAfterFirst bool) []string {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 30 {
				t.Fatal("PageIntents does not end")
			}
			p, err := f.s.PageIntents(f.ctx, flt, cursor)
			if err != nil {
				t.Fatalf("PageIntents(%q): %v", cursor, err)
			}
			if len(p.Intents) > max(flt.Limit, 1) {
				t.Fatalf("page of %d intents, limit %d", len(p.Intents), flt.Limit)
			}
			for _, in := range p.Intents {
				got = append(got, in.CallID)
			}
			if pruneAfterFirst && pages == 0 {
				if _, err := f.s.Prune(f.ctx, f.base.Add(hour)); err != nil {
					t.Fatal(err)
				}
			}
			if p.Next == "" {
				return got
			}
			cursor = p.Next
		}
	}
	got := walk(store.IntentFilter{Limit: 10}, false)
	if len(got) != 25 {
		t.Fatalf("paged %d intents, want 25", len(got))
	}
	for i, id := range got {
		if id != ids[24-i] {
			t.Fatalf("page order: %d is %s, want %s (newest first)", i, id, ids[24-i])
		}
	}
	if got := walk(store.IntentFilter{Caller: "bob", Limit: 2}, false); len(got) != 5 {
		t.Errorf("paged %d of bob's intents, want 5", len(got))
	}
	if got := walk(store.IntentFilter{Limit: 5}, false); len(got) != 25 {
		t.Errorf("paged %d intents with exact pages, want 25", len(got))
	}
	// The three oldest are settled, and pruned while the walk is at its
	// first page: the walk continues and ends without them.
	if got := walk(store.IntentFilter{Limit: 10}, true); len(got) != 22 {
		t.Errorf("paged %d intents with a prune between pages, want 22", len(got))
	}
	for _, bad := range []string{"x", "-1", "0", "1e3"} {
		if _, err := f.s.PageIntents(f.ctx, store.IntentFilter{}, bad); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("PageIntents(cursor %q): %v, want ErrBadCursor", bad, err)
		}
	}
}
