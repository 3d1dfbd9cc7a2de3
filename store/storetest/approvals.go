package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// Approval requests: decided once, before they expire, and consumed by
// exactly one call. Who may decide is the gateway's rule, not the store's.

// approvalAt creates a pending approval for the exact call in with the given
// creation and expiry times.
func (f *fixture) approvalAt(in store.Intent, created, expires time.Time) *store.Approval {
	f.t.Helper()
	f.n++
	a := &store.Approval{
		ID: fmt.Sprintf("apr-%03d", f.n), Caller: in.Caller, Session: in.Session, Tool: in.Tool,
		DefinitionHash: in.DefinitionHash, ArgsDigest: in.ArgsDigest, Status: store.ApprovalPending,
		CreatedAt: created, ExpiresAt: expires,
	}
	if err := f.s.CreateApproval(f.ctx, a); err != nil {
		f.t.Fatalf("CreateApproval(%s): %v", a.ID, err)
	}
	return a
}

func wantApproval(t *testing.T, got *store.Approval, want store.Approval) {
	t.Helper()
	if got == nil {
		t.Errorf("approval %s: got nil", want.ID)
		return
	}
	g, w := *got, want
	for _, c := range []struct{ field, g, w string }{
		{"ID", g.ID, w.ID}, {"Caller", g.Caller, w.Caller}, {"Session", g.Session, w.Session},
		{"Tool", g.Tool, w.Tool}, {"DefinitionHash", g.DefinitionHash, w.DefinitionHash},
		{"ArgsDigest", g.ArgsDigest, w.ArgsDigest}, {"Status", string(g.Status), string(w.Status)},
		{"DecidedBy", g.DecidedBy, w.DecidedBy}, {"ConsumedBy", g.ConsumedBy, w.ConsumedBy},
		{"Arguments", string(g.Arguments), string(w.Arguments)}, {"Channel", g.Channel, w.Channel},
		{"Reason", g.Reason, w.Reason}, {"ResolvedPath", g.ResolvedPath, w.ResolvedPath},
	} {
		if c.g != c.w {
			t.Errorf("approval %s: %s = %q, want %q", want.ID, c.field, c.g, c.w)
		}
	}
	for _, c := range []struct {
		field string
		g, w  time.Time
	}{{"CreatedAt", g.CreatedAt, w.CreatedAt}, {"ExpiresAt", g.ExpiresAt, w.ExpiresAt}, {"DecidedAt", g.DecidedAt, w.DecidedAt}} {
		if c.w.IsZero() {
			if !c.g.IsZero() {
				t.Errorf("approval %s: %s = %v, want the zero time", want.ID, c.field, c.g)
			}
		} else if !sameInstant(c.g, c.w) {
			t.Errorf("approval %s: %s = %v, want %v", want.ID, c.field, c.g, c.w)
		}
	}
}

func testApprovalRoundTrip(f *fixture) {
	t := f.t
	zone := time.FixedZone("UTC-5", -5*60*60)
	a := &store.Approval{
		ID: "apr-round", Caller: "alice", Session: "sess-9", Tool: "danger",
		DefinitionHash: "sha256:def", ArgsDigest: "sha256:args", Status: store.ApprovalPending,
		Arguments: []byte(`{"path": "a.txt", "content": "x\u00e9"}`), ResolvedPath: "src/a\u00e9.txt",
		CreatedAt: f.base.In(zone).Add(123 * ms), ExpiresAt: f.base.In(zone).Add(10 * time.Minute).Add(456 * ms),
	}
	if err := f.s.CreateApproval(f.ctx, a); err != nil {
		t.Fatal(err)
	}
	want := *a
	a.Status = store.ApprovalApproved // the store keeps its own copy
	a.Caller = "mallory"
	wantApproval(t, f.getApproval("apr-round"), want)

	at := f.base.Add(2 * time.Minute).Add(789 * ms)
	if err := f.s.DecideApproval(f.ctx, "apr-round", store.ApprovalDecision{Approve: true, By: "bob", At: at.In(zone), Channel: "console", Reason: "looks right"}); err != nil {
		t.Fatal(err)
	}
	want.Status, want.DecidedBy, want.DecidedAt, want.Channel, want.Reason = store.ApprovalApproved, "bob", at, "console", "looks right"
	wantApproval(t, f.getApproval("apr-round"), want)
}

