package gateway

// Retention: pruning what the store no longer needs, by an operator or in
// the background. Each prune is audited once with what it removed.

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// Prune deletes what ended before before (see store.Retention: settled
// intents, expired approvals, finished incarnations, ended budget
// windows; never a started or uncertain intent): an operator's action (see
// isOperator; a refusal is an *OperatorError of class not_operator),
// audited once with what it removed.
func (g *Gateway) Prune(ctx context.Context, before time.Time, operator string) (store.PruneResult, error) {
	if !g.isOperator(operator) {
		g.log.Warn("retention", "step", "prune", "outcome", "refused", "before", before.UTC(), "by", operator, "reason", "not_operator")
		return store.PruneResult{}, opError("not_operator", fmt.Sprintf("%q is not a configured operator", operator), errNotOperator)
	}
	return g.prune(ctx, before, operator)
}

// prune is Prune without the operator check; by is who prunes, "retention"
// for the background pruning.
func (g *Gateway) prune(ctx context.Context, before time.Time, by string) (store.PruneResult, error) {
	r, err := g.store.Prune(ctx, before)
	if err != nil {
		g.log.Error("retention", "step", "prune", "outcome", "error", "before", before.UTC(), "by", by,
			"intents", r.Intents, "error", err.Error())
		return r, fmt.Errorf("pruning before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	g.log.Info("retention", "step", "prune", "outcome", "ok", "before", before.UTC(), "by", by,
		"intents", r.Intents, "reservations", r.Reservations, "approvals", r.Approvals,
		"incarnations", r.Incarnations, "windows", r.Windows, "refusals", r.Refusals, "tasks", r.Tasks, "logins", r.Logins)
	return r, nil
}

// KeepPruning prunes, at once and then every every, what ended more than
// keep ago by the gateway's clock, until ctx ends. A failed prune is
// logged and tried again at the next tick. keep 0 means for ever: it
// returns at once.
func (g *Gateway) KeepPruning(ctx context.Context, keep, every time.Duration) {
	if keep <= 0 || every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		g.prune(ctx, g.now().Add(-keep), "retention")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PageIntents reads the journal a page at a time (see
// store.Retention.PageIntents), for front ends that list a long journal in
// constant memory.
func (g *Gateway) PageIntents(ctx context.Context, f store.IntentFilter, cursor string) (store.IntentPage, error) {
	return g.store.PageIntents(ctx, f, cursor)
}
