package policy

import (
	"slices"
	"testing"
)

func TestApproverRule(t *testing.T) {
	r, err := NewRules([]Rule{
		{Caller: "alice", Allow: []string{"*"}, Approve: []string{"write"}, Approvers: []string{"ops", "sec-*"}},
		{Caller: "alice", Allow: []string{"edit"}, Approve: []string{"edit"}, SelfApprove: true},
		{Caller: "bob", Allow: []string{"*"}, Approve: []string{"bash"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := r.ApproverRule("alice", "write")
	if !slices.Equal(w.Approvers, []string{"ops", "sec-*"}) || w.SelfApprove {
		t.Errorf("alice write: %+v", w)
	}
	for op, want := range map[string]bool{"ops": true, "sec-anna": true, "dev": false, "": false} {
		if w.MayApprove(op) != want {
			t.Errorf("MayApprove(%q) = %v", op, !want)
		}
	}
	if e := r.ApproverRule("alice", "edit"); !e.SelfApprove || len(e.Approvers) != 0 || !e.MayApprove("anyone") {
		t.Errorf("alice edit: %+v", e)
	}
	// No approve entry names read: the allowing rules decide; none opts in.
	if rd := r.ApproverRule("alice", "read"); rd.SelfApprove {
		t.Errorf("alice read: %+v", rd)
	}
	if b := r.ApproverRule("bob", "bash"); b.SelfApprove || len(b.Approvers) != 0 {
		t.Errorf("bob bash: %+v (default: any operator, never the caller)", b)
	}
	if n := r.ApproverRule("carol", "bash"); n.SelfApprove || len(n.Approvers) != 0 {
		t.Errorf("unknown caller: %+v", n)
	}
}

// The approvers follow the rules that name the tool, whatever their
// patterns and conditions (who decides does not depend on the arguments),
// across caller globs; a Live policy passes the question and Visible on to
// the policy in force.
func TestApproverRuleOverPatternsAndLive(t *testing.T) {
	r, err := NewRules([]Rule{
		{Caller: "ci-*", Approve: []string{"bash(git push*)"}, Approvers: []string{"release"}},
		{Caller: "ci-*", Allow: []string{"note"}, Approvers: []string{"ops"},
			Conditions: []Condition{{Effect: EffectApprove, Tool: "note", If: `size(args) > 1`}}},
		{Caller: "ci-1", Allow: []string{"bash"}, Approvers: []string{"dev"}, SelfApprove: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Only approve entries count while one names the tool: the allow of
	// ci-1's own rule does not add its approvers.
	if b := r.ApproverRule("ci-1", "bash"); !slices.Equal(b.Approvers, []string{"release"}) || b.SelfApprove {
		t.Errorf("ci-1 bash: %+v", b)
	}
	if n := r.ApproverRule("ci-2", "note"); !slices.Equal(n.Approvers, []string{"ops"}) {
		t.Errorf("ci-2 note (a CEL approve): %+v", n)
	}
	l := NewLive(r)
	if a := l.ApproverRule("ci-1", "bash"); !slices.Equal(a.Approvers, []string{"release"}) {
		t.Errorf("Live: %+v", a)
	}
	if !l.Visible("ci-1", "bash") || l.Visible("dev", "bash") {
		t.Error("Live.Visible does not follow the rules")
	}
	l.Store(DenyAll{})
	if a := l.ApproverRule("ci-1", "bash"); len(a.Approvers) != 0 || a.SelfApprove {
		t.Errorf("Live over DenyAll: %+v", a)
	}
	if l.Visible("ci-1", "bash") {
		t.Error("Live over DenyAll shows a tool")
	}
}

// Lint reports an approve entry no one may decide, when asked.
func TestLintNoOperator(t *testing.T) {
	r, err := NewRules([]Rule{
		{Caller: "alice", Approve: []string{"write"}, Approvers: []string{"sec"}},
		{Caller: "alice", Approve: []string{"edit"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	found := r.Lint(LintOptions{Tools: []string{"write", "edit"}, CanDecide: func(caller, tool string) bool {
		return r.ApproverRule(caller, tool).MayApprove("ops")
	}})
	if len(found) != 1 || found[0].Kind != FindingNoOperator || found[0].Entry != "write" {
		t.Fatalf("findings %+v, want one no_operator for write", found)
	}
}
