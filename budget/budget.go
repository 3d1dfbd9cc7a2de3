// Package budget plans the reservations one call takes: quotas per scope
// (per caller, per session), optionally per fixed time window (Per: windows
// aligned to the Unix epoch, so every replica agrees on them), and a cost
// per tool. A call counts in the window holding its commit time. The reservation itself is
// made by the store, atomically with the call's durable intent, so a quota is
// never exceeded whatever the concurrency (see store.CommitIntent).
//
// It owns the vocabulary of budgets the store keeps: the [Reservation] a
// call takes and the [Window] it counts in ([WindowAt], [CheckWindow]),
// so that the configuration checks windows and the store records them
// without either depending on the other. It imports nothing of
// Backplane's.
package budget

import (
	"fmt"
	"time"
)

// Scope says what a quota is counted per.
type Scope string

const (
	ScopeCaller  Scope = "caller"
	ScopeSession Scope = "session"
)

// Quota limits the total cost of calls per scope key.
type Quota struct {
	Scope Scope `json:"scope" yaml:"scope"`
	Quota int64 `json:"quota" yaml:"quota"`
	// Cost maps tool names to their cost. Every key is a tool name, so a
	// tool named "default" is one like any other.
	Cost map[string]int64 `json:"cost,omitempty" yaml:"cost"`
	// Default is the cost of a tool Cost does not list; nil means 1. (The
	// configuration's `cost: {default: N}` is parsed into it; see config.)
	Default *int64 `json:"default_cost,omitempty" yaml:"default_cost"`
	// Per is the length of the windows the quota applies to (whole
	// seconds, at most MaxWindow); 0 means no window: the quota is
	// for ever.
	Per time.Duration `json:"per,omitempty" yaml:"per"`
}

// CostOf returns the cost of one call of tool under q.
func (q Quota) CostOf(tool string) int64 {
	if c, ok := q.Cost[tool]; ok {
		return c
	}
	if q.Default != nil {
		return *q.Default
	}
	return 1
}

// Check reports a quota that cannot work.
func (q Quota) Check() error {
	if q.Scope != ScopeCaller && q.Scope != ScopeSession {
		return fmt.Errorf("budget scope %q: must be caller or session", q.Scope)
	}
	if q.Quota < 0 {
		return fmt.Errorf("budget quota %d: must not be negative", q.Quota)
	}
	if q.Default != nil && *q.Default < 0 {
		return fmt.Errorf("budget default cost is %d: must not be negative", *q.Default)
	}
	if q.Per != 0 {
		if err := CheckWindow(Window{Per: q.Per, Start: time.Unix(0, 0)}); err != nil {
			return fmt.Errorf("budget per %v: must be whole seconds, from 1s to %v", q.Per, MaxWindow)
		}
	}
	for tool, c := range q.Cost {
		if c < 0 {
			return fmt.Errorf("budget cost of %s is %d: must not be negative", tool, c)
		}
	}
	return nil
}

// Plan returns the reservations one call of tool by caller in session,
// committed at at, takes. A call without a session counts against the
// session key "" (one shared bucket), so leaving out the session id is no
// way around a session quota.
func Plan(quotas []Quota, caller, session, tool string, at time.Time) []Reservation {
	var out []Reservation
	for _, q := range quotas {
		key := caller
		if q.Scope == ScopeSession {
			key = session
		}
		out = append(out, Reservation{Scope: string(q.Scope), Key: key, Quota: q.Quota, Amount: q.CostOf(tool),
			Window: WindowAt(q.Per, at)})
	}
	return out
}
