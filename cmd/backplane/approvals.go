package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/store"
	"github.com/spf13/cobra"
)

func newApprovalsCmd() *cobra.Command {
	f := gatewayFlags{storeOnly: true}
	cmd := groupCmd("approvals", "List, approve and deny approval requests",
		`A call the policy (or the tool's requires_approval flag) puts under approval
creates a request bound to that exact call: the caller, the tool and its
definition, and the digest of the arguments. Someone other than the caller
approves or denies it before it expires; an approval is used by one call,
the same call made again.`)
	addGatewayFlags(cmd, &f)
	cmd.AddCommand(newApprovalsListCmd(&f), newApprovalsShowCmd(&f), newApprovalDecideCmd(&f, true), newApprovalDecideCmd(&f, false))
	return cmd
}

// approvalEntry is one request as "approvals list" prints it.
type approvalEntry struct {
	ID         string               `json:"id"`
	Caller     string               `json:"caller"`
	Session    string               `json:"session,omitempty"`
	Tool       string               `json:"tool"`
	ArgsDigest string               `json:"args_digest"`
	Status     store.ApprovalStatus `json:"status"`
	DecidedBy  string               `json:"decided_by,omitempty"`
	Channel    string               `json:"channel,omitempty"`
	Reason     string               `json:"reason,omitempty"`
	ConsumedBy string               `json:"consumed_by,omitempty"`
	CreatedAt  time.Time            `json:"created_at"`
	ExpiresAt  time.Time            `json:"expires_at"`
}

var approvalStatuses = []store.ApprovalStatus{
	store.ApprovalPending, store.ApprovalApproved, store.ApprovalDenied, store.ApprovalExpired,
}

func newApprovalsListCmd(f *gatewayFlags) *cobra.Command {
	var (
		status string
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "list [--status S]",
		Short: "List approval requests, newest first",
		Long: `List prints approval requests, newest first: id, caller, tool, the digest
of the arguments, status (pending, approved, denied, expired) and when the
request expires. A consumed approval names the call that used it.

With --json the answer is {"approvals":[{"id","caller","tool","args_digest",
"status","expires_at",...}]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st := store.ApprovalStatus(status)
			if st != "" && !contains(approvalStatuses, st) {
				return fmt.Errorf("--status %q: want one of %s", status, joinStatuses(approvalStatuses))
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative", limit)
			}
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			list, err := s.rt.Gateway.ListApprovals(cmd.Context(), store.ApprovalFilter{Status: st, Limit: limit})
			if err != nil {
				return fmt.Errorf("reading approvals: %w", err)
			}
			entries := make([]approvalEntry, len(list))
			for i, a := range list {
				entries[i] = approvalEntry{
					ID: a.ID, Caller: a.Caller, Session: a.Session, Tool: a.Tool, ArgsDigest: a.ArgsDigest,
					Status: a.Status, DecidedBy: a.DecidedBy, Channel: a.Channel, Reason: a.Reason, ConsumedBy: a.ConsumedBy,
					CreatedAt: a.CreatedAt.UTC(), ExpiresAt: a.ExpiresAt.UTC(),
				}
			}
			out := cmd.OutOrStdout()
			if f.asJSON {
				return writeJSONLine(out, struct {
					Approvals []approvalEntry `json:"approvals"`
				}{entries})
			}
			if len(entries) == 0 {
				_, err := fmt.Fprintln(out, "no approval requests")
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCALLER\tTOOL\tARGS DIGEST\tSTATUS\tEXPIRES\tDECIDED BY\tUSED BY")
			for _, e := range entries {
				L := termtext.Line
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", L(e.ID), L(e.Caller), L(e.Tool),
					L(e.ArgsDigest[:min(12, len(e.ArgsDigest))]), L(string(e.Status)), e.ExpiresAt.Format(time.RFC3339),
					L(orDash(e.DecidedBy)), L(orDash(e.ConsumedBy)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only requests in this status: "+joinStatuses(approvalStatuses))
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many requests")
	return cmd
}

// newApprovalDecideCmd builds "approvals approve" or "approvals deny".
func newApprovalDecideCmd(f *gatewayFlags, approve bool) *cobra.Command {
	var as, reason string
	verb, done := "deny", "denied"
	if approve {
		verb, done = "approve", "approved"
	}
	cmd := &cobra.Command{
		Use:   verb + " ID [--as OPERATOR] [--reason TEXT]",
		Short: fmt.Sprintf("%s a pending approval request", map[bool]string{true: "Approve", false: "Deny"}[approve]),
		Long: fmt.Sprintf(`%s decides a pending approval request as an operator. When the
configuration lists operators, the operator's token is required, in
BACKPLANE_OPERATOR_TOKEN or a file named by --operator-token-file: the
decision is recorded as the token's owner (--as, if given, must be the
same), and the audit event also names the OS user who ran the command.
Without operators, --as names who decides (required).
The caller cannot decide its own request, the policy may restrict who
decides (approvers), and a request already decided or expired cannot be
decided again. Exit 1, with the reason, when the decision is refused.`, verb),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			if as == "" && len(s.rt.Config.Operators) == 0 {
				// No operator to authenticate: the decider names
				// themselves, never by default.
				return &inputError{errors.New("--as OPERATOR is required: the decision records who made it")}
			}
			who, err := s.operator(as)
			if err != nil {
				return err
			}
			id := args[0]
			_, err = s.rt.Gateway.DecideApproval(cmd.Context(), id, gateway.ApprovalDecision{
				Operator: who, Approve: approve, Reason: reason, Channel: gateway.ChannelCLI})
			var oe *gateway.OperatorError
			if errors.As(err, &oe) {
				return negative(out, f.asJSON, oe.Class, oe.Message)
			}
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSONLine(out, struct {
					OK        bool   `json:"ok"`
					ID        string `json:"id"`
					Status    string `json:"status"`
					DecidedBy string `json:"decided_by"`
				}{true, id, done, who})
			}
			_, err = fmt.Fprintf(out, "ok: approval %s %s by %s\n", termtext.Line(id), done, termtext.Line(who))
			return err
		},
	}
	addOperatorFlags(cmd, f, &as, "the operator who decides: with operators configured, only a check of the token's owner (without operators: required, any name)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the decision and told to the caller")
	return cmd
}