func testApprovalNotFound(f *fixture) {
	_, err := f.s.GetApproval(f.ctx, "no-such-approval")
	wantErr(f.t, "GetApproval(unknown)", err, store.ErrNotFound)
	err = f.s.DecideApproval(f.ctx, "no-such-approval", store.ApprovalDecision{Approve: true, By: "bob", At: f.base})
	wantErr(f.t, "DecideApproval(unknown)", err, store.ErrNotFound)
	_, err = f.s.GetApproval(f.ctx, "no-such-approval")
	wantErr(f.t, "GetApproval after deciding an unknown id", err, store.ErrNotFound)
}

// Creating a request under an existing id must not reset it (a decided
// request would be decided twice).
func testApprovalDuplicateID(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	a := f.approved(in)
	again := *a
	again.Caller, again.Status, again.DecidedBy = "mallory", store.ApprovalPending, ""
	if err := f.s.CreateApproval(f.ctx, &again); err == nil {
		t.Error("CreateApproval with an existing id succeeded")
	}
	got := f.getApproval(a.ID)
	if got.Status != store.ApprovalApproved || got.Caller != "alice" || got.DecidedBy != "reviewer" {
		t.Errorf("approval after a second CreateApproval with its id: %+v", got)
	}
}

func testApprovalDecide(f *fixture) {
	t := f.t
	for _, approve := range []bool{true, false} {
		in := f.intent("alice", "danger")
		a := f.approval(in)
		at := f.base.Add(30 * time.Second)
		if err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: approve, By: "bob", At: at}); err != nil {
			t.Fatalf("DecideApproval(%v): %v", approve, err)
		}
		want := *a
		want.Status, want.DecidedBy, want.DecidedAt = store.ApprovalDenied, "bob", at
		if approve {
			want.Status = store.ApprovalApproved
		}
		wantApproval(t, f.getApproval(a.ID), want)
	}
}

func testApprovalDecideRefusals(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	a := f.approval(in)
	if err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: true, By: "", At: f.base}); err == nil {
		t.Error("a decision by nobody (empty By) was accepted")
	}
	wantApproval(t, f.getApproval(a.ID), *a) // still pending, undecided
	// A proper decision still works.
	f.decide(a.ID, false)
	if got := f.getApproval(a.ID); got.Status != store.ApprovalDenied || got.DecidedBy != "reviewer" {
		t.Errorf("after refusals, a reviewer's denial gives %s by %q", got.Status, got.DecidedBy)
	}
}

// A request is decided before it expires, judged at the decision's time.
func testApprovalExpiry(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	expires := f.base.Add(-hour)
	a := f.approvalAt(in, f.base.Add(-2*hour), expires)
	for _, at := range []time.Time{f.base, expires, expires.Add(ms)} {
		for _, approve := range []bool{true, false} {
			err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: approve, By: "bob", At: at})
			wantErr(t, fmt.Sprintf("decision at %v of a request expiring at %v", at, expires), err, store.ErrApprovalExpired)
		}
	}
	wantApproval(t, f.getApproval(a.ID), *a)

	// One millisecond before expiry is in time; so is a decision whose time
	// is before the expiry though the wall clock is past it: the store
	// judges the times it is given.
	for _, at := range []time.Time{f.base.Add(hour - ms), f.base.Add(-2*hour + ms)} {
		b := f.approvalAt(in, at.Add(-time.Minute), at.Add(ms))
		if err := f.s.DecideApproval(f.ctx, b.ID, store.ApprovalDecision{Approve: true, By: "bob", At: at}); err != nil {
			t.Errorf("decision 1ms before expiry: %v", err)
		}
		if got := f.getApproval(b.ID); got.Status != store.ApprovalApproved {
			t.Errorf("status %s after an in-time approval", got.Status)
		}
	}
}

