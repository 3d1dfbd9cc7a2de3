package storetest

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// Refused calls: recorded, listed newest first with their filters, kept
// once per call id, their message bounded, pruned by their time.

func (f *fixture) refusal(caller, tool, class string, at time.Time) store.Refusal {
	f.n++
	return store.Refusal{
		CallID: fmt.Sprintf("call_refused_%04d", f.n), Caller: caller, Session: "s-" + caller, Tool: tool,
		Class: class, Step: "authorize", Message: "no rule allows " + tool, ArgsDigest: "sha256:abc",
		ApprovalID: "", At: at,
	}
}

func (f *fixture) listRefusals(rf store.RefusalFilter) []store.Refusal {
	f.t.Helper()
	rs, err := f.s.ListRefusals(f.ctx, rf)
	if err != nil {
		f.t.Fatalf("ListRefusals(%+v): %v", rf, err)
	}
	return rs
}

func refusalIDs(rs []store.Refusal) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.CallID
	}
	return strings.Join(ids, ",")
}

func testRefusals(f *fixture) {
	t := f.t
	a1 := f.refusal("alice", "fs.write", "forbidden", f.base)
	a2 := f.refusal("alice", "bash", "approval_required", f.base.Add(time.Minute))
	a2.ApprovalID, a2.Step = "appr_1", "approve"
	b1 := f.refusal("bob", "fs.write", "budget_exceeded", f.base.Add(2*time.Minute))
	// Recorded out of time order, in two batches: listed newest first.
	if err := f.s.RecordRefusals(f.ctx, []store.Refusal{b1, a1}); err != nil {
		t.Fatalf("RecordRefusals: %v", err)
	}
	if err := f.s.RecordRefusals(f.ctx, []store.Refusal{a2}); err != nil {
		t.Fatalf("RecordRefusals: %v", err)
	}
	// The same call id again changes nothing.
	dup := a1
	dup.Class = "validation"
	if err := f.s.RecordRefusals(f.ctx, []store.Refusal{dup}); err != nil {
		t.Fatalf("RecordRefusals of a recorded call id: %v", err)
	}
	all := f.listRefusals(store.RefusalFilter{})
	if got, want := refusalIDs(all), refusalIDs([]store.Refusal{b1, a2, a1}); got != want {
		t.Fatalf("ListRefusals = %s, want %s", got, want)
	}
	for i, want := range []store.Refusal{b1, a2, a1} {
		got := all[i]
		if !got.At.Equal(want.At) {
			t.Errorf("refusal %s: At %v, want %v", want.CallID, got.At, want.At)
		}
		got.At = want.At
		if got != want {
			t.Errorf("refusal round trip:\n got %+v\nwant %+v", got, want)
		}
	}
	for _, c := range []struct {
		f    store.RefusalFilter
		want []store.Refusal
	}{
		{store.RefusalFilter{Caller: "alice"}, []store.Refusal{a2, a1}},
		{store.RefusalFilter{Tool: "fs.write"}, []store.Refusal{b1, a1}},
		{store.RefusalFilter{Caller: "bob", Tool: "bash"}, nil},
		{store.RefusalFilter{Since: f.base.Add(time.Minute)}, []store.Refusal{b1, a2}},
		{store.RefusalFilter{Until: f.base.Add(time.Minute)}, []store.Refusal{a1}},
		{store.RefusalFilter{Since: f.base, Until: f.base.Add(2 * time.Minute)}, []store.Refusal{a2, a1}},
		{store.RefusalFilter{Limit: 1}, []store.Refusal{b1}},
		{store.RefusalFilter{CallID: a2.CallID}, []store.Refusal{a2}},
		{store.RefusalFilter{CallID: "call_none"}, nil},
	} {
		if got, want := refusalIDs(f.listRefusals(c.f)), refusalIDs(c.want); got != want {
			t.Errorf("ListRefusals(%+v) = %s, want %s", c.f, got, want)
		}
	}

	// A long message is cut to MaxRefusalMessage bytes, at a rune boundary.
	long := f.refusal("carol", "x", "validation", f.base.Add(3*time.Minute))
	long.Message = strings.Repeat("é", store.MaxRefusalMessage)
	if err := f.s.RecordRefusals(f.ctx, []store.Refusal{long}); err != nil {
		t.Fatalf("RecordRefusals: %v", err)
	}
	got := f.listRefusals(store.RefusalFilter{Caller: "carol"})
	if len(got) != 1 || len(got[0].Message) > store.MaxRefusalMessage || !strings.HasPrefix(long.Message, got[0].Message) || len(got[0].Message) < store.MaxRefusalMessage-1 {
		t.Errorf("a long message is kept as %d bytes, want a prefix of at most %d", len(got[0].Message), store.MaxRefusalMessage)
	}

	// Prune deletes the refusals made before its cut, and only those.
	r, err := f.s.Prune(f.ctx, f.base.Add(time.Minute))
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if r.Refusals != 1 {
		t.Errorf("Prune counted %d refusals, want 1", r.Refusals)
	}
	if got, want := refusalIDs(f.listRefusals(store.RefusalFilter{})), refusalIDs([]store.Refusal{long, b1, a2}); got != want {
		t.Errorf("after Prune: %s, want %s", got, want)
	}
}
