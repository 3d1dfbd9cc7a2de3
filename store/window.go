package store

import (
	"cmp"
	"context"
	"errors"
	"time"
)

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
	Logins       int64 `json:"logins,omitempty"` // per_caller logins in progress that expired
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
	r.Logins += o.Logins
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
