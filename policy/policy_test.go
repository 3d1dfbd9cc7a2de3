package policy

import "testing"

func TestRules(t *testing.T) {
	r, err := NewRules([]Rule{
		{Caller: "alice", Allow: []string{"note", "danger", "fs.*"}, Approve: []string{"danger"}},
		{Caller: "alice", Allow: []string{"extra"}, Approve: []string{"fs.write"}},
		{Caller: "bob", Allow: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		caller, tool    string
		allow, approval bool
	}{
		{"alice", "note", true, false},
		{"alice", "danger", true, true},
		{"alice", "fs.read", true, false},
		{"alice", "fs.write", true, true}, // approve from the second rule
		{"alice", "extra", true, false},
		{"alice", "fs", false, false},     // "fs.*" needs the dot
		{"alice", "fs.a/b", false, false}, // '*' does not cross '/'
		{"alice", "notes", false, false},  // exact names are exact
		{"bob", "anything", true, false},  // '*' matches every name without '/'
		{"carol", "note", false, false},   // default deny
		{"", "note", false, false},        // an empty caller is no one
		{"ALICE", "note", false, false},   // callers are exact
	}
	for _, c := range cases {
		d := r.Decide(Request{Caller: c.caller, Tool: c.tool})
		if d.Allow != c.allow || d.RequireApproval != c.approval {
			t.Errorf("Decide(%q, %q) = allow %v approval %v, want %v %v (%s)", c.caller, c.tool, d.Allow, d.RequireApproval, c.allow, c.approval, d.Reason)
		}
		if d.Reason == "" {
			t.Errorf("Decide(%q, %q): no reason", c.caller, c.tool)
		}
	}
}

// Issue 11: a matching approve needs an approval whether or not an allow
// names the tool too (deny > approve > allow > default deny).
func TestApproveWithoutAllowNeedsApproval(t *testing.T) {
	r, err := NewRules([]Rule{{Caller: "alice", Approve: []string{"danger"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Decide(Request{Caller: "alice", Tool: "danger"}); !d.Allow || !d.RequireApproval {
		t.Fatalf("approve alone must need an approval: %+v", d)
	}
}

func TestNewRulesRefusesBadRules(t *testing.T) {
	for _, rules := range [][]Rule{
		{{Caller: "", Allow: []string{"x"}}},
		{{Caller: "a", Allow: []string{"[x"}}},
		{{Caller: "a", Approve: []string{"x\\"}}},
		{{Caller: "a", Approve: []string{"x"}, Approvers: []string{"[ops"}}},
		{{Caller: "a", Approve: []string{"x"}, Approvers: []string{""}}},
	} {
		if _, err := NewRules(rules); err == nil {
			t.Errorf("NewRules(%+v) accepted a bad rule", rules)
		}
	}
}

func TestDenyAll(t *testing.T) {
	if d := (DenyAll{}).Decide(Request{Caller: "alice", Tool: "note"}); d.Allow {
		t.Fatal("DenyAll allowed a call")
	}
}
