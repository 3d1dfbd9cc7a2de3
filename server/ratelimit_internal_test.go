package server

import (
	"testing"
	"time"
)

// TestRefusalsAreSampled: the first refusal of a caller and limit in each
// second is written, with the count of those since the last written; the
// others only counted (issue 22, item 7: refusals filled the audit log).
func TestRefusalsAreSampled(t *testing.T) {
	var f refusalSampler
	t0 := time.Unix(1000, 0)
	type step struct {
		caller, limit string
		at            time.Duration
		write         bool
		count         int
	}
	for i, s := range []step{
		{"a", "rate", 0, true, 1},
		{"a", "rate", 10 * time.Millisecond, false, 0},
		{"a", "rate", 999 * time.Millisecond, false, 0},
		{"b", "rate", 999 * time.Millisecond, true, 1}, // another caller: its own
		{"a", "subscriptions_per_session", time.Second / 2, true, 1},
		{"a", "rate", time.Second, true, 3}, // this one and the two held back
		{"a", "rate", 5 * time.Second, true, 1},
	} {
		write, count := f.sample(s.caller, s.limit, t0.Add(s.at))
		if write != s.write || count != s.count {
			t.Errorf("refusal %d (%+v): write %v count %d", i, s, write, count)
		}
	}
}

// TestRateLimitsBucket: a caller's bucket lets burst through at once,
// then refuses with the time to wait; each caller has its own; no rate,
// no limit.
func TestRateLimitsBucket(t *testing.T) {
	r := newRateLimits(1, 3) // one a second: no refill within the test's loop matters
	passed := 0
	var retry time.Duration
	for range 100 {
		ok, d := r.allow("a")
		if !ok {
			retry = d
			break
		}
		passed++
	}
	// Each pass beyond the burst needs a second of the loop's time: the
	// bound is loose under any load.
	if passed < 3 || passed > 10 || retry <= 0 || retry > time.Second {
		t.Errorf("passed %d, then retry after %v", passed, retry)
	}
	if ok, _ := r.allow("b"); !ok {
		t.Error("caller b was refused by a's bucket")
	}
	none := newRateLimits(0, 0)
	for range 1000 {
		if ok, _ := none.allow("a"); !ok {
			t.Fatal("refused without a rate")
		}
	}
}
