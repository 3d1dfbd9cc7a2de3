package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
	sqlite3 "modernc.org/sqlite/lib"
)

// intentCols are the columns scanIntent reads, from intentFrom: an
// intent's own row (i) and its settlement's (s, absent while started; see
// schema version 7).
const intentCols = `i.call_id, i.caller, i.session, i.tool, i.definition_hash, i.arguments, i.args_digest,
	i.idempotency_key, i.approval_id, i.incarnation, coalesce(s.status, 'started'), s.result,
	coalesce(s.error_class, ''), coalesce(s.error_message, ''), coalesce(s.resolved_by, ''),
	i.created_at, s.settled_at, i.client, i.protocol_version, s.error_detail`

// intentFrom joins each intent to its settlement, by the rowid both share.
const intentFrom = ` FROM intents i LEFT JOIN settlements s ON s.seq = i.seq`

// CommitIntent durably records a started intent, its reservations and its
// approval's consumption, all or nothing, in the order of checks memstore
// defines: call id, idempotency key, budget, approval.
func (s *Store) CommitIntent(ctx context.Context, req *store.CommitRequest) (*store.Intent, error) {
	in := req.Intent
	if in.CallID == "" {
		return nil, errors.New("sqlite store: commit intent: empty call id")
	}
	approvalID := in.ApprovalID
	if req.ApprovalID != "" {
		approvalID = req.ApprovalID
	}
	for _, r := range req.Reservations {
		if err := budget.CheckWindow(r.Window); err != nil {
			return nil, fmt.Errorf("sqlite store: commit intent %s: %w", in.CallID, err)
		}
	}
	in.ApprovalID = approvalID
	op := &commitOp{in: in, approvalID: req.ApprovalID, res: req.Reservations}
	if err := s.enqueue(ctx, &writeReq{commit: op}); err != nil {
		return op.existing, err
	}
	return nil, nil
}

// release returns the budget held by callID's reservations (in its row's
// reservations, see schema version 5) to the usage rows of their
// generation. A usage row pruned since (its window ended) or reset by an
// operator (the row made since has a later generation) is not matched:
// there is nothing to give back. It runs with the status change that
// releases (started to failed, uncertain to not_executed), which happens
// once per intent, so nothing is ever given back twice.
func release(w *wtx, callID string) error {
	if _, err := w.exec(`WITH held AS (
			SELECT json_extract(j.value, '$[0]') AS scope, json_extract(j.value, '$[1]') AS key,
				json_extract(j.value, '$[3]') AS amount, json_extract(j.value, '$[4]') AS per,
				json_extract(j.value, '$[5]') AS window_start, json_extract(j.value, '$[6]') AS gen
			FROM intents, json_each(intents.reservations) AS j WHERE intents.call_id = ?1)
		UPDATE budget_usage SET used = used - (SELECT SUM(h.amount) FROM held h
			WHERE h.scope = budget_usage.scope AND h.key = budget_usage.key AND h.per = budget_usage.per
			AND h.window_start = budget_usage.window_start AND h.gen = budget_usage.gen)
		WHERE (scope, key, per, window_start, gen) IN (SELECT scope, key, per, window_start, gen FROM held)`, callID); err != nil {
		return fmt.Errorf("sqlite store: release budget of %s: %w", callID, err)
	}
	return nil
}

// Settle ends a started intent of this incarnation: its settlement row is
// appended (schema version 7) and its open_intents row goes; the intent's
// own row is not written.
//
// The request needs no savepoint (writeReq.oneWrite): its first statement
// appends the settlement only while the intent is open for this
// incarnation, so it either writes the settlement or writes nothing, and
// SQLite undoes a failed statement alone; the statements after it (the
// open row's delete, a release of budget) cannot be refused, only fail
// with the transaction (txBroken).
func (s *Store) Settle(ctx context.Context, callID string, st store.Settlement) error {
	switch st.Status {
	case store.StatusSucceeded, store.StatusFailed, store.StatusUncertain:
	default:
		return fmt.Errorf("sqlite store: settle %s: status %q is not succeeded, failed or uncertain", callID, st.Status)
	}
	// Not synced on its own (see the package doc). A settlement that gives
	// no budget back may share a statement with others (settleGroup).
	var op *settleOp
	if !store.Released(st.Status) {
		op = &settleOp{callID: callID, st: st}
	}
	return s.enqueue(ctx, &writeReq{lazy: true, oneWrite: true, settle: op, fn: func(w *wtx) error {
		// The incarnation condition is what makes recovery safe: once
		// another process has marked this intent uncertain (its open row
		// is gone), or when it belongs to another incarnation, nothing
		// here can move it.
		seq, err := w.openSeq(callID)
		if err != nil {
			return err
		}
		// Plain ? parameters: numbered ones cost the driver an allocation
		// each, to read their names.
		n, err := w.affected(`INSERT INTO settlements (seq, status, result, error_class, error_message, settled_at, error_detail)
			SELECT ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM open_intents WHERE seq = ? AND incarnation = ?)`,
			seq, string(st.Status), blob(st.Result), st.ErrorClass, st.ErrorMessage, nanos(st.At), blob(st.ErrorDetail), seq, s.incarnation)
		if err != nil {
			return fmt.Errorf("sqlite store: settle %s: %w", callID, err)
		}
		if n == 0 {
			var status, inc string
			err := w.queryRow(`SELECT coalesce(s.status, 'started'), i.incarnation`+intentFrom+` WHERE i.call_id = ?`, callID).Scan(&status, &inc)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("settle %s: %w", callID, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("sqlite store: settle %s: %w", callID, err)
			}
			return fmt.Errorf("settle %s (%s, incarnation %s): %w", callID, status, inc, store.ErrNotStarted)
		}
		delete(w.open, callID)
		if _, err := w.exec(`DELETE FROM open_intents WHERE seq = ?`, seq); err != nil {
			return &txBroken{fmt.Errorf("sqlite store: settle %s: %w", callID, err)}
		}
		if store.Released(st.Status) {
			if err := release(w, callID); err != nil {
				return &txBroken{err}
			}
		}
		return nil
	}})
}

