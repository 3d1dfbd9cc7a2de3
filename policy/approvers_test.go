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
