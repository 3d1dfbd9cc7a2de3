package budget

import (
	"testing"
	"time"
)

func TestCostOf(t *testing.T) {
	q := Quota{Scope: ScopeCaller, Quota: 3, Cost: map[string]int64{"danger": 2}, Default: ptr(1)}
	if q.CostOf("danger") != 2 || q.CostOf("note") != 1 {
		t.Fatalf("costs: danger %d note %d", q.CostOf("danger"), q.CostOf("note"))
	}
	if (Quota{Scope: ScopeCaller, Quota: 3}).CostOf("x") != 1 {
		t.Fatal("a tool without a configured cost must cost 1")
	}
	if (Quota{Default: ptr(5)}).CostOf("x") != 5 {
		t.Fatal("the default cost must apply to unlisted tools")
	}
	if (Quota{Default: ptr(0)}).CostOf("x") != 0 {
		t.Fatal("a default cost of 0 must be kept, not read as unset")
	}
	// A tool named "default" is a tool: its cost is its own, and it is not
	// the default of the others.
	named := Quota{Cost: map[string]int64{"default": 7}, Default: ptr(2)}
	if named.CostOf("default") != 7 || named.CostOf("other") != 2 {
		t.Fatalf("tool named default costs %d, other %d; want 7 and 2", named.CostOf("default"), named.CostOf("other"))
	}
	if (Quota{Cost: map[string]int64{"default": 7}}).CostOf("other") != 1 {
		t.Fatal("a Cost entry named default must not act as the default")
	}
}

func ptr(n int64) *int64 { return &n }

func TestCheckDefault(t *testing.T) {
	if (Quota{Scope: ScopeCaller, Quota: 1, Default: ptr(-1)}).Check() == nil {
		t.Error("Check accepted a negative default cost")
	}
}

func TestPlan(t *testing.T) {
	quotas := []Quota{
		{Scope: ScopeCaller, Quota: 10, Cost: map[string]int64{"danger": 2}},
		{Scope: ScopeSession, Quota: 4},
	}
	got := Plan(quotas, "alice", "s1", "danger", time.Now())
	want := []Reservation{
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
	if r := Plan(quotas, "alice", "", "x", time.Now()); r[1].Key != "" || r[1].Scope != "session" {
		t.Fatalf("a call without a session must count against the session key \"\": %+v", r)
	}
	if r := Plan(nil, "alice", "s", "x", time.Now()); len(r) != 0 {
		t.Fatalf("no quotas must plan no reservations: %+v", r)
	}
}

func TestCheck(t *testing.T) {
	for _, q := range []Quota{
		{Scope: "team", Quota: 1},
		{Scope: ScopeCaller, Quota: -1},
		{Scope: ScopeCaller, Quota: 1, Cost: map[string]int64{"x": -1}},
		{Scope: ScopeCaller, Quota: 1, Per: 1500 * time.Millisecond},
		{Scope: ScopeCaller, Quota: 1, Per: -time.Hour},
		{Scope: ScopeCaller, Quota: 1, Per: 400 * 24 * time.Hour},
	} {
		if q.Check() == nil {
			t.Errorf("Check(%+v) accepted a bad quota", q)
		}
	}
	if err := (Quota{Scope: ScopeSession, Quota: 0}).Check(); err != nil {
		t.Errorf("a zero quota (nothing allowed) is valid: %v", err)
	}
}

// A windowed quota reserves in the epoch-aligned window holding the commit
// time: the same window up to its last second, the next one from its end.
func TestPlanWindow(t *testing.T) {
	quotas := []Quota{{Scope: ScopeCaller, Quota: 5, Per: time.Hour}}
	at := time.Date(2026, 12, 1, 6, 59, 59, 999e6, time.UTC)
	r := Plan(quotas, "alice", "", "x", at)
	if len(r) != 1 || r[0].Window.Per != time.Hour || !r[0].Window.Start.Equal(time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)) {
		t.Fatalf("Plan at %v = %+v, want the 06:00 window", at, r)
	}
	if err := CheckWindow(r[0].Window); err != nil {
		t.Fatalf("planned window refused by the store rules: %v", err)
	}
	next := Plan(quotas, "alice", "", "x", at.Add(time.Millisecond))
	if !next[0].Window.Start.Equal(r[0].Window.End()) {
		t.Fatalf("one millisecond later: window %v, want the one starting %v", next[0].Window.Start, r[0].Window.End())
	}
	// In another time zone, the same instant is the same window.
	loc := time.FixedZone("x", 5*3600+1800)
	if w := Plan(quotas, "alice", "", "x", at.In(loc))[0].Window; !w.Start.Equal(r[0].Window.Start) {
		t.Fatalf("window depends on the time zone: %v", w.Start)
	}
	if err := (Quota{Scope: ScopeCaller, Quota: 1, Per: 24 * time.Hour}).Check(); err != nil {
		t.Errorf("a daily window is valid: %v", err)
	}
}
