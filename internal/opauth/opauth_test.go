package opauth

import "testing"

func TestCheck(t *testing.T) {
	a := New(map[string]string{"op-tok": "ops", "both": "ops2", "": "empty"}, map[string]string{"call-tok": "alice", "both": "bob"}, nil)
	for _, tc := range []struct {
		token string
		who   Who
		name  string
	}{
		{"op-tok", Operator, "ops"},
		{"both", Operator, "ops2"}, // an operator's first
		{"call-tok", Caller, "alice"},
		{"op-to", Nobody, ""},
		{"", Nobody, ""},
	} {
		if who, name := a.Check(tc.token); who != tc.who || name != tc.name {
			t.Errorf("Check(%q) = %v %q, want %v %q", tc.token, who, name, tc.who, tc.name)
		}
	}
	if name, ok := a.Operator("op-tok"); !ok || name != "ops" {
		t.Errorf("Operator: %q %v", name, ok)
	}
	if a.IsCaller("both") || !a.IsCaller("call-tok") {
		t.Error("IsCaller: an operator's token is no caller's; a caller's is")
	}
	if a.Operators() != 2 {
		t.Errorf("Operators() = %d, want 2 (the empty token is left out)", a.Operators())
	}
	var zero *Tokens
	if who, _ := zero.Check("op-tok"); who != Nobody || zero.Operators() != 0 {
		t.Error("a nil Tokens knows a token")
	}
}
