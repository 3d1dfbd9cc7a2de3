package opsview

import (
	"time"
)

// BudgetLine is the budget used in one (scope, key, window) as an operator
// reads it.
type BudgetLine struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// Per is the window's length ("" for a budget without windows) and
	// WindowStart its start; ResetsAt is when the window ends and the
	// budget starts afresh (absent without windows: it never resets).
	Per         string    `json:"per,omitempty"`
	WindowStart time.Time `json:"window_start,omitzero"`
	ResetsAt    time.Time `json:"resets_at,omitzero"`
	// Ended is true for a window already over (kept until retention
	// prunes it).
	Ended     bool  `json:"ended,omitempty"`
	Quota     int64 `json:"quota"`
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
}