func testApprovalDecidedOnce(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	for _, first := range []bool{true, false} {
		a := f.approval(in)
		f.decide(a.ID, first)
		before := f.getApproval(a.ID)
		for _, second := range []bool{true, false} {
			err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: second, By: "carol", At: f.base.Add(time.Minute)})
			wantErr(t, fmt.Sprintf("second decision (%v after %v)", second, first), err, store.ErrAlreadyDecided)
		}
		wantApproval(t, f.getApproval(a.ID), *before)
	}
	// A consumed approval is decided too.
	a := f.approved(in)
	f.commit(&store.CommitRequest{Intent: in, ApprovalID: a.ID})
	err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: false, By: "carol", At: f.base.Add(time.Minute)})
	wantErr(t, "decision on a consumed approval", err, store.ErrAlreadyDecided)
	if got := f.getApproval(a.ID); got.Status != store.ApprovalApproved || got.ConsumedBy != in.CallID {
		t.Errorf("consumed approval after a refused decision: %+v", got)
	}
}

func testApprovalList(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	pending := f.approvalAt(in, f.base.Add(1*ms), f.base.Add(hour))
	expired := f.approvalAt(in, f.base.Add(-2*hour), f.base.Add(-hour))
	approved := f.approvalAt(in, f.base.Add(2*ms), f.base.Add(hour))
	f.decide(approved.ID, true)
	denied := f.approvalAt(in, f.base.Add(3*ms), f.base.Add(hour))
	f.decide(denied.ID, false)
	boundary := f.approvalAt(in, f.base.Add(4*ms), f.base.Add(5*ms))

	list := func(st store.ApprovalStatus, now time.Time) map[string]store.ApprovalStatus {
		t.Helper()
		as, err := f.s.ListApprovals(f.ctx, store.ApprovalFilter{Status: st}, now)
		if err != nil {
			t.Fatalf("ListApprovals(%q): %v", st, err)
		}
		out := map[string]store.ApprovalStatus{}
		for _, a := range as {
			if _, dup := out[a.ID]; dup {
				t.Errorf("ListApprovals lists %s twice", a.ID)
			}
			out[a.ID] = a.Status
			if st != "" && a.Status != st {
				t.Errorf("ListApprovals(%q) returned %s in status %s", st, a.ID, a.Status)
			}
		}
		return out
	}
	check := func(now time.Time, want map[string]store.ApprovalStatus) {
		t.Helper()
		got := list("", now)
		if len(got) != len(want) {
			t.Errorf("ListApprovals at %v: %v, want %v", now, got, want)
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("ListApprovals at %v: %s is %q, want %q", now, id, got[id], w)
			}
		}
		for _, st := range []store.ApprovalStatus{store.ApprovalPending, store.ApprovalApproved, store.ApprovalDenied, store.ApprovalExpired} {
			sub := list(st, now)
			for id, w := range want {
				if _, ok := sub[id]; ok != (w == st) {
					t.Errorf("ListApprovals(%q) at %v: %s listed %v, but its status is %s", st, now, id, ok, w)
				}
			}
		}
	}
	// At the boundary's ExpiresAt it is expired; a pending request past
	// its expiry reads expired, a decided one keeps its decision.
	check(f.base.Add(5*ms), map[string]store.ApprovalStatus{
		pending.ID: store.ApprovalPending, expired.ID: store.ApprovalExpired, approved.ID: store.ApprovalApproved,
		denied.ID: store.ApprovalDenied, boundary.ID: store.ApprovalExpired,
	})
	check(f.base.Add(4*ms), map[string]store.ApprovalStatus{
		pending.ID: store.ApprovalPending, expired.ID: store.ApprovalExpired, approved.ID: store.ApprovalApproved,
		denied.ID: store.ApprovalDenied, boundary.ID: store.ApprovalPending,
	})
	check(f.base.Add(2*hour), map[string]store.ApprovalStatus{
		pending.ID: store.ApprovalExpired, expired.ID: store.ApprovalExpired, approved.ID: store.ApprovalApproved,
		denied.ID: store.ApprovalDenied, boundary.ID: store.ApprovalExpired,
	})
	// The derived status is only in the listing: the request itself is
	// still pending (and so a decision on it is refused as expired).
	if got := f.getApproval(expired.ID); store.EffectiveApprovalStatus(got, f.base) != store.ApprovalExpired {
		t.Errorf("expired request reads %s", store.EffectiveApprovalStatus(got, f.base))
	}

	// Entries carry what an operator's listing shows.
	as, err := f.s.ListApprovals(f.ctx, store.ApprovalFilter{Status: store.ApprovalApproved}, f.base)
	if err != nil || len(as) != 1 {
		t.Fatalf("ListApprovals(approved): %v, %v", as, err)
	}
	want := *approved
	want.Status, want.DecidedBy, want.DecidedAt = store.ApprovalApproved, "reviewer", f.base.Add(ms)
	wantApproval(t, &as[0], want)

	for _, limit := range []int{1, 3} {
		as, err := f.s.ListApprovals(f.ctx, store.ApprovalFilter{Limit: limit}, f.base)
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != limit {
			t.Errorf("ListApprovals(Limit %d) returned %d of 5", limit, len(as))
		}
	}
}

