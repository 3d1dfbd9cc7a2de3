package gateway

// Budget reads and the operator's budget reset. The reset is an operator
// action: its rules and its one audit event are here, whatever front end
// (CLI, console) asks for it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
)

// Budgets lists the budget used per scope, key and window, as the store
// holds it (shared with every process on the same store), with what
// remains of each quota and when each window resets.
func (g *Gateway) Budgets(ctx context.Context) ([]opsview.BudgetLine, error) {
	usage, err := g.store.BudgetUsage(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading budgets: %w", err)
	}
	now := g.now()
	out := make([]opsview.BudgetLine, 0, len(usage))
	for _, u := range usage {
		out = append(out, lineOf(u, now))
	}
	return out, nil
}

func lineOf(u store.Usage, now time.Time) opsview.BudgetLine {
	l := opsview.BudgetLine{Scope: u.Scope, Key: u.Key, Quota: u.Quota, Used: u.Used, Remaining: max(0, u.Quota-u.Used)}
	if !u.Window.IsZero() {
		l.Per = u.Window.Per.String()
		l.WindowStart, l.ResetsAt = u.Window.Start.UTC(), u.Window.End().UTC()
		l.Ended = !now.Before(l.ResetsAt)
	}
	return l
}

// errBadBudgetReset is wrapped by the *OperatorError of a reset that names
// no operator or an unknown scope (class bad_reset).
var errBadBudgetReset = errors.New("bad budget reset")

// ResetBudget forgets what (scope, key) has used, in every window: an
// operator's action (see isOperator), audited once with what was reset.
// Calls that held budget before the reset give nothing back if they are
// later found not to have run. Refusals are *OperatorError: bad_reset,
// not_operator.
func (g *Gateway) ResetBudget(ctx context.Context, scope, key, operator string) ([]opsview.BudgetLine, error) {
	refuse := func(e *OperatorError) ([]opsview.BudgetLine, error) {
		g.log.Warn("budget", "step", "reset", "outcome", "refused", "scope", scope, "key", key, "by", operator, "reason", e.Class, "error", e.Message)
		return nil, e
	}
	switch {
	case operator == "":
		return refuse(opError("bad_reset", "a budget reset must name the operator who makes it", errBadBudgetReset))
	case scope != string(budget.ScopeCaller) && scope != string(budget.ScopeSession):
		return refuse(opError("bad_reset", fmt.Sprintf("scope %q: caller or session", scope), errBadBudgetReset))
	case !g.isOperator(operator):
		return refuse(opError("not_operator", fmt.Sprintf("%q is not a configured operator", operator), errNotOperator))
	}
	removed, err := g.store.ResetBudget(ctx, scope, key)
	if err != nil {
		g.log.Error("budget", "step", "reset", "outcome", "error", "scope", scope, "key", key, "by", operator, "error", err.Error())
		return nil, fmt.Errorf("resetting budget %s %q: %w", scope, key, err)
	}
	now := g.now()
	lines := make([]opsview.BudgetLine, len(removed))
	var used int64
	for i, u := range removed {
		lines[i] = lineOf(u, now)
		used += u.Used
	}
	g.log.Info("budget", "step", "reset", "outcome", "reset", "scope", scope, "key", key, "by", operator,
		"windows", len(removed), "used", used)
	return lines, nil
}

// budgetDetails are the details of a budget_exceeded error: the figures,
// and for a windowed budget the window and when it resets.
func budgetDetails(be *store.BudgetError) map[string]any {
	d := map[string]any{"scope": be.Scope, "key": be.Key, "used": be.Used, "requested": be.Requested, "quota": be.Quota}
	if !be.Window.IsZero() {
		d["per"] = be.Window.Per.String()
		d["window_start"] = be.Window.Start.UTC().Format(time.RFC3339)
		d["resets_at"] = be.Window.End().UTC().Format(time.RFC3339)
	}
	return d
}
