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

// TestDecideContent: resources and prompts are granted by their own
// lists, by pattern; tools' allow lists grant none (default deny).
func TestDecideContent(t *testing.T) {
	r, err := NewRules([]Rule{
		{Caller: "alice", Allow: []string{"*"}, Resources: []string{"file:///docs/*"}, Prompts: []string{"review-*"}},
		{Caller: "bob", Allow: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caller, kind, name string
		allow              bool
	}{
		{"alice", KindResource, "file:///docs/a.md", true},
		{"alice", KindResource, "file:///docs/sub/a.md", false}, // '*' does not cross '/'
		{"alice", KindResource, "file:///etc/passwd", false},
		{"alice", KindPrompt, "review-code", true},
		{"alice", KindPrompt, "file:///docs/a.md", false},
		{"bob", KindResource, "file:///docs/a.md", false},
		{"bob", KindPrompt, "review-code", false},
		{"carol", KindPrompt, "review-code", false},
	} {
		if d := r.DecideContent(tc.caller, tc.kind, tc.name); d.Allow != tc.allow || d.Reason == "" {
			t.Errorf("%s %s %s: %+v, want allow %v", tc.caller, tc.kind, tc.name, d, tc.allow)
		}
	}
	if _, err := NewRules([]Rule{{Caller: "a", Resources: []string{"["}}}); err == nil {
		t.Error("a bad resource pattern was accepted")
	}
	if d := (DenyAll{}).DecideContent("alice", KindPrompt, "x"); d.Allow {
		t.Error("DenyAll allowed")
	}
}

// TestLiveDecideContent: a Live policy grants content as the policy in
// force does (caller globs included), a reload changes the answer, and a
// policy that cannot say grants nothing.
func TestLiveDecideContent(t *testing.T) {
	first, err := NewRules([]Rule{{Caller: "team-*", Resources: []string{"demo://*"}}})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLive(first)
	if d := l.DecideContent("team-a", KindResource, "demo://x"); !d.Allow || d.Source == "" {
		t.Errorf("first policy: %+v, want allowed with its rule named", d)
	}
	second, err := NewRules([]Rule{{Caller: "team-*", Prompts: []string{"p"}}})
	if err != nil {
		t.Fatal(err)
	}
	l.Store(second)
	if d := l.DecideContent("team-a", KindResource, "demo://x"); d.Allow {
		t.Errorf("after the reload: %+v, want denied", d)
	}
	if d := l.DecideContent("team-a", KindPrompt, "p"); !d.Allow {
		t.Errorf("after the reload, the prompt: %+v, want allowed", d)
	}
	l.Store(allowAll{})
	if d := l.DecideContent("team-a", KindPrompt, "p"); d.Allow || d.Reason == "" {
		t.Errorf("a policy without content grants: %+v, want denied with a reason", d)
	}
}

// allowAll allows every call and says nothing about content.
type allowAll struct{}

func (allowAll) Decide(Request) Decision { return Decision{Allow: true, Effect: EffectAllow} }