func testApprovalFind(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	key := store.ApprovalKey{Caller: in.Caller, Tool: in.Tool, DefinitionHash: in.DefinitionHash, ArgsDigest: in.ArgsDigest}
	find := func(k store.ApprovalKey, now time.Time) (*store.Approval, error) {
		return f.s.FindApproval(f.ctx, k, now)
	}
	_, err := find(key, f.base)
	wantErr(t, "FindApproval on an empty store", err, store.ErrNotFound)

	a := f.approval(in)
	got, err := find(key, f.base)
	if err != nil {
		t.Fatalf("FindApproval of a pending request: %v", err)
	}
	wantApproval(t, got, *a)

	// Exactly this call: any other part of the key finds nothing.
	for _, other := range []store.ApprovalKey{
		{Caller: "bob", Tool: key.Tool, DefinitionHash: key.DefinitionHash, ArgsDigest: key.ArgsDigest},
		{Caller: key.Caller, Tool: "note", DefinitionHash: key.DefinitionHash, ArgsDigest: key.ArgsDigest},
		{Caller: key.Caller, Tool: key.Tool, DefinitionHash: "sha256:other-def", ArgsDigest: key.ArgsDigest},
		{Caller: key.Caller, Tool: key.Tool, DefinitionHash: key.DefinitionHash, ArgsDigest: "sha256:other-args"},
		{},
	} {
		_, err := find(other, f.base)
		wantErr(t, fmt.Sprintf("FindApproval(%+v)", other), err, store.ErrNotFound)
	}
	// Not once expired, at or after ExpiresAt.
	for _, now := range []time.Time{a.ExpiresAt, a.ExpiresAt.Add(hour)} {
		_, err := find(key, now)
		wantErr(t, "FindApproval at or after expiry", err, store.ErrNotFound)
	}

	// A denial stands until it expires.
	f.decide(a.ID, false)
	got, err = find(key, f.base)
	if err != nil {
		t.Fatalf("FindApproval of a denied request: %v", err)
	}
	if got.ID != a.ID || got.Status != store.ApprovalDenied {
		t.Errorf("FindApproval = %s (%s), want %s denied", got.ID, got.Status, a.ID)
	}
	_, err = find(key, a.ExpiresAt)
	wantErr(t, "FindApproval of an expired denial", err, store.ErrNotFound)

	// Approved: found until consumed.
	in2 := f.intent("alice", "danger")
	key2 := store.ApprovalKey{Caller: in2.Caller, Tool: in2.Tool, DefinitionHash: in2.DefinitionHash, ArgsDigest: in2.ArgsDigest}
	b := f.approved(in2)
	got, err = find(key2, f.base)
	if err != nil || got.ID != b.ID || got.Status != store.ApprovalApproved {
		t.Fatalf("FindApproval of an approved request = %+v, %v", got, err)
	}
	f.commit(&store.CommitRequest{Intent: in2, ApprovalID: b.ID})
	_, err = find(key2, f.base)
	wantErr(t, "FindApproval of a consumed approval", err, store.ErrNotFound)

	// A pending request created expired is never found.
	in3 := f.intent("alice", "danger")
	f.approvalAt(in3, f.base.Add(-2*hour), f.base.Add(-hour))
	_, err = find(store.ApprovalKey{Caller: in3.Caller, Tool: in3.Tool, DefinitionHash: in3.DefinitionHash, ArgsDigest: in3.ArgsDigest}, f.base)
	wantErr(t, "FindApproval of an expired request", err, store.ErrNotFound)
}