// openSeq returns the seq of callID's intent: from the writer's record of
// the intents this Store committed, else from the database (0 when there
// is no such intent, which the caller's checks then report).
func (w *wtx) openSeq(callID string) (int64, error) {
	if seq, ok := w.open[callID]; ok {
		return seq, nil
	}
	var seq int64
	err := w.queryRow(`SELECT seq FROM intents WHERE call_id = ?`, callID).Scan(&seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("sqlite store: settle %s: %w", callID, err)
	}
	return seq, nil
}

// ResolveIntent records an operator's verdict on an uncertain intent.
func (s *Store) ResolveIntent(ctx context.Context, callID string, executed bool, by string, at time.Time) error {
	status := store.StatusExecuted
	if !executed {
		status = store.StatusNotExecuted
	}
	write := s.write1 // one UPDATE, unless budget comes back
	if !executed {
		write = s.write
	}
	return write(ctx, func(w *wtx) error {
		// error_class as store.ResolvedClass says.
		n, err := w.affected(`UPDATE settlements SET status = ?, resolved_by = ?, settled_at = ?,
			error_class = CASE WHEN ? = 'not_executed' THEN ? WHEN error_class = ? THEN ? ELSE error_class END
			WHERE seq = (SELECT seq FROM intents WHERE call_id = ?) AND status = 'uncertain'`, string(status), by, nanos(at),
			string(status), store.ResolvedClass(false, ""), "unknown_outcome", store.ResolvedClass(true, "unknown_outcome"), callID)
		if err != nil {
			return fmt.Errorf("sqlite store: resolve %s: %w", callID, err)
		}
		if n == 0 {
			var cur string
			err := w.queryRow(`SELECT coalesce(s.status, 'started')`+intentFrom+` WHERE i.call_id = ?`, callID).Scan(&cur)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("intent %s: %w", callID, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("sqlite store: resolve %s: %w", callID, err)
			}
			return fmt.Errorf("resolve %s (%s): %w", callID, cur, store.ErrNotUncertain)
		}
		if !executed {
			return release(w, callID)
		}
		return nil
	})
}

// GetIntent returns the intent with this call id, or ErrNotFound.
func (s *Store) GetIntent(ctx context.Context, callID string) (*store.Intent, error) {
	in, err := s.readIntent(ctx, `SELECT `+intentCols+intentFrom+` WHERE i.call_id = ?`, callID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("intent %s: %w", callID, store.ErrNotFound)
	}
	return in, err
}

// GetIntentByKey returns the caller's intent with this idempotency key, or
// ErrNotFound.
func (s *Store) GetIntentByKey(ctx context.Context, caller, key string) (*store.Intent, error) {
	in, err := s.readIntent(ctx, `SELECT `+intentCols+intentFrom+` WHERE i.caller = ? AND i.idempotency_key = ?`, caller, key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("idempotency key %q: %w", key, store.ErrNotFound)
	}
	return in, err
}

func (s *Store) readIntent(ctx context.Context, query string, args ...any) (*store.Intent, error) {
	st, err := s.rstmt(ctx, query)
	if err != nil {
		return nil, err
	}
	var in *store.Intent
	err = retryBusy(ctx, s.log, func() error {
		in, err = scanIntent(st.QueryRowContext(ctx, args...))
		return err
	})
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	return in, err
}

// ListIntents returns matching intents, newest commit first: the first
// page of PageIntents.
func (s *Store) ListIntents(ctx context.Context, f store.IntentFilter) ([]store.Intent, error) {
	p, err := s.PageIntents(ctx, f, "")
	return p.Intents, err
}

