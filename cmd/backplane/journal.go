package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
	"github.com/spf13/cobra"
)

func newJournalCmd() *cobra.Command {
	f := gatewayFlags{storeOnly: true}
	cmd := groupCmd("journal", "List, show and resolve the gateway's call intents",
		`The journal holds one intent per call that passed every check: it is written
and synced before the tool runs. An intent is started while its call runs,
then succeeded, failed (proven not to have run; its budget is released) or
uncertain (its outcome is unknown: a timeout, a crash, an unreadable result).
An uncertain call is never re-run by the gateway; an operator finds out what
happened and resolves it as executed or not executed (which releases its
budget).

Opening the journal (any command, "journal list" included) first marks as
uncertain the started intents of gateway processes that are no longer alive.`)
	addGatewayFlags(cmd, &f)
	cmd.AddCommand(newJournalListCmd(&f), newJournalShowCmd(&f), newJournalResolveCmd(&f), newJournalPruneCmd(&f))
	return cmd
}

// journalEntry is one intent as "journal list" prints it.
type journalEntry struct {
	CallID     string       `json:"call_id"`
	Tool       string       `json:"tool"`
	Caller     string       `json:"caller"`
	Session    string       `json:"session,omitempty"`
	Status     store.Status `json:"status"`
	ArgsDigest string       `json:"args_digest"`
	ErrorClass string       `json:"error_class,omitempty"`
	// ToolError is set on a succeeded intent whose tool reported an error
	// (its result has is_error): it ran, and failed by its own account.
	ToolError bool `json:"tool_error,omitempty"`
	// ResultRefused is set on a succeeded intent whose structured result
	// broke its tool's output schema (error_class invalid_result): the
	// tool ran, and the caller was refused its result.
	ResultRefused bool       `json:"result_refused,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	SettledAt     *time.Time `json:"settled_at"` // null while started
}

// resultRefused is what the journal's status "succeeded" means for a call
// settled with class invalid_result, in plain words: "succeeded" there
// says the tool ran (its budget stays spent; "failed" would say it
// provably did not), not that the caller got its result.
const resultRefused = "ran; result refused: invalid_result"

// isResultRefused reports whether in ran and its result was refused.
func isResultRefused(in *store.Intent) bool {
	return in.Status == store.StatusSucceeded && in.ErrorClass == string(tool.ClassInvalidResult)
}

func entryOf(in *store.Intent) journalEntry {
	e := journalEntry{
		CallID: in.CallID, Tool: in.Tool, Caller: in.Caller, Session: in.Session, Status: in.Status,
		ArgsDigest: in.ArgsDigest, ErrorClass: in.ErrorClass, CreatedAt: in.CreatedAt.UTC(),
		ToolError: opsview.ToolReportedError(in), ResultRefused: isResultRefused(in),
	}
	if !in.SettledAt.IsZero() {
		t := in.SettledAt.UTC()
		e.SettledAt = &t
	}
	return e
}

var intentStatuses = []store.Status{
	store.StatusStarted, store.StatusSucceeded, store.StatusFailed, store.StatusUncertain,
	store.StatusExecuted, store.StatusNotExecuted,
}

// listPage is how many intents journal list reads from the store at a
// time: what it holds in memory, however long the journal.
const listPage = 500

func newJournalListCmd(f *gatewayFlags) *cobra.Command {
	var (
		status, caller, tool string
		limit                int
		all                  bool
	)
	cmd := &cobra.Command{
		Use:   "list [--status S] [--limit N]",
		Short: "List intents, newest first",
		Long: `List prints the journal's intents, newest first: call id, tool, caller,
status, the digest of the arguments (never their values), when the intent
was created and when it settled. A call that ran and whose tool reported an
error is listed as "succeeded (tool_error)"; --status tool_error lists only
those. A call whose result broke its tool's output schema is listed as
"ran; result refused: invalid_result": the journal's status is succeeded
(the tool ran and its budget stays spent; failed means it provably did not
run), but the caller got invalid_result, not the result (journal show has
the result as the tool answered it; --status succeeded lists these too). --limit 0 lists the whole journal; it is read and written a page at
a time, so memory stays small however long the journal is.

With --all the calls refused before they were journaled are listed too,
merged by time (status "refused (CLASS)": unknown tool, invalid arguments,
denied, approval required, budget exceeded), from every replica's store;
--status refused lists only those. --caller and --tool then take globs
("fs.*"). It reads the newest 20,000 rows of each kind at most.

With --json the answer is {"intents":[{"call_id","tool","caller","status",
"args_digest","created_at","settled_at","tool_error",...}]}; settled_at is
null while an intent is started (and for a refusal, whose status is
"refused" and error_class its class); tool_error is true for a
tool-reported error, result_refused for a result refused as invalid_result.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if status == opsview.StatusRefused {
				all = true
			}
			if all {
				return listJournalAll(cmd, f, opsview.JournalQuery{Status: status, Caller: caller, Tool: tool}, limit)
			}
			st := store.Status(status)
			toolErrors := status == "tool_error"
			if toolErrors {
				st = store.StatusSucceeded
			}
			if st != "" && !contains(intentStatuses, st) {
				return fmt.Errorf("--status %q: want one of %s, tool_error", status, joinStatuses(intentStatuses))
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative", limit)
			}
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			w := newJournalWriter(cmd.OutOrStdout(), f.asJSON)
			cursor, left := "", limit
			for {
				n := listPage
				if limit > 0 && !toolErrors {
					n = min(n, left)
				}
				p, err := s.rt.Gateway.PageIntents(cmd.Context(), store.IntentFilter{Status: st, Caller: caller, Tool: tool, Limit: n}, cursor)
				if err != nil {
					return fmt.Errorf("reading the journal: %w", err)
				}
				page := p.Intents
				if toolErrors {
					// Tool errors are succeeded intents whose recorded result
					// says so: filtered here, page by page.
					page = slices.DeleteFunc(page, func(in store.Intent) bool { return !opsview.ToolReportedError(&in) })
				}
				if limit > 0 && len(page) > left {
					page = page[:left]
				}
				if err := w.page(page); err != nil {
					return err
				}
				left -= len(page)
				if p.Next == "" || (limit > 0 && left <= 0) {
					break
				}
				cursor = p.Next
			}
			return w.end()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&status, "status", "", "only intents in this status: "+joinStatuses(intentStatuses)+", or tool_error")
	fl.StringVar(&caller, "caller", "", "only this caller's intents")
	fl.StringVar(&tool, "tool", "", "only this tool's intents")
	fl.IntVar(&limit, "limit", 100, "at most this many intents (0: all)")
	fl.BoolVar(&all, "all", false, "list refused calls too, merged by time")
	return cmd
}