func testApprovalFindNewest(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	key := store.ApprovalKey{Caller: in.Caller, Tool: in.Tool, DefinitionHash: in.DefinitionHash, ArgsDigest: in.ArgsDigest}
	older := f.approvalAt(in, f.base.Add(1*ms), f.base.Add(hour))
	f.decide(older.ID, true)
	newer := f.approvalAt(in, f.base.Add(5*ms), f.base.Add(hour))
	got, err := f.s.FindApproval(f.ctx, key, f.base.Add(time.Second))
	if err != nil || got.ID != newer.ID {
		t.Fatalf("FindApproval = %v, %v; want the newest, %s", got, err, newer.ID)
	}
	// Once the newest expires, the older one (still open) is found.
	expiring := f.approvalAt(in, f.base.Add(9*ms), f.base.Add(10*ms))
	got, err = f.s.FindApproval(f.ctx, key, f.base.Add(9*ms))
	if err != nil || got.ID != expiring.ID {
		t.Fatalf("FindApproval before expiry = %v, %v; want %s", got, err, expiring.ID)
	}
	got, err = f.s.FindApproval(f.ctx, key, f.base.Add(10*ms))
	if err != nil || got.ID != newer.ID {
		t.Fatalf("FindApproval after the newest expired = %v, %v; want %s", got, err, newer.ID)
	}
	// Consuming the older approved one leaves the pending newer one.
	f.commit(&store.CommitRequest{Intent: in, ApprovalID: older.ID})
	got, err = f.s.FindApproval(f.ctx, key, f.base.Add(time.Second))
	if err != nil || got.ID != newer.ID || got.Status != store.ApprovalPending {
		t.Fatalf("FindApproval after consuming the older = %v, %v; want %s pending", got, err, newer.ID)
	}
}

func testConsumeApproved(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	a := f.approved(in)
	f.commit(&store.CommitRequest{Intent: in, ApprovalID: a.ID, Reservations: []budget.Reservation{res("caller", "alice", 5, 1)}})
	want := f.stored(in)
	want.ApprovalID = a.ID
	wantIntent(t, f.get(in.CallID), want)
	got := f.getApproval(a.ID)
	if got.ConsumedBy != in.CallID {
		t.Errorf("ConsumedBy = %q, want the call id %s", got.ConsumedBy, in.CallID)
	}
	if got.Status != store.ApprovalApproved || got.DecidedBy != "reviewer" {
		t.Errorf("consumed approval: status %s by %q, want approved by reviewer", got.Status, got.DecidedBy)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})
}

