package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/spf13/cobra"
)

func newJournalPruneCmd(f *gatewayFlags) *cobra.Command {
	var before, as string
	cmd := &cobra.Command{
		Use:   "prune --before DATE|AGE",
		Short: "Delete what ended before a date (settled intents, expired approvals, old budget windows)",
		Long: `Prune deletes what ended before DATE: intents settled before it (succeeded,
failed, executed, not executed) with their reservations, approval requests
that expired before it, closed gateway incarnations and budget windows that
ended before it. A started or uncertain intent is never deleted, however
old. A pruned call's idempotency key can be used again. The space is given
back to the file system (SQLite). backplane serve does the same in the
background by the configuration's retention (default: 30 days).

DATE is 2026-01-31 (midnight UTC) or 2026-01-31T12:00:00Z (RFC 3339); AGE
is how long ago, 30d or 12h. The prune is an operator action, written to
the audit log with who made it: with operators configured, the owner of
the operator token (BACKPLANE_OPERATOR_TOKEN or --operator-token-file),
which is required; without, --as (default the login name). The OS user
is recorded too.

With --json the answer is {"ok":true,"before","intents","reservations",
"approvals","incarnations","windows"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if before == "" {
				return errors.New("--before DATE|AGE is required")
			}
			now := time.Now()
			cut, err := parseBefore(before, now)
			if err != nil {
				return err
			}
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			if as, err = s.operator(as); err != nil {
				return err
			}
			r, err := s.rt.Gateway.Prune(cmd.Context(), cut, as)
			var oe *gateway.OperatorError
			if errors.As(err, &oe) {
				return negative(cmd.OutOrStdout(), f.asJSON, oe.Class, oe.Message)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if f.asJSON {
				return writeJSONLine(out, struct {
					OK     bool      `json:"ok"`
					Before time.Time `json:"before"`
					store.PruneResult
				}{true, cut.UTC(), r})
			}
			_, err = fmt.Fprintf(out, "ok: pruned before %s: %d intents, %d reservations, %d approvals, %d tasks, %d incarnations, %d budget windows, %d refusals, %d expired logins\n",
				cut.UTC().Format(time.RFC3339), r.Intents, r.Reservations, r.Approvals, r.Tasks, r.Incarnations, r.Windows, r.Refusals, r.Logins)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&before, "before", "", "prune what ended before this date (2026-01-31, RFC 3339) or this long ago (30d, 12h)")
	addOperatorFlags(cmd, f, &as, "who prunes: with operators configured, only a check of the token's owner (default: the login name)")
	return cmd
}

// parseBefore reads --before: a date, an RFC 3339 time, or an age (30d,
// 12h) before now. A time after now is refused: it would prune calls that
// have not happened yet by the operator's clock, surely a mistake.
func parseBefore(s string, now time.Time) (time.Time, error) {
	var t time.Time
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 100*365 {
			return time.Time{}, fmt.Errorf("--before %q: write a date (2026-01-31), a time (RFC 3339) or an age (30d, 12h)", s)
		}
		t = now.Add(-time.Duration(n) * 24 * time.Hour)
	} else if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--before %q: an age must not be negative", s)
		}
		t = now.Add(-d)
	} else if t, err = time.Parse(time.DateOnly, s); err != nil {
		if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return time.Time{}, fmt.Errorf("--before %q: write a date (2026-01-31), a time (RFC 3339) or an age (30d, 12h)", s)
		}
	}
	if t.After(now) {
		return time.Time{}, fmt.Errorf("--before %s is in the future", t.UTC().Format(time.RFC3339))
	}
	return t, nil
}