// PageIntents returns one page of matching intents, newest commit first;
// the cursor is the commit sequence number of the last intent listed, and
// the next page is read with the same indexes as the first.
func (s *Store) PageIntents(ctx context.Context, f store.IntentFilter, cursor string) (store.IntentPage, error) {
	var before int64
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n <= 0 {
			return store.IntentPage{}, fmt.Errorf("sqlite store: cursor %q: %w", cursor, store.ErrBadCursor)
		}
		before = n
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q, args := listQuery(f, before, limit+1) // one more tells whether a next page exists
	var p store.IntentPage
	var last int64
	err := retryBusy(ctx, s.log, func() error {
		p = store.IntentPage{}
		rows, err := s.rdb.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if len(p.Intents) == limit {
				p.Next = strconv.FormatInt(last, 10)
				break
			}
			var seq int64
			in, err := scanIntent(seqScanner{rows, &seq})
			if err != nil {
				return err
			}
			last = seq
			p.Intents = append(p.Intents, *in)
		}
		return rows.Err()
	})
	if err != nil {
		return store.IntentPage{}, fmt.Errorf("sqlite store: list intents: %w", err)
	}
	return p, nil
}

// seqScanner scans the seq column in front of the intent's columns.
type seqScanner struct {
	r   scanner
	seq *int64
}

func (s seqScanner) Scan(dest ...any) error { return s.r.Scan(append([]any{s.seq}, dest...)...) }

// listQuery is the SELECT for f: seq and the intent, newest first, before
// the commit sequence number before (0: from the newest). A status names
// where to look: started intents are the rows of open_intents (the calls
// in flight), the rare statuses an index of settlements; succeeded, the
// common one, is found by scanning newest first.
func listQuery(f store.IntentFilter, before int64, limit int) (string, []any) {
	// key is the seq of the table the query walks, newest first: the
	// intents, or the open rows or settlements it starts from (the same
	// values, joined by them).
	from, key := intentFrom, "i.seq"
	var where []string
	var args []any
	// Literal terms, so the partial index's condition is seen to hold (the
	// planner does not look inside bound parameters), and INDEXED BY, since
	// scanning newest first would look cheaper to a planner that cannot
	// know how few rare intents a long journal holds.
	switch f.Status {
	case "":
	case store.StatusStarted:
		from, key = ` FROM open_intents o JOIN intents i ON i.seq = o.seq LEFT JOIN settlements s ON s.seq = i.seq`, "o.seq"
		where = append(where, `s.seq IS NULL`)
	case store.StatusSucceeded:
		where = append(where, `s.status = 'succeeded'`)
	default:
		from, key = ` FROM settlements s INDEXED BY settlements_rare JOIN intents i ON i.seq = s.seq`, "s.seq"
		where = append(where, `s.status = ?`, `s.status <> 'succeeded'`)
		args = append(args, string(f.Status))
	}
	for _, c := range []struct{ col, v string }{{"i.caller", f.Caller}, {"i.tool", f.Tool}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if before > 0 {
		where = append(where, key+` < ?`)
		args = append(args, before)
	}
	q := `SELECT ` + key + `, ` + intentCols + from
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	return q + ` ORDER BY ` + key + ` DESC LIMIT ?`, append(args, limit)
}

type scanner interface{ Scan(dest ...any) error }

func scanIntent(r scanner) (*store.Intent, error) {
	var in store.Intent
	var key, approval, client, protocol sql.NullString
	var status string
	var created, settled sql.NullInt64
	if err := r.Scan(&in.CallID, &in.Caller, &in.Session, &in.Tool, &in.DefinitionHash, &in.Arguments, &in.ArgsDigest,
		&key, &approval, &in.Incarnation, &status, &in.Result, &in.ErrorClass, &in.ErrorMessage,
		&in.ResolvedBy, &created, &settled, &client, &protocol, &in.ErrorDetail); err != nil {
		return nil, err
	}
	in.IdempotencyKey, in.ApprovalID, in.Status = key.String, approval.String, store.Status(status)
	in.ClientInfo, in.ProtocolVersion = client.String, protocol.String
	in.CreatedAt, in.SettledAt = fromNanos(created), fromNanos(settled)
	return &in, nil
}

// BudgetUsage lists the budget held per (scope, key, window).
func (s *Store) BudgetUsage(ctx context.Context) ([]store.Usage, error) {
	var out []store.Usage
	err := retryBusy(ctx, s.log, func() error {
		out = out[:0]
		rows, err := s.rdb.QueryContext(ctx, `SELECT scope, key, per, window_start, quota, used FROM budget_usage
			ORDER BY scope, key, per, window_start`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var u store.Usage
			var per, start int64
			if err := rows.Scan(&u.Scope, &u.Key, &per, &start, &u.Quota, &u.Used); err != nil {
				return err
			}
			u.Window = budget.WindowOf(per, start)
			out = append(out, u)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite store: budget usage: %w", err)
	}
	return out, nil
}

func isUnique(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT &&
		strings.Contains(err.Error(), "UNIQUE")
}

// nanos encodes t for storage: unix nanoseconds, NULL for the zero time.
func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// cmpNanos encodes t for comparison: the zero time is before every other.
func cmpNanos(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// blob stores nil as NULL and anything else, even empty, as a BLOB.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
