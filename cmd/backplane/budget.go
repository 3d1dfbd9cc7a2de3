package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/agentbackplane/backplane/budget"
	"github.com/spf13/cobra"
)

func newBudgetCmd() *cobra.Command {
	f := gatewayFlags{storeOnly: true}
	cmd := groupCmd("budget", "Show budget quotas and what calls hold of them",
		`Budgets limit the total cost of calls per caller or per session. A call
reserves its cost when its intent is recorded; the reservation is released
only when the call proves not to have run (failed), or an operator resolves
an uncertain call as not executed.`)
	addGatewayFlags(cmd, &f)
	cmd.AddCommand(newBudgetShowCmd(&f))
	return cmd
}

// budgetLine is one (scope, key) as "budget show" prints it.
type budgetLine struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// Quota is the configured quota of the scope; null when the
	// configuration no longer has one (the budget was held under an older
	// configuration).
	Quota *int64 `json:"quota"`
	Used  int64  `json:"used"`
}

func newBudgetShowCmd(f *gatewayFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the budget used per scope and key, against its quota",
		Long: `Show prints, for each scope (caller or session) and key (the caller name or
the session id) that holds budget, the configured quota and the amount used.
The configured quotas are listed as well, used or not.

With --json the answer is {"budgets":[{"scope","key","quota","used"}],
"quotas":[{"scope","quota","cost"}]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			usage, err := s.rt.Gateway.BudgetUsage(cmd.Context())
			if err != nil {
				return fmt.Errorf("reading budgets: %w", err)
			}
			quotas := configuredQuotas(s)
			lines := make([]budgetLine, 0, len(usage))
			for _, u := range usage {
				l := budgetLine{Scope: u.Scope, Key: u.Key, Used: u.Used}
				for _, q := range quotas {
					if string(q.Scope) == u.Scope {
						l.Quota = &q.Quota
						break
					}
				}
				lines = append(lines, l)
			}
			out := cmd.OutOrStdout()
			if f.asJSON {
				if quotas == nil {
					quotas = []budget.Quota{}
				}
				return writeJSONLine(out, struct {
					Budgets []budgetLine   `json:"budgets"`
					Quotas  []budget.Quota `json:"quotas"`
				}{lines, quotas})
			}
			if len(quotas) == 0 {
				fmt.Fprintln(out, "no budgets are configured")
			}
			if len(lines) == 0 {
				if len(quotas) > 0 {
					fmt.Fprintln(out, "no budget is used yet")
				}
			} else {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SCOPE\tKEY\tQUOTA\tUSED")
				for _, l := range lines {
					quota := "-"
					if l.Quota != nil {
						quota = strconv.FormatInt(*l.Quota, 10)
					}
					key := l.Key
					if key == "" {
						key = `""`
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", l.Scope, key, quota, l.Used)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			for _, q := range quotas {
				fmt.Fprintf(out, "quota: %s %d per key, cost %s\n", q.Scope, q.Quota, costText(q))
			}
			return nil
		},
	}
}

// configuredQuotas are the quotas of the loaded configuration.
func configuredQuotas(s *gatewaySession) []budget.Quota {
	return s.rt.Config.Budgets
}

func costText(q budget.Quota) string {
	if len(q.Cost) == 0 {
		return "1 per call"
	}
	return fmt.Sprint(q.Cost)
}