func testConsumeOnce(f *fixture) {
	t := f.t
	first := f.intent("alice", "danger")
	a := f.approved(first)
	f.commit(&store.CommitRequest{Intent: first, ApprovalID: a.ID, Reservations: []budget.Reservation{res("caller", "alice", 5, 1)}})
	// The same call again, under a new call id and key.
	second := first
	second.CallID, second.IdempotencyKey = first.CallID+"-again", "k2"
	_, err := f.s.CommitIntent(f.ctx, &store.CommitRequest{Intent: second, ApprovalID: a.ID, Reservations: []budget.Reservation{res("caller", "alice", 5, 1)}})
	wantErr(t, "second commit with a consumed approval", err, store.ErrApprovalUnavailable)
	f.absent(second.CallID)
	_, err = f.s.GetIntentByKey(f.ctx, "alice", "k2")
	wantErr(t, "GetIntentByKey after a refused commit", err, store.ErrNotFound)
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})
	if got := f.getApproval(a.ID); got.ConsumedBy != first.CallID {
		t.Errorf("ConsumedBy = %q after a second use, want %s", got.ConsumedBy, first.CallID)
	}
}

// A commit with an approval that is not approved, expired, consumed or for
// another call is refused and writes nothing.
func testConsumeRefused(f *fixture) {
	t := f.t
	type setup func(in store.Intent) (approvalID string, call store.Intent)
	other := func(mod func(*store.Intent)) setup {
		return func(in store.Intent) (string, store.Intent) {
			a := f.approved(in)
			call := in
			mod(&call)
			return a.ID, call
		}
	}
	cases := []struct {
		name string
		s    setup
		// forOther: the approval is good for its own call, which may
		// still use it after the refusal.
		forOther bool
	}{
		{"pending", func(in store.Intent) (string, store.Intent) { return f.approval(in).ID, in }, false},
		{"denied", func(in store.Intent) (string, store.Intent) {
			a := f.approval(in)
			f.decide(a.ID, false)
			return a.ID, in
		}, false},
		{"expired before the call", func(in store.Intent) (string, store.Intent) {
			a := f.approvalAt(in, in.CreatedAt.Add(-2*hour), in.CreatedAt.Add(-hour))
			if err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: true, By: "bob", At: in.CreatedAt.Add(-90 * time.Minute)}); err != nil {
				t.Fatal(err)
			}
			return a.ID, in
		}, false},
		{"expiring as the call is made", func(in store.Intent) (string, store.Intent) {
			a := f.approvalAt(in, in.CreatedAt.Add(-time.Minute), in.CreatedAt)
			if err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: true, By: "bob", At: in.CreatedAt.Add(-time.Second)}); err != nil {
				t.Fatal(err)
			}
			return a.ID, in
		}, false},
		{"other arguments", other(func(c *store.Intent) {
			c.Arguments, c.ArgsDigest = []byte(`{"other":1}`), "sha256:other-args"
		}), true},
		{"other caller", other(func(c *store.Intent) { c.Caller = "mallory" }), true},
		{"other tool", other(func(c *store.Intent) { c.Tool = "note" }), true},
		{"other definition", other(func(c *store.Intent) { c.DefinitionHash = "sha256:changed-def" }), true},
		{"unknown id", func(in store.Intent) (string, store.Intent) { return "apr-no-such", in }, false},
	}
	for _, c := range cases {
		in := f.intent("alice", "danger")
		in.IdempotencyKey = "key-" + in.CallID
		id, call := c.s(in)
		var before *store.Approval
		if a, err := f.s.GetApproval(f.ctx, id); err == nil {
			before = a
		}
		existing, err := f.s.CommitIntent(f.ctx, &store.CommitRequest{
			Intent: call, ApprovalID: id, Reservations: []budget.Reservation{res("caller", call.Caller, 10, 1)},
		})
		wantErr(t, "commit with an approval "+c.name, err, store.ErrApprovalUnavailable)
		if existing != nil {
			t.Errorf("%s: an existing intent was returned", c.name)
		}
		f.absent(call.CallID)
		_, err = f.s.GetIntentByKey(f.ctx, call.Caller, call.IdempotencyKey)
		wantErr(t, c.name+": the refused commit's key", err, store.ErrNotFound)
		f.wantUsage(nil)
		if before != nil {
			wantApproval(t, f.getApproval(id), *before)
		}
		if c.forOther {
			// Its own call, under another call id, may still use it.
			own := in
			own.CallID += "-own"
			f.commit(&store.CommitRequest{Intent: own, ApprovalID: id})
			if got := f.getApproval(id); got.ConsumedBy != own.CallID {
				t.Errorf("%s: ConsumedBy = %q, want %s", c.name, got.ConsumedBy, own.CallID)
			}
		}
	}
	// The approval one millisecond before expiry is in time.
	in := f.intent("alice", "danger")
	a := f.approvalAt(in, in.CreatedAt.Add(-time.Minute), in.CreatedAt.Add(ms))
	if err := f.s.DecideApproval(f.ctx, a.ID, store.ApprovalDecision{Approve: true, By: "bob", At: in.CreatedAt.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	f.commit(&store.CommitRequest{Intent: in, ApprovalID: a.ID})
}

// The approval is consumed in the same transaction as the rest: a commit
// refused for its budget or its idempotency key leaves the approval
// unconsumed.
func testConsumeAtomic(f *fixture) {
	t := f.t
	f.commitNew("alice", "note", res("caller", "alice", 1, 1))
	taken := f.intent("alice", "note")
	taken.IdempotencyKey = "taken"
	f.commit(req(taken))

	in := f.intent("alice", "danger")
	a := f.approved(in)
	approvedState := f.getApproval(a.ID)

	in.IdempotencyKey = "fresh"
	_, err := f.s.CommitIntent(f.ctx, &store.CommitRequest{Intent: in, ApprovalID: a.ID, Reservations: []budget.Reservation{res("caller", "alice", 1, 1)}})
	wantBudgetError(t, "commit with an approval over budget", err,
		store.BudgetError{Scope: "caller", Key: "alice", Used: 1, Requested: 1, Quota: 1})
	wantApproval(t, f.getApproval(a.ID), *approvedState)
	f.absent(in.CallID)

	in.IdempotencyKey = "taken"
	existing, err := f.s.CommitIntent(f.ctx, &store.CommitRequest{Intent: in, ApprovalID: a.ID, Reservations: []budget.Reservation{res("caller", "alice", 10, 1)}})
	wantErr(t, "commit with an approval and a used key", err, store.ErrDuplicateKey)
	if existing == nil || existing.CallID != taken.CallID {
		t.Errorf("ErrDuplicateKey returned %v, want the intent %s", existing, taken.CallID)
	}
	wantApproval(t, f.getApproval(a.ID), *approvedState)
	f.absent(in.CallID)
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 1})

	in.IdempotencyKey = "fresh"
	f.commit(&store.CommitRequest{Intent: in, ApprovalID: a.ID, Reservations: []budget.Reservation{res("caller", "alice", 10, 1)}})
	if got := f.getApproval(a.ID); got.ConsumedBy != in.CallID {
		t.Errorf("ConsumedBy = %q, want %s", got.ConsumedBy, in.CallID)
	}
	f.wantUsage(map[usageKey]int64{{"caller", "alice"}: 2})
}