// listJournalAll is journal list --all: intents and refusals from the gateway's
// journal view, a page at a time.
func listJournalAll(cmd *cobra.Command, f *gatewayFlags, q opsview.JournalQuery, limit int) error {
	if limit < 0 {
		return fmt.Errorf("--limit %d: must not be negative", limit)
	}
	if err := gateway.ValidJournalQuery(q); err != nil {
		return err
	}
	s, err := f.open(cmd.Context(), cmd)
	if err != nil {
		return err
	}
	defer s.Close()
	w := newJournalWriter(cmd.OutOrStdout(), f.asJSON)
	for n := 0; limit == 0 || n < limit; {
		q.Offset, q.Limit = n, listPage
		if limit > 0 {
			q.Limit = min(listPage, limit-n)
		}
		p, err := s.rt.Gateway.Journal(cmd.Context(), q)
		if err != nil {
			return fmt.Errorf("reading the journal: %w", err)
		}
		page := make([]store.Intent, 0, len(p.Entries))
		for _, e := range p.Entries {
			if e.Intent != nil {
				page = append(page, *e.Intent)
				continue
			}
			r := e.Refusal
			page = append(page, store.Intent{CallID: r.CallID, Tool: r.Tool, Caller: r.Caller, Session: r.Session,
				Status: opsview.StatusRefused, ArgsDigest: r.ArgsDigest, ErrorClass: r.Class, CreatedAt: r.At})
		}
		if err := w.page(page); err != nil {
			return err
		}
		n += len(page)
		if !p.More || len(page) == 0 {
			break
		}
	}
	return w.end()
}

// journalWriter writes journal list's answer as the pages come: JSON
// element by element inside {"intents":[...]}, text as a table aligned
// within each page.
type journalWriter struct {
	out    *bufio.Writer
	buf    bytes.Buffer
	asJSON bool
	n      int
}

func newJournalWriter(out io.Writer, asJSON bool) *journalWriter {
	return &journalWriter{out: bufio.NewWriter(out), asJSON: asJSON}
}

