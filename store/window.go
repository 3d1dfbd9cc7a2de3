package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
)

// Window is the fixed time window a reservation counts in: [Start,
// Start+Per), aligned to the Unix epoch (Start is a whole multiple of Per
// after 1970-01-01T00:00:00Z). The zero Window is no window: the budget is
// counted for ever, as before windows existed.
//
// Per is a whole number of seconds, at least one (stores keep seconds);
// CheckWindow refuses anything else.
type Window struct {
	Per   time.Duration `json:"per,omitzero"`
	Start time.Time     `json:"start,omitzero"`
}

// MaxWindow bounds a window's length: a window longer than this would
// start at the epoch itself for every call of the next decades, which is
// no window at all.
const MaxWindow = 366 * 24 * time.Hour

// WindowAt returns the window of length per that holds t; the zero Window
// when per is 0.
func WindowAt(per time.Duration, t time.Time) Window {
	if per <= 0 {
		return Window{}
	}
	secs := int64(per / time.Second)
	u := t.Unix()
	start := u - u%secs
	if u < 0 && u%secs != 0 { // floor for instants before the epoch
		start -= secs
	}
	return Window{Per: per, Start: time.Unix(start, 0).UTC()}
}

// IsZero reports whether w is no window.
func (w Window) IsZero() bool { return w.Per == 0 }

// End is when w closes and its budget starts afresh (the next window's
// start); the zero time for no window.
func (w Window) End() time.Time {
	if w.IsZero() {
		return time.Time{}
	}
	return w.Start.Add(w.Per)
}

// CheckWindow reports a window a store cannot keep exactly.
func CheckWindow(w Window) error {
	if w.IsZero() {
		if !w.Start.IsZero() {
			return fmt.Errorf("budget window without a length starts at %v", w.Start)
		}
		return nil
	}
	if w.Per < time.Second || w.Per%time.Second != 0 || w.Per > MaxWindow {
		return fmt.Errorf("budget window of %v: must be whole seconds, from 1s to %v", w.Per, MaxWindow)
	}
	if w.Start.Nanosecond() != 0 || w.Start.Unix()%int64(w.Per/time.Second) != 0 {
		return fmt.Errorf("budget window start %v is not aligned to %v windows since the Unix epoch", w.Start, w.Per)
	}
	return nil
}

// PerSeconds and StartSeconds are the window as stores keep it: 0, 0 for
// no window.
func (w Window) PerSeconds() int64 { return int64(w.Per / time.Second) }

func (w Window) StartSeconds() int64 {
	if w.IsZero() {
		return 0
	}
	return w.Start.Unix()
}

// WindowOf is the inverse of PerSeconds and StartSeconds.
func WindowOf(perSeconds, startSeconds int64) Window {
	if perSeconds <= 0 {
		return Window{}
	}
	return Window{Per: time.Duration(perSeconds) * time.Second, Start: time.Unix(startSeconds, 0).UTC()}
}

// BudgetOps are the operator's actions on budgets.
type BudgetOps interface {
	// ResetBudget forgets what (scope, key) has used, in every window: its
	// usage rows are removed, and the reservations that held it no longer
	// count (a later release of one of them gives nothing back). It returns
	// the usage it removed, empty when there was none.
	ResetBudget(ctx context.Context, scope, key string) ([]Usage, error)
}

// Retention is what keeps a long-lived store bounded and readable.
type Retention interface {
	// Prune deletes what no call or operator needs any more and what ended
	// before before: intents settled (succeeded, failed, executed,
	// not_executed) before it with their reservations; approvals that
	// expired before it; closed or dead incarnations that ended before it
	// and that no remaining intent names; budget windows that ended before
	// it; refusals made before it; tasks whose ExpiresAt is before it. A started or uncertain intent is never
	// pruned, however old.
	// Stores may prune in several transactions; what is pruned is gone
	// (including idempotency keys: a retry of a pruned call's key runs
	// again).
	Prune(ctx context.Context, before time.Time) (PruneResult, error)
	// PageIntents returns one page of the intents f selects, newest commit
	// first, f.Limit at most (default 100), starting after the page whose
	// Next was cursor ("" for the first page). Memory stays that of one
	// page however long the journal; intents committed after the first
	// page was read are not listed by later pages.
	PageIntents(ctx context.Context, f IntentFilter, cursor string) (IntentPage, error)
}

// PruneResult counts what Prune deleted.
type PruneResult struct {
	Intents      int64 `json:"intents"`
	Reservations int64 `json:"reservations"`
	Approvals    int64 `json:"approvals"`
	Incarnations int64 `json:"incarnations"`
	Windows      int64 `json:"windows"`
	Refusals     int64 `json:"refusals"`
	Tasks        int64 `json:"tasks,omitempty"`
}

// Add adds o to r.
func (r *PruneResult) Add(o PruneResult) {
	r.Intents += o.Intents
	r.Reservations += o.Reservations
	r.Approvals += o.Approvals
	r.Incarnations += o.Incarnations
	r.Windows += o.Windows
	r.Refusals += o.Refusals
	r.Tasks += o.Tasks
}

// IntentPage is one page of PageIntents. Next is the cursor of the
// following page, "" when this page is the last.
type IntentPage struct {
	Intents []Intent
	Next    string
}

// ErrBadCursor is returned for a cursor no PageIntents of this store made.
var ErrBadCursor = errors.New("bad journal cursor")

// CompareUsage orders usage as BudgetUsage lists it: by scope, key, window
// length and window start.
func CompareUsage(a, b Usage) int {
	return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Key, b.Key),
		cmp.Compare(a.Window.Per, b.Window.Per), a.Window.Start.Compare(b.Window.Start))
}