// ListApprovals filters by caller: the gateway counts a caller's pending
// requests with it to cap them.
func testApprovalListByCaller(f *fixture) {
	t := f.t
	a1 := f.approval(f.intent("alice", "danger"))
	f.approval(f.intent("bob", "danger"))
	a3 := f.approval(f.intent("alice", "other"))
	f.decide(a3.ID, true)
	got, err := f.s.ListApprovals(f.ctx, store.ApprovalFilter{Caller: "alice", Status: store.ApprovalPending}, f.base)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != a1.ID {
		t.Errorf("alice's pending requests: %+v, want only %s", got, a1.ID)
	}
	all, err := f.s.ListApprovals(f.ctx, store.ApprovalFilter{Caller: "alice"}, f.base)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Errorf("alice's requests: %d, want 2", len(all))
	}
}

// newApproval is a pending request for the call in, not yet recorded.
func (f *fixture) newApproval(in store.Intent, id string) *store.Approval {
	return &store.Approval{
		ID: id, Caller: in.Caller, Session: in.Session, Tool: in.Tool,
		DefinitionHash: in.DefinitionHash, ArgsDigest: in.ArgsDigest, Status: store.ApprovalPending,
		CreatedAt: f.base, ExpiresAt: f.base.Add(hour),
	}
}