func (w *journalWriter) page(intents []store.Intent) error {
	if w.asJSON {
		for i := range intents {
			if w.n == 0 {
				w.out.WriteString(`{"intents":[`)
			} else {
				w.out.WriteByte(',')
			}
			w.n++
			w.buf.Reset()
			if err := writeJSONLine(&w.buf, entryOf(&intents[i])); err != nil {
				return err
			}
			w.out.Write(bytes.TrimSuffix(w.buf.Bytes(), []byte("\n")))
		}
		return w.out.Flush()
	}
	if len(intents) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w.out, 0, 4, 2, ' ', 0)
	if w.n == 0 {
		fmt.Fprintln(tw, "CALL ID\tTOOL\tCALLER\tSTATUS\tARGS DIGEST\tCREATED\tSETTLED")
	}
	for i := range intents {
		e := entryOf(&intents[i])
		settled := "-"
		if e.SettledAt != nil {
			settled = e.SettledAt.Format(time.RFC3339)
		}
		status := string(e.Status)
		if e.ToolError {
			status += " (tool_error)"
		} else if e.ResultRefused {
			// It ran (its budget stays spent), and its result broke its
			// output schema: not a success the caller was handed.
			status = resultRefused
		}
		if e.Status == opsview.StatusRefused {
			status += " (" + e.ErrorClass + ")"
		}
		if e.ErrorClass == gateway.DecisionOnly {
			status += " (decision only)" // an agent's hook: Backplane did not run it
		}
		L := termtext.Line
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", L(e.CallID), L(e.Tool), L(e.Caller), L(status),
			L(e.ArgsDigest[:min(12, len(e.ArgsDigest))]), e.CreatedAt.Format(time.RFC3339), settled)
	}
	w.n += len(intents)
	if err := tw.Flush(); err != nil {
		return err
	}
	return w.out.Flush()
}

func (w *journalWriter) end() error {
	switch {
	case w.asJSON && w.n == 0:
		w.out.WriteString(`{"intents":[]}` + "\n")
	case w.asJSON:
		w.out.WriteString("]}\n")
	case w.n == 0:
		w.out.WriteString("no intents\n")
	}
	return w.out.Flush()
}

// intentDetail is one intent as "journal show" prints it: everything the
// journal holds.
type intentDetail struct {
	CallID         string          `json:"call_id"`
	Caller         string          `json:"caller"`
	Session        string          `json:"session,omitempty"`
	Tool           string          `json:"tool"`
	DefinitionHash string          `json:"definition_hash"`
	Arguments      json.RawMessage `json:"arguments"`
	ArgsDigest     string          `json:"args_digest"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	ApprovalID     string          `json:"approval_id,omitempty"`
	Incarnation    string          `json:"incarnation"`
	Status         store.Status    `json:"status"`
	Result         json.RawMessage `json:"result,omitempty"`
	IsError        bool            `json:"is_error,omitempty"`
	ErrorClass     string          `json:"error_class,omitempty"`
	ErrorMessage   string          `json:"error_message,omitempty"`
	ResolvedBy     string          `json:"resolved_by,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	SettledAt      *time.Time      `json:"settled_at"`
	// Client and ProtocolVersion: the MCP client that made the call and
	// the revision it spoke, when known.
	Client          string `json:"client,omitempty"`
	ProtocolVersion string `json:"protocol_version,omitempty"`
}

func detailOf(in *store.Intent) intentDetail {
	d := intentDetail{
		CallID: in.CallID, Caller: in.Caller, Session: in.Session, Tool: in.Tool, DefinitionHash: in.DefinitionHash,
		ArgsDigest: in.ArgsDigest, IdempotencyKey: in.IdempotencyKey, ApprovalID: in.ApprovalID,
		Incarnation: in.Incarnation, Status: in.Status, ErrorClass: in.ErrorClass, ErrorMessage: in.ErrorMessage,
		ResolvedBy: in.ResolvedBy, CreatedAt: in.CreatedAt.UTC(),
		Client: in.ClientInfo, ProtocolVersion: in.ProtocolVersion,
	}
	if json.Valid(in.Arguments) {
		d.Arguments = in.Arguments
	} else {
		// Arguments are validated before they are journaled, so this is not
		// expected; a string keeps the answer one JSON document regardless.
		d.Arguments, _ = json.Marshal(string(in.Arguments))
	}
	if len(in.Result) > 0 {
		if r, err := store.DecodeResult(in.Result); err == nil {
			d.Result, d.IsError = r.Content, r.IsError
		} else if json.Valid(in.Result) {
			d.Result = in.Result
		} else {
			d.Result, _ = json.Marshal(string(in.Result))
		}
	}
	if !in.SettledAt.IsZero() {
		t := in.SettledAt.UTC()
		d.SettledAt = &t
	}
	return d
}

