package budget

import (
	"testing"

	"github.com/agentbackplane/backplane/store"
)

func TestCostOf(t *testing.T) {
	q := Quota{Scope: ScopeCaller, Quota: 3, Cost: map[string]int64{"default": 1, "danger": 2}}
	if q.CostOf("danger") != 2 || q.CostOf("note") != 1 {
		t.Fatalf("costs: danger %d note %d", q.CostOf("danger"), q.CostOf("note"))
	}
	if (Quota{Scope: ScopeCaller, Quota: 3}).CostOf("x") != 1 {
		t.Fatal("a tool without a configured cost must cost 1")
	}
	if (Quota{Cost: map[string]int64{"default": 5}}).CostOf("x") != 5 {
		t.Fatal("the default cost must apply to unlisted tools")
	}
}

func TestPlan(t *testing.T) {
	quotas := []Quota{
		{Scope: ScopeCaller, Quota: 10, Cost: map[string]int64{"danger": 2}},
		{Scope: ScopeSession, Quota: 4},
	}
	got := Plan(quotas, "alice", "s1", "danger")
	want := []store.Reservation{
		{Scope: "caller", Key: "alice", Quota: 10, Amount: 2},
		{Scope: "session", Key: "s1", Quota: 4, Amount: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Plan = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reservation %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// No session: the shared "" bucket, so leaving the id out escapes nothing.
	if r := Plan(quotas, "alice", "", "x"); r[1].Key != "" || r[1].Scope != "session" {
		t.Fatalf("a call without a session must count against the session key \"\": %+v", r)
	}
	if r := Plan(nil, "alice", "s", "x"); len(r) != 0 {
		t.Fatalf("no quotas must plan no reservations: %+v", r)
	}
}

func TestCheck(t *testing.T) {
	for _, q := range []Quota{
		{Scope: "team", Quota: 1},
		{Scope: ScopeCaller, Quota: -1},
		{Scope: ScopeCaller, Quota: 1, Cost: map[string]int64{"x": -1}},
	} {
		if q.Check() == nil {
			t.Errorf("Check(%+v) accepted a bad quota", q)
		}
	}
	if err := (Quota{Scope: ScopeSession, Quota: 0}).Check(); err != nil {
		t.Errorf("a zero quota (nothing allowed) is valid: %v", err)
	}
}