func testApprovalOpen(f *fixture) {
	t := f.t
	in := f.intent("alice", "danger")
	first := f.newApproval(in, "apr-open-1")
	first.ResolvedPath = "notes/real.txt" // kept as opened
	got, created, err := f.s.OpenApproval(f.ctx, first, 0)
	if err != nil || !created {
		t.Fatalf("OpenApproval on an empty store: created %v, %v", created, err)
	}
	wantApproval(t, got, *first)
	wantApproval(t, f.getApproval(first.ID), *first)

	// The same call again: the open request back, nothing recorded.
	got, created, err = f.s.OpenApproval(f.ctx, f.newApproval(in, "apr-open-2"), 0)
	if err != nil || created || got == nil || got.ID != first.ID {
		t.Fatalf("OpenApproval of an open call = %+v, created %v, %v; want %s, not created", got, created, err, first.ID)
	}
	_, err = f.s.GetApproval(f.ctx, "apr-open-2")
	wantErr(t, "the second request of an open call", err, store.ErrNotFound)

	// A decided request is still the call's open one until it expires or
	// is consumed, as FindApproval says.
	f.decide(first.ID, false)
	if got, created, err = f.s.OpenApproval(f.ctx, f.newApproval(in, "apr-open-3"), 0); err != nil || created || got.ID != first.ID {
		t.Fatalf("OpenApproval of a denied call = %+v, created %v, %v; want the denial %s", got, created, err, first.ID)
	}
	// Once it has expired, a new request is opened.
	later := f.newApproval(in, "apr-open-4")
	later.CreatedAt, later.ExpiresAt = first.ExpiresAt, first.ExpiresAt.Add(hour)
	if got, created, err = f.s.OpenApproval(f.ctx, later, 0); err != nil || !created || got.ID != later.ID {
		t.Fatalf("OpenApproval after expiry = %+v, created %v, %v; want %s created", got, created, err, later.ID)
	}

	// The cap counts the caller's pending requests, not others'.
	for i := range 2 {
		o := f.intent("bob", "danger")
		if _, created, err := f.s.OpenApproval(f.ctx, f.newApproval(o, fmt.Sprintf("apr-bob-%d", i)), 2); err != nil || !created {
			t.Fatalf("bob's request %d under the cap: created %v, %v", i, created, err)
		}
	}
	over := f.intent("bob", "danger")
	_, created, err = f.s.OpenApproval(f.ctx, f.newApproval(over, "apr-bob-over"), 2)
	wantErr(t, "OpenApproval at the cap", err, store.ErrTooManyPending)
	if created {
		t.Error("OpenApproval at the cap says it created a request")
	}
	_, err = f.s.GetApproval(f.ctx, "apr-bob-over")
	wantErr(t, "the request refused at the cap", err, store.ErrNotFound)
	if _, created, err := f.s.OpenApproval(f.ctx, f.newApproval(f.intent("carol", "danger"), "apr-carol"), 2); err != nil || !created {
		t.Errorf("another caller's request beside bob's cap: created %v, %v", created, err)
	}
}