func newJournalShowCmd(f *gatewayFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show CALL_ID",
		Short: "Show everything the journal holds about one call",
		Long: `Show prints one intent: who called which tool (and its definition hash),
the arguments, their digest, the idempotency key and approval used, the
status, the result or the error class and message, who resolved it, the
MCP client and protocol version that made it (when known), and when it
was created and settled. Exit 1 when there is no such call.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			in, err := s.rt.Gateway.GetIntent(cmd.Context(), args[0])
			if errors.Is(err, store.ErrNotFound) {
				return negative(out, f.asJSON, "not_found", fmt.Sprintf("no call %s in the journal", args[0]))
			}
			if err != nil {
				return fmt.Errorf("reading the journal: %w", err)
			}
			d := detailOf(in)
			if f.asJSON {
				return writeJSONLine(out, d)
			}
			writeIntentDetail(out, &d)
			return nil
		},
	}
}

func writeIntentDetail(out io.Writer, d *intentDetail) {
	field := func(label, value string) {
		if value != "" {
			fmt.Fprintf(out, "%-16s %s\n", label+":", termtext.Line(value))
		}
	}
	// JSON, with JSON's own escapes: see termtext.JSON.
	jsonField := func(label string, value []byte) {
		if len(value) > 0 {
			fmt.Fprintf(out, "%-16s %s\n", label+":", termtext.JSON(bytes.ReplaceAll(value, []byte("\n"), []byte(" "))))
		}
	}
	field("call id", d.CallID)
	field("status", string(d.Status))
	if d.Status == store.StatusSucceeded && d.ErrorClass == string(tool.ClassInvalidResult) {
		field("outcome", resultRefused+" (the tool ran and its budget stays spent; its structured result broke the tool's output schema, "+
			"so the caller got invalid_result, never the result below, kept as the tool answered it)")
	}
	field("tool", d.Tool)
	field("definition", d.DefinitionHash)
	field("caller", d.Caller)
	field("session", d.Session)
	field("client", d.Client)
	field("protocol", d.ProtocolVersion)
	jsonField("arguments", d.Arguments)
	field("args digest", d.ArgsDigest)
	field("idempotency key", d.IdempotencyKey)
	field("approval", d.ApprovalID)
	field("incarnation", d.Incarnation)
	jsonField("result", d.Result)
	if d.IsError {
		field("is error", "true")
	}
	field("error class", d.ErrorClass)
	field("error message", d.ErrorMessage)
	field("resolved by", d.ResolvedBy)
	field("created", d.CreatedAt.Format(time.RFC3339Nano))
	if d.SettledAt != nil {
		field("settled", d.SettledAt.Format(time.RFC3339Nano))
	}
}

func newJournalResolveCmd(f *gatewayFlags) *cobra.Command {
	var (
		executed, notExecuted bool
		as, reason            string
	)
	cmd := &cobra.Command{
		Use:   "resolve CALL_ID --executed|--not-executed [--reason TEXT] [--as NAME]",
		Short: "Record what became of an uncertain call",
		Long: `Resolve records an operator's finding about an uncertain call: it did run
(--executed) or it did not (--not-executed, which releases the budget it
held). Only an uncertain intent can be resolved; exit 1 otherwise, or when
there is no such call. With operators configured, the operator's token is
required (BACKPLANE_OPERATOR_TOKEN or --operator-token-file) and names who
resolves it; without, --as does (default: the login name). The OS user is
recorded too, and --reason (what the finding rests on) in the audit event.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if executed == notExecuted {
				return errors.New("say either --executed or --not-executed")
			}
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			as, err := s.operator(as)
			if err != nil {
				return err
			}
			id := args[0]
			verdict := "executed"
			if !executed {
				verdict = "not_executed"
			}
			_, err = s.rt.Gateway.ResolveIntent(cmd.Context(), id, executed, as, reason)
			var oe *gateway.OperatorError
			if errors.As(err, &oe) {
				return negative(out, f.asJSON, oe.Class, oe.Message)
			}
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSONLine(out, struct {
					OK         bool   `json:"ok"`
					CallID     string `json:"call_id"`
					Status     string `json:"status"`
					ResolvedBy string `json:"resolved_by"`
					Reason     string `json:"reason,omitempty"`
				}{true, id, verdict, as, reason})
			}
			_, err = fmt.Fprintf(out, "ok: call %s resolved as %s by %s\n", termtext.Line(id), verdict, termtext.Line(as))
			return err
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&executed, "executed", false, "the call did run")
	fl.BoolVar(&notExecuted, "not-executed", false, "the call did not run (its budget is released)")
	fl.StringVar(&reason, "reason", "", "why: what the finding rests on (recorded in the audit event)")
	addOperatorFlags(cmd, f, &as, "who resolves: with operators configured, only a check of the token's owner (default: the login name)")
	return cmd
}

// negative prints a refusal of an operator verb, {"ok":false,"error":{class,
// message}} with --json, and returns errNegative (exit 1).
func negative(out io.Writer, asJSON bool, class, msg string) error {
	if asJSON {
		type errObj struct {
			Class   string `json:"class"`
			Message string `json:"message"`
		}
		if err := writeJSONLine(out, struct {
			OK    bool   `json:"ok"`
			Error errObj `json:"error"`
		}{false, errObj{class, msg}}); err != nil {
			return err
		}
		return errNegative
	}
	fmt.Fprintf(out, "refused: %s\n", termtext.Block(msg))
	return errNegative
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func joinStatuses[T ~string](list []T) string {
	s := make([]string, len(list))
	for i, v := range list {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}
