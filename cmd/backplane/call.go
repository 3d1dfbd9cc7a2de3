package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/tool"
	"github.com/spf13/cobra"
)

// maxCallInput bounds what "call -" reads from stdin. It is well above the
// validator's default argument limit, so that oversized arguments reach the
// gateway and are refused there, as class validation, like any other call.
const maxCallInput = 64 << 20

func newCallCmd() *cobra.Command {
	var (
		f                    gatewayFlags
		caller, session, key string
		wait                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "call --caller NAME [--session ID] [--idempotency-key K] [--wait DURATION] TOOL [ARGS|-]",
		Short: "Run one tool call through the gateway's whole pipeline",
		Long: `Call runs one call of TOOL through the configured gateway: lookup,
validation of the arguments, authorization, approval, budget reservation, the
durable intent, then the tool's backend. ARGS is the JSON text of the
arguments, or "-" to read it from stdin; it is passed on byte for byte.
Without ARGS the arguments are {} (the tool's schema decides whether that is
enough). An unknown tool is answered with the closest names the caller may
call.

Exit 0 when the tool ran and returned a result; exit 1 when the call was
refused, its outcome is a failure, or the tool itself reported an error (its
result is printed all the same, with is_error set); exit 2 for a usage or
configuration error.

With --json the answer is one line:
  {"ok":true,"call_id":"...","result":<the tool's result>}
  {"ok":false,"call_id":"..."|null,"error":{"class":"...","message":"...",...}}
call_id is null when the call was refused before its intent was recorded.
The error object carries class, message, step, tool, details (for example
details.approval_id of an approval_required call) and, for a validation
failure, every violation in errors.

An approval the policy demands is requested and the call returns at once
with approval_required, unless --wait (or approvals.wait in the
configuration) lets it wait for a decision, made with "backplane approvals
approve" from another terminal.

Audit events (one JSON object per line, argument digests only, never their
values) are appended to the configuration's log.file, or else to audit.log
in the store folder; --audit-log names another file, or "-" for stderr.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if caller == "" {
				return errors.New("--caller is required")
			}
			toolName, argText := args[0], "{}"
			if len(args) == 2 {
				argText = args[1]
			}
			var data []byte
			if argText == "-" {
				var err error
				if data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxCallInput+1)); err != nil {
					return inputErrorf("reading stdin: %v", err)
				}
				if len(data) > maxCallInput {
					return inputErrorf("the arguments on stdin are over %d bytes", maxCallInput)
				}
			} else {
				data = []byte(argText)
			}
			// An interrupt cancels the call: the gateway settles it (cancelled
			// or uncertain) instead of leaving it started.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := f.open(ctx, cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			req := gateway.CallRequest{Caller: caller, Session: session, Tool: toolName, Arguments: data, IdempotencyKey: key}
			if cmd.Flags().Changed("wait") {
				req.ApprovalWait = &wait
			}
			res, err := s.rt.Gateway.Call(ctx, req)
			var ge *gateway.Error
			if errors.As(err, &ge) && ge.Class == tool.ClassNotFound {
				suggestUnknownTool(ge, toolName, s.rt.Gateway.ToolsFor(caller))
			}
			return reportCall(cmd.OutOrStdout(), f.asJSON, res, err)
		},
	}
	addGatewayFlags(cmd, &f)
	f.interactive = true // ask_user_question may prompt on the terminal
	fl := cmd.Flags()
	fl.StringVar(&caller, "caller", "", "who calls (the policy's caller name) (required)")
	fl.StringVar(&session, "session", "", "the session id, for session budgets")
	fl.StringVar(&key, "idempotency-key", "", "repeat-safe key: a repeated call returns the recorded outcome")
	fl.DurationVar(&wait, "wait", 0, "how long to wait for an approval decision (default: approvals.wait of the configuration; at most 50s)")
	return cmd
}

// callReport is the --json answer of "call".
type callReport struct {
	OK       bool            `json:"ok"`
	CallID   *string         `json:"call_id"`
	Result   json.RawMessage `json:"result,omitempty"`
	IsError  bool            `json:"is_error,omitempty"`
	Replayed bool            `json:"replayed,omitempty"`
	Error    *gateway.Error  `json:"error,omitempty"`
}

// reportCall prints the outcome of a call and returns errNegative when it
// was refused or failed.
func reportCall(out io.Writer, asJSON bool, res *gateway.CallResult, err error) error {
	if err != nil {
		var ge *gateway.Error
		if !errors.As(err, &ge) {
			// Call promises a *gateway.Error; anything else is a bug there,
			// reported as such rather than dressed up as a verdict.
			return fmt.Errorf("unexpected error from the gateway: %w", err)
		}
		if asJSON {
			r := callReport{Error: ge}
			if ge.CallID != "" {
				r.CallID = &ge.CallID
			}
			if werr := writeJSONLine(out, r); werr != nil {
				return werr
			}
			return errNegative
		}
		writeCallError(out, ge)
		return errNegative
	}
	if asJSON {
		if err := writeJSONLine(out, callReport{OK: true, CallID: &res.CallID, Result: res.Result, IsError: res.IsError, Replayed: res.Replayed}); err != nil {
			return err
		}
		if res.IsError {
			return errNegative // the tool reported an error: scripts must see it
		}
		return nil
	}
	head := "ok"
	if res.IsError {
		head = "ok (the tool reports an error)"
	}
	if res.Replayed {
		head += ", replayed from the journal"
	}
	fmt.Fprintf(out, "%s: call %s\n%s\n", head, termtext.Line(res.CallID), termtext.JSON(res.Result))
	if res.IsError {
		return errNegative
	}
	return nil
}

// writeCallError writes a refused or failed call for people: the class and
// message, what identifies the call, every violation with its path, and the
// remaining details.
func writeCallError(out io.Writer, e *gateway.Error) {
	// A violation's message may already start with its class.
	fmt.Fprintf(out, "%s: %s\n", e.Class, termtext.Block(strings.TrimPrefix(e.Message, string(e.Class)+": ")))
	field := func(label, value string) {
		fmt.Fprintf(out, "  %-12s %s\n", label+":", termtext.Block(value))
	}
	if e.Tool != "" {
		field("tool", e.Tool)
	}
	field("step", e.Step)
	if e.CallID != "" {
		field("call id", e.CallID)
	}
	if len(e.Errors) > 0 {
		fmt.Fprintf(out, "  %s:\n", plural(len(e.Errors), "violation"))
		for _, v := range e.Errors {
			path := v.Path
			if path == "" {
				path = "$arguments"
			}
			L := termtext.Line
			fmt.Fprintf(out, "    %s: %s (%s, keyword %s)\n", L(path), L(v.Message), v.Class, L(orDash(v.Keyword)))
		}
	}
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field(strings.ReplaceAll(k, "_", " "), humanValue(e.Details[k], "    "))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
