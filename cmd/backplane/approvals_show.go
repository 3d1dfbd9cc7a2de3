package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
)

func newApprovalsShowCmd(f *gatewayFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show what an approval request would let run",
		Long: `Show prints one approval request as the person deciding it needs it: the
caller, the tool and its description, the full arguments, for write and edit
a unified diff against the file as it is now, for bash the command, when it
expires, and how to decide it. Exit 1 when there is no such request.

With --json the answer is the request with "description", "arguments",
"preview" {"diff","command"} and "how_to_decide".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			v, err := s.rt.Gateway.GetApproval(cmd.Context(), args[0])
			if errors.Is(err, store.ErrNotFound) {
				return negative(out, f.asJSON, "not_found", fmt.Sprintf("no approval request %s", args[0]))
			}
			if err != nil {
				return fmt.Errorf("reading approval %s: %w", args[0], err)
			}
			if f.asJSON {
				return writeJSONLine(out, v)
			}
			writeApprovalView(out, v)
			return nil
		},
	}
}

func writeApprovalView(out io.Writer, v *opsview.Approval) {
	field := func(label, value string) {
		if value != "" {
			fmt.Fprintf(out, "%-12s %s\n", label+":", termtext.Line(value))
		}
	}
	field("request", v.ID)
	field("status", string(v.Status))
	field("caller", v.Caller)
	field("session", v.Session)
	field("tool", v.Tool)
	field("definition", v.DefinitionHash)
	// What the path argument led to when the call asked: the request is
	// good for that file only (a link swapped since is refused).
	field("resolves to", v.ResolvedPath)
	field("created", v.CreatedAt.UTC().Format(time.RFC3339))
	field("expires", v.ExpiresAt.UTC().Format(time.RFC3339))
	field("decided by", v.DecidedBy)
	field("channel", v.Channel)
	field("reason", v.Reason)
	field("used by", v.ConsumedBy)
	if len(v.Approvers) > 0 {
		field("approvers", strings.Join(v.Approvers, ", "))
	}
	if v.SelfApprove {
		field("self-approve", "the caller's own client may decide (policy self_approve)")
	}
	if v.Description != "" {
		fmt.Fprintf(out, "\ndescription:\n%s\n", indent(termtext.Block(v.Description)))
	}
	if len(v.Arguments) > 0 {
		// JSON's own escapes (\u001b) keep the arguments JSON.
		fmt.Fprintf(out, "\narguments:\n%s\n", indent(string(termtext.JSON(v.Arguments))))
	}
	if v.Preview != nil && v.Preview.Command != "" {
		fmt.Fprintf(out, "\ncommand:\n%s\n", indent(termtext.Block(v.Preview.Command)))
	}
	if v.Preview != nil && v.Preview.Diff != "" {
		diff := termtext.Block(v.Preview.Diff)
		fmt.Fprintf(out, "\ndiff:\n%s", diff)
		if !strings.HasSuffix(diff, "\n") {
			fmt.Fprintln(out)
		}
	}
	if v.PreviewError != "" {
		fmt.Fprintf(out, "\nno preview: %s\n", termtext.Block(v.PreviewError))
	}
	if len(v.HowToDecide) > 0 {
		fmt.Fprintf(out, "\nto decide:\n")
		for _, h := range v.HowToDecide {
			fmt.Fprintf(out, "  %s\n", termtext.Line(h))
		}
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
