package gateway_test

import (
	"context"
	"encoding/json"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/tool"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
)

// Every call refused before its commit leaves one refusal row, with its
// class, step and digest and nothing of its arguments; a call that ran
// leaves none.
func TestRefusalsAreRecorded(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1}}})
		f.tool("note", nil)
		f.tool("danger", nil)
		ctx := context.Background()
		if _, err := f.call("alice", "note", `{"text":"ok"}`); err != nil {
			t.Fatal(err)
		}
		type want struct{ class, step string }
		cases := []struct {
			caller, tool, args string
			want
		}{
			{"alice", "nope", `{}`, want{"not_found", "lookup"}},
			{"alice", "note", `{"text":1}`, want{"validation", "validate"}},
			{"alice", "danger", `{"text":"secret-value"}`, want{"approval_required", "approve"}},
			{"alice", "note", `{"text":"over"}`, want{"budget_exceeded", "reserve"}},
		}
		var ids []string
		for _, c := range cases {
			_, err := f.call(c.caller, c.tool, c.args)
			ge := gwErr(t, err, tool.Class(c.class))
			if ge.Step != c.step {
				t.Errorf("%s %s: step %s, want %s", c.tool, c.args, ge.Step, c.step)
			}
		}
		rs, err := f.g.ListRefusals(ctx, store.RefusalFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != len(cases) {
			t.Fatalf("%d refusals recorded, want %d: %+v", len(rs), len(cases), rs)
		}
		for i, c := range cases {
			r := rs[len(rs)-1-i] // newest first
			ids = append(ids, r.CallID)
			if r.Class != c.class || r.Step != c.step || r.Caller != c.caller || r.Tool != c.tool || r.At.IsZero() || r.CallID == "" {
				t.Errorf("refusal %d: %+v, want %s at %s", i, r, c.class, c.step)
			}
			if b, _ := json.Marshal(r); strings.Contains(string(b), "secret-value") {
				t.Errorf("a refusal holds an argument's value: %s", b)
			}
		}
		if rs[1].ApprovalID == "" || rs[1].ArgsDigest == "" {
			t.Errorf("the approval refusal lacks its request or digest: %+v", rs[1])
		}
		// The journal view lists both kinds, newest first, and filters.
		p, err := f.g.Journal(ctx, opsview.JournalQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) != 5 || p.Entries[0].Refusal == nil || p.Entries[4].Intent == nil {
			t.Fatalf("journal: %d entries, want 4 refusals above 1 intent: %+v", len(p.Entries), p.Entries)
		}
		for _, c := range []struct {
			q    opsview.JournalQuery
			want int
		}{
			{opsview.JournalQuery{Status: opsview.StatusRefused}, 4},
			{opsview.JournalQuery{Status: "succeeded"}, 1},
			{opsview.JournalQuery{Tool: "no*"}, 4},
			{opsview.JournalQuery{Tool: "n?te"}, 3},
			{opsview.JournalQuery{Caller: "a*", Class: "budget_exceeded"}, 1},
			{opsview.JournalQuery{Text: "NOPE"}, 1},
			{opsview.JournalQuery{Text: ids[2][len(ids[2])-8:]}, 1},
			{opsview.JournalQuery{Since: time.Now().Add(time.Hour)}, 0},
			{opsview.JournalQuery{Until: time.Now().Add(-time.Hour)}, 0},
			{opsview.JournalQuery{Limit: 2, Offset: 4}, 1},
		} {
			p, err := f.g.Journal(ctx, c.q)
			if err != nil {
				t.Fatalf("%+v: %v", c.q, err)
			}
			if len(p.Entries) != c.want {
				t.Errorf("Journal(%+v): %d entries, want %d", c.q, len(p.Entries), c.want)
			}
		}
		if p, _ := f.g.Journal(ctx, opsview.JournalQuery{Limit: 2}); !p.More {
			t.Error("a first page of 2 of 5 says no more follow")
		}
		if _, err := f.g.Journal(ctx, opsview.JournalQuery{Tool: "["}); err == nil {
			t.Error("a malformed pattern is accepted")
		}
		if r, err := f.g.GetRefusal(ctx, ids[0]); err != nil || r.Tool != "nope" {
			t.Errorf("GetRefusal: %+v %v", r, err)
		}

		// The overview counts them by outcome.
		o, err := f.g.Overview(ctx, time.Now().Add(-time.Hour), time.Time{}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range map[string]int{"succeeded": 1, "refused:not_found": 1, "refused:validation": 1, "refused:approval_required": 1, "refused:budget_exceeded": 1} {
			if o.Totals[k] != n {
				t.Errorf("overview %s = %d, want %d (totals %v)", k, o.Totals[k], n, o.Totals)
			}
		}
		sum := 0
		for _, b := range o.Buckets {
			for _, n := range b.Counts {
				sum += n
			}
		}
		if sum != 5 || o.Settled != 1 || o.Pending != 1 {
			t.Errorf("overview buckets hold %d calls, settled %d, pending %d; want 5, 1, 1", sum, o.Settled, o.Pending)
		}
	})
}

// WhyApproval names the rule that asked, each part of a shell command, and
// who may decide.
func TestWhyApproval(t *testing.T) {
	f := newFixture(t, stores(t)["memstore"], config{Rules: []policy.Rule{
		{Caller: "alice", Allow: []string{"note", "bash(git status)"}, Approve: []string{"bash(git push *)"}, Approvers: []string{"lead"}},
	}})
	f.tool("note", nil)
	// The built-in bash's main argument is a shell command.
	f.tool("bash", nil, func(tl *tool.Tool) {
		tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)
	})
	id := pendingID(t, f, "alice", "bash", `{"command":"git status && git push origin main"}`)
	a, err := f.g.GetApproval(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	w := f.g.WhyApproval(&a.Approval)
	if w.Effect != "approve" || w.Rule == "" || len(w.Parts) != 2 {
		t.Fatalf("why: %+v", w)
	}
	if w.Parts[0].Text != "git status" || w.Parts[0].Effect != "allow" || w.Parts[1].Effect != "approve" {
		t.Errorf("parts: %+v", w.Parts)
	}
	if w.AnyOperator || len(w.Deciders) != 1 || w.Deciders[0] != "lead" {
		t.Errorf("deciders: %+v any %v", w.Deciders, w.AnyOperator)
	}
}
