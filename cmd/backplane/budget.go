package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/spf13/cobra"
)

func newBudgetCmd() *cobra.Command {
	f := gatewayFlags{storeOnly: true}
	cmd := groupCmd("budget", "Show budget quotas and what calls hold of them",
		`Budgets limit the total cost of calls per caller or per session, for ever or
per fixed window (per: 1h, windows aligned to the Unix epoch). A call
reserves its cost in the window in which it is committed; the reservation is
released only when the call proves not to have run (failed), or an operator
resolves an uncertain call as not executed. An operator can reset a key's
budget (budget reset).`)
	addGatewayFlags(cmd, &f)
	cmd.AddCommand(newBudgetShowCmd(&f), newBudgetResetCmd(&f))
	return cmd
}

func newBudgetShowCmd(f *gatewayFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the budget used per scope, key and window, against its quota",
		Long: `Show prints, for each scope (caller or session), key (the caller name or
the session id) and window that holds budget, the quota in force, the amount
used, what remains and when the window resets. Windows that have ended are
marked so until retention prunes them. The configured quotas are listed as
well, used or not.

With --json the answer is {"budgets":[{"scope","key","per","window_start",
"resets_at","ended","quota","used","remaining"}],"quotas":[{"scope","quota",
"cost","per"}]}; per, window_start and resets_at are absent for a budget
without windows (it never resets).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			lines, err := s.rt.Gateway.Budgets(cmd.Context())
			if err != nil {
				return err
			}
			quotas := s.rt.Config.Budgets
			out := cmd.OutOrStdout()
			if f.asJSON {
				if quotas == nil {
					quotas = []budget.Quota{}
				}
				return writeJSONLine(out, struct {
					Budgets []opsview.BudgetLine `json:"budgets"`
					Quotas  []budget.Quota       `json:"quotas"`
				}{lines, quotas})
			}
			if len(quotas) == 0 {
				fmt.Fprintln(out, "no budgets are configured")
			}
			if len(lines) == 0 {
				if len(quotas) > 0 {
					fmt.Fprintln(out, "no budget is used yet")
				}
			} else if err := budgetTable(out, lines); err != nil {
				return err
			}
			for _, q := range quotas {
				per := "per key"
				if q.Per != 0 {
					per = "per key per " + humanDuration(q.Per)
				}
				fmt.Fprintf(out, "quota: %s %d %s, cost %s\n", q.Scope, q.Quota, per, costText(q))
			}
			return nil
		},
	}
}

func budgetTable(out io.Writer, lines []opsview.BudgetLine) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tKEY\tWINDOW\tQUOTA\tUSED\tREMAINING\tRESETS")
	for _, l := range lines {
		key := l.Key
		if key == "" {
			key = `""`
		}
		window, resets := "-", "never"
		if l.Per != "" {
			per := l.Per
			if d, err := time.ParseDuration(per); err == nil {
				per = humanDuration(d)
			}
			window = per + " from " + l.WindowStart.Format(time.RFC3339)
			resets = l.ResetsAt.Format(time.RFC3339)
			if l.Ended {
				resets += " (ended)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", termtext.Line(l.Scope), termtext.Line(key), window, l.Quota, l.Used, l.Remaining, resets)
	}
	return tw.Flush()
}

func newBudgetResetCmd(f *gatewayFlags) *cobra.Command {
	var scope, key, as string
	cmd := &cobra.Command{
		Use:   "reset --scope caller|session --key KEY [--as NAME]",
		Short: "Forget what a caller or session has used (an audited operator action)",
		Long: `Reset forgets the budget a caller or a session has used, in every window,
so its calls are accepted again at once. Calls that held budget before the
reset give nothing back if they are later found not to have run. The reset
is written to the audit log with who made it and what it removed: with
operators configured, the owner of the operator token
(BACKPLANE_OPERATOR_TOKEN or --operator-token-file), which is required;
without, --as (default the login name). The OS user is recorded too.

With --json the answer is {"ok":true,"scope","key","reset_by","removed":[budget
lines as in budget show]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if scope == "" || !cmd.Flags().Changed("key") {
				return errors.New("say which budget: --scope caller|session and --key KEY")
			}
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			if as, err = s.operator(as); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			removed, err := s.rt.Gateway.ResetBudget(cmd.Context(), scope, key, as)
			var oe *gateway.OperatorError
			if errors.As(err, &oe) {
				return negative(out, f.asJSON, oe.Class, oe.Message)
			}
			if err != nil {
				return err
			}
			if f.asJSON {
				if removed == nil {
					removed = []opsview.BudgetLine{}
				}
				return writeJSONLine(out, struct {
					OK      bool                 `json:"ok"`
					Scope   string               `json:"scope"`
					Key     string               `json:"key"`
					ResetBy string               `json:"reset_by"`
					Removed []opsview.BudgetLine `json:"removed"`
				}{true, scope, key, as, removed})
			}
			if len(removed) == 0 {
				_, err := fmt.Fprintf(out, "ok: %s %q held no budget; nothing to reset\n", termtext.Line(scope), key)
				return err
			}
			fmt.Fprintf(out, "ok: budget of %s %q reset by %s; it held:\n", termtext.Line(scope), key, termtext.Line(as))
			return budgetTable(out, removed)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&scope, "scope", "", "caller or session")
	fl.StringVar(&key, "key", "", `the caller name or session id ("" is the calls without a session)`)
	addOperatorFlags(cmd, f, &as, "who resets: with operators configured, only a check of the token's owner (default: the login name)")
	return cmd
}

// costText says what a call costs under q, for people: "bash 5, every
// other tool 1" (never Go's map syntax).
func costText(q budget.Quota) string {
	def := int64(1)
	if q.Default != nil {
		def = *q.Default
	}
	if len(q.Cost) == 0 {
		return fmt.Sprintf("%d per call", def)
	}
	tools := make([]string, 0, len(q.Cost))
	for t := range q.Cost {
		tools = append(tools, t)
	}
	sort.Strings(tools)
	parts := make([]string, 0, len(tools)+1)
	for _, t := range tools {
		parts = append(parts, fmt.Sprintf("%s %d", t, q.Cost[t]))
	}
	return strings.Join(append(parts, fmt.Sprintf("every other tool %d", def)), ", ")
}
