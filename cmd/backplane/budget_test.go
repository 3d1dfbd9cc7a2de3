package main

import (
	"strings"
	"testing"
)

// budgetUsed returns "used" of one (scope, key) from "budget show --json",
// "0" when the key holds nothing.
func budgetUsed(t *testing.T, g *gwDir, scope, key string) string {
	t.Helper()
	used, _ := budgetLineOf(t, g, scope, key)
	return used
}

// budgetLineOf returns used and quota of one (scope, key).
func budgetLineOf(t *testing.T, g *gwDir, scope, key string) (used, quota string) {
	t.Helper()
	m := g.runJSON(t, exitOK, "", "budget", "show")
	list, ok := m["budgets"].([]any)
	if !ok {
		t.Fatalf("budget show: %v", m)
	}
	for _, v := range list {
		l := v.(map[string]any)
		if l["scope"] == scope && l["key"] == key {
			return jsonText(l["used"]), jsonText(l["quota"])
		}
	}
	return "0", ""
}

// TestBudgetShow: per-caller and per-session budgets after calls of
// different costs, in JSON and text; a session quota refuses the call that
// would exceed it.
func TestBudgetShow(t *testing.T) {
	cfg := strings.Replace(testConfig, `budgets:
  - scope: caller
    quota: 20
    cost: {default: 1, danger: 2, hang: 3}`, `budgets:
  - scope: caller
    quota: 20
    cost: {default: 1, danger: 2, hang: 3}
  - scope: session
    quota: 2`, 1)
	g := newGWDir(t, cfg)

	r := g.run(t, "", "budget", "show")
	r.wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "no budget is used yet") || !strings.Contains(r.stdout, "quota: caller 20") {
		t.Errorf("empty budget text:\n%s", r.stdout)
	}

	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "--session", "s1", "note", `{"text":"a"}`))
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "--session", "s1", "note", `{"text":"b"}`))
	e := callError(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "--session", "s1", "note", `{"text":"c"}`), "budget_exceeded")
	if d := details(e); d["scope"] != "session" || d["key"] != "s1" || jsonText(d["quota"]) != "2" {
		t.Errorf("session refusal details %v", d)
	}
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "--session", "s2", "note", `{"text":"d"}`))

	for _, c := range []struct{ scope, key, used, quota string }{
		{"caller", "alice", "3", "20"},
		{"session", "s1", "2", "2"},
		{"session", "s2", "1", "2"},
	} {
		used, quota := budgetLineOf(t, g, c.scope, c.key)
		if used != c.used || quota != c.quota {
			t.Errorf("%s %s: used %s quota %s, want used %s quota %s", c.scope, c.key, used, quota, c.used, c.quota)
		}
	}
	r = g.run(t, "", "budget", "show")
	r.wantCode(t, exitOK)
	for _, want := range []string{"SCOPE", "caller", "alice", "session", "s1", "s2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("budget text lacks %q:\n%s", want, r.stdout)
		}
	}
}
