package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/internal/jsonstring"
	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// intentCols are the columns scanIntent reads, from intentFrom: an
// intent's own row (i) and its settlement's (s, absent while started; see
// schema version 7).
const intentCols = `i.call_id, i.caller, i.session, i.tool, i.definition_hash, i.arguments, i.args_digest,
	i.idempotency_key, i.approval_id, i.incarnation, coalesce(s.status, 'started'), s.result,
	coalesce(s.error_class, ''), coalesce(s.error_message, ''), coalesce(s.resolved_by, ''),
	i.created_at, s.settled_at, i.client, i.protocol_version, s.error_detail`

// intentFrom joins each intent to its settlement.
const intentFrom = ` FROM intents i LEFT JOIN settlements s ON s.seq = i.seq`

// CommitIntent's statements. They are sent together (one pgx batch: one
// round trip) and run in one implicit transaction that the server commits
// at the batch's end, or rolls back entirely when a statement fails. A
// condition that refuses the commit fails its statement through
// backplane_refuse (SQLSTATE refusedCode), so no statement after it runs
// and nothing is written; CommitIntent then reads, outside the rolled-back
// transaction, what to report.
//
// The budget rows are reserved first and the intent inserted after them:
// the intent's seq is drawn while the transaction holds its budget rows'
// locks, which is what makes a reset's mark exact (see schema version 10).
// The contract's order of refusals (call id, idempotency key, budget,
// approval) is restored by commitOne, which looks for the call id and
// the key before it reports a budget refusal.

// insertIntent writes the intent, with its reservations ($14, see schema
// version 10), only while this incarnation ($10) is alive with an
// unexpired lease, on the database's clock; otherwise it is refused
// ('incarnation'). FOR KEY SHARE holds the incarnation row until commit:
// Recover locks it FOR UPDATE before marking anything, so it waits for this
// transaction, and once it has declared the incarnation dead the subquery
// finds no row. A repeated call id or idempotency key fails with a unique
// violation (after waiting for a concurrent insert of the same key to
// commit or roll back). The intent's open_intents row is inserted with it;
// its seq is returned, for its settlement (see Store.open).
const insertIntent = `WITH i AS (INSERT INTO intents (call_id, caller, session, tool, definition_hash, arguments,
		args_digest, idempotency_key, approval_id, incarnation, created_at, client, protocol_version, reservations)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
		coalesce((SELECT i.id FROM incarnations i
			WHERE i.id = $10 AND i.state = 'alive' AND i.lease_expires_at > clock_timestamp()
			FOR KEY SHARE), backplane_refuse('incarnation')),
		$11, $12, $13, $14::text::jsonb)
	RETURNING seq, incarnation),
	o AS (INSERT INTO open_intents (seq, incarnation) SELECT seq, incarnation FROM i)
	SELECT seq FROM i`

// reserveBudget adds $4 to the usage of ($1, $2) in window ($5 seconds
// long, starting at $6) unless that takes it above the quota $3; it is
// refused ('budget') otherwise. The upsert locks the usage row (even when
// its condition refuses the update) until commit: a concurrent reservation
// of the same key and window, from any replica, waits and then sees this
// one's sum. The reservation itself is recorded in the intent's row.
const reserveBudget = `WITH u AS (
		INSERT INTO budget_usage AS b (scope, key, per, window_start, quota, used)
		VALUES ($1, $2, $5::bigint, $6::bigint, $3::bigint,
			CASE WHEN $4::bigint <= $3::bigint THEN $4::bigint ELSE backplane_refuse('budget')::bigint END)
		ON CONFLICT (scope, key, per, window_start) DO UPDATE SET used = b.used + excluded.used, quota = excluded.quota
		WHERE b.used + excluded.used <= $3::bigint
		RETURNING 1)
	SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN 'reserved' ELSE backplane_refuse('budget') END`

// consumeApproval marks approval $2 consumed by call $1 if it approves
// exactly this call, unused and unexpired at the call's creation; it is
// refused ('approval') otherwise. The UPDATE's row lock makes concurrent
// consumers of one approval take turns: the second re-checks consumed_by
// and is refused.
const consumeApproval = `WITH c AS (
		UPDATE approvals SET consumed_by = $1
		WHERE id = $2 AND status = 'approved' AND consumed_by IS NULL AND expires_at > $3
		AND caller = $4 AND tool = $5 AND definition_hash = $6 AND args_digest = $7
		RETURNING 1)
	SELECT coalesce((SELECT 'consumed' FROM c), backplane_refuse('approval'))`

// refusedCode is the SQLSTATE of backplane_refuse.
const refusedCode = "BP001"

// CommitIntent durably records a started intent, its reservations and its
// approval's consumption in one transaction, all or nothing, with the
// checks in the order memstore defines: call id, idempotency key, budget,
// approval. The request is handed to the store's committers (see
// group.go), which commit the intents that arrive together in one
// transaction when they can, and each on its own otherwise.
func (s *Store) CommitIntent(ctx context.Context, req *store.CommitRequest) (*store.Intent, error) {
	in := req.Intent
	if in.CallID == "" {
		return nil, errors.New("postgres store: commit intent: empty call id")
	}
	if s.lost.Load() {
		return nil, fmt.Errorf("commit intent %s: %w", in.CallID, ErrLeaseLost)
	}
	for _, r := range req.Reservations {
		if err := budget.CheckWindow(r.Window); err != nil {
			return nil, fmt.Errorf("postgres store: commit intent %s: %w", in.CallID, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.inflight.Done()
	return s.enqueueCommit(ctx, req)
}

// commitOne commits req in a transaction of its own: one pgx batch (one
// round trip), retried on a deadlock or serialization failure, whose
// refusals are explained by reading the state after the rollback.
func (s *Store) commitOne(ctx context.Context, req *store.CommitRequest) (*store.Intent, error) {
	in := req.Intent
	approvalID := in.ApprovalID
	if req.ApprovalID != "" {
		approvalID = req.ApprovalID
	}
	// Budget rows are locked in (scope, key, per, window_start) order
	// whatever the request's order, so two commits never wait for each
	// other in a cycle.
	order := make([]int, len(req.Reservations))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := req.Reservations[a], req.Reservations[b]
		return cmp.Or(strings.Compare(ra.Scope, rb.Scope), strings.Compare(ra.Key, rb.Key),
			cmp.Compare(ra.Window.PerSeconds(), rb.Window.PerSeconds()), cmp.Compare(ra.Window.StartSeconds(), rb.Window.StartSeconds()))
	})
	b := &pgx.Batch{}
	for _, i := range order {
		r := req.Reservations[i]
		b.Queue(reserveBudget, r.Scope, r.Key, r.Quota, r.Amount, r.Window.PerSeconds(), r.Window.StartSeconds())
	}
	b.Queue(insertIntent, in.CallID, in.Caller, in.Session, in.Tool, in.DefinitionHash, in.Arguments,
		in.ArgsDigest, nullString(in.IdempotencyKey), nullString(approvalID), s.incarnation, ts(in.CreatedAt),
		nullString(in.ClientInfo), nullString(in.ProtocolVersion), encodeReservations(nil, req.Reservations))
	if req.ApprovalID != "" {
		b.Queue(consumeApproval, in.CallID, req.ApprovalID, cmpTS(in.CreatedAt), in.Caller, in.Tool, in.DefinitionHash, in.ArgsDigest)
	}

	var existing *store.Intent
	var seq int64
	readSeq := func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&seq); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	err := s.writeConn(ctx, func(ctx context.Context, c *pgx.Conn) error {
		if err := prepare(ctx, c, insertIntent, reserveBudget); err != nil {
			return fmt.Errorf("postgres store: commit intent %s: %w", in.CallID, err)
		}
		for attempt := 1; ; attempt++ {
			failed, err := sendBatch(ctx, c, b, len(order), readSeq)
			switch {
			case err == nil:
				s.opened(in.CallID, seq)
				return nil
			case retryable(err) && attempt <= txRetries:
				s.log.Debug("commit retried", "attempt", attempt, "error", err)
				time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
				continue
			case failed == len(order):
				existing, err = s.whyNotInserted(ctx, c, &in, err)
				return err
			case failed >= 0 && failed < len(order) && refused(err):
				// The budget is checked before the intent is inserted,
				// but a taken call id or key is the refusal to report.
				var taken bool
				if existing, taken, err = takenBy(ctx, c, &in); taken || err != nil {
					return err
				}
				berr := budgetError(ctx, c, req.Reservations)
				if berr == nil && attempt <= txRetries {
					continue // budget released meanwhile: it fits now
				}
				if berr == nil {
					berr = fmt.Errorf("postgres store: commit intent %s: a reservation was refused, then fit, %d times", in.CallID, attempt)
				}
				return berr
			case failed == len(order)+1 && refused(err):
				return fmt.Errorf("approval %s for call %s: %w", req.ApprovalID, in.CallID, store.ErrApprovalUnavailable)
			}
			return fmt.Errorf("postgres store: commit intent %s: %w", in.CallID, err)
		}
	})
	if err != nil {
		return existing, err
	}
	return nil, nil
}

// takenBy reports whether in's call id, or its caller's idempotency key,
// belongs to a committed intent, with the error CommitIntent returns then
// (and, for the key, the intent that holds it).
func takenBy(ctx context.Context, c *pgx.Conn, in *store.Intent) (*store.Intent, bool, error) {
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM intents WHERE call_id = $1`, in.CallID).Scan(&n); err != nil {
		return nil, false, fmt.Errorf("postgres store: commit intent %s: %w", in.CallID, err)
	}
	if n > 0 {
		return nil, true, fmt.Errorf("postgres store: call id %q already committed", in.CallID)
	}
	if in.IdempotencyKey == "" {
		return nil, false, nil
	}
	prev, err := scanIntent(c.QueryRow(ctx, `SELECT `+intentCols+intentFrom+` WHERE i.caller = $1 AND i.idempotency_key = $2`,
		in.Caller, in.IdempotencyKey))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("postgres store: read intent of idempotency key %q: %w", in.IdempotencyKey, err)
	}
	return prev, true, fmt.Errorf("idempotency key %q of %s: %w", in.IdempotencyKey, in.Caller, store.ErrDuplicateKey)
}

// encodeReservations appends to b the intents.reservations value of rs
// (see schema version 10) and returns it as text, or nil (NULL) for none.
func encodeReservations(b []byte, rs []budget.Reservation) any {
	if len(rs) == 0 {
		return nil
	}
	return string(appendReservations(b, rs))
}

// appendReservations appends the JSON array of rs: one element [scope,
// key, quota, amount, per, window_start, 0] per reservation.
func appendReservations(b []byte, rs []budget.Reservation) []byte {
	b = append(b, '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendJSONString(b, r.Scope)
		b = append(b, ',')
		b = appendJSONString(b, r.Key)
		for _, n := range [...]int64{r.Quota, r.Amount, r.Window.PerSeconds(), r.Window.StartSeconds(), 0} {
			b = append(b, ',')
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, ']')
	}
	return append(b, ']')
}

// appendJSONString appends s as a JSON string. Budget scopes and keys are
// names (a caller, a tool, a session id): the plain ones are copied, any
// other is escaped as encoding/json's Marshal writes it (jsonstring.HTML:
// the same bytes, without Marshal's allocation). The bytes written are
// what they were when Marshal wrote them: a plain name keeps its <, > and
// & as they are, a name with any other byte to escape has them escaped.
// A NUL, which PostgreSQL's text cannot hold, is refused by the server as
// it is in any other column.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return jsonstring.HTML.Append(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// sendBatch runs b in one implicit transaction and returns nil once the
// transaction is committed, or the index of the statement that failed (-1
// for the commit itself) and its error. The rows of statement number read
// are given to scan (none when read is -1); what scan sees is committed
// only if sendBatch returns nil.
func sendBatch(ctx context.Context, c *pgx.Conn, b *pgx.Batch, read int, scan func(pgx.Rows) error) (int, error) {
	br := c.SendBatch(ctx, b)
	for i := range b.Len() {
		var err error
		if i == read {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				err = scan(rows)
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return i, err
		}
	}
	// The server commits at the batch's end, before it says it is ready:
	// Close returning nil is the commit's success.
	return -1, br.Close()
}

func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == refusedCode
}

// whyNotInserted explains the failure err of the intent's insert: the
// caller's idempotency key is taken (the existing intent is returned), the
// call id is taken, or this incarnation may no longer commit.
func (s *Store) whyNotInserted(ctx context.Context, c *pgx.Conn, in *store.Intent, err error) (*store.Intent, error) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil, fmt.Errorf("postgres store: commit intent %s: %w", in.CallID, err)
	}
	switch {
	case pe.Code == "23505" && pe.ConstraintName == "intents_idempotency":
		prev, err := scanIntent(c.QueryRow(ctx, `SELECT `+intentCols+intentFrom+` WHERE i.caller = $1 AND i.idempotency_key = $2`,
			in.Caller, in.IdempotencyKey))
		if err != nil {
			return nil, fmt.Errorf("postgres store: read intent of idempotency key %q: %w", in.IdempotencyKey, err)
		}
		return prev, fmt.Errorf("idempotency key %q of %s: %w", in.IdempotencyKey, in.Caller, store.ErrDuplicateKey)
	case pe.Code == "23505":
		return nil, fmt.Errorf("postgres store: call id %q already committed: %w", in.CallID, err)
	case pe.Code != refusedCode:
		return nil, fmt.Errorf("postgres store: commit intent %s: %w", in.CallID, err)
	}
	var state string
	var leased bool
	err = c.QueryRow(ctx, `SELECT state, lease_expires_at > clock_timestamp() FROM incarnations WHERE id = $1`, s.incarnation).Scan(&state, &leased)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || err == nil && state == "dead":
		s.lose()
		return nil, fmt.Errorf("commit intent %s: %w", in.CallID, ErrLeaseLost)
	case err != nil:
		return nil, fmt.Errorf("postgres store: commit intent %s: %w", in.CallID, err)
	case state == "closed":
		return nil, fmt.Errorf("commit intent %s: %w", in.CallID, ErrClosed)
	case !leased:
		return nil, fmt.Errorf("commit intent %s: %w", in.CallID, ErrLeaseExpired)
	}
	// The lease was renewed between the refusal and this read.
	return nil, fmt.Errorf("commit intent %s: %w", in.CallID, ErrLeaseExpired)
}

// budgetError builds the error of a refused reservation of rs, once the
// transaction that tried is rolled back. It reports, as memstore does, the
// first reservation in request order that does not fit what is held; nil
// when all fit now (budget was released since the refusal).
func budgetError(ctx context.Context, c *pgx.Conn, rs []budget.Reservation) error {
	type key struct {
		scope, key string
		per, start int64
	}
	held := map[key]int64{}
	for _, r := range rs {
		k := key{r.Scope, r.Key, r.Window.PerSeconds(), r.Window.StartSeconds()}
		if _, ok := held[k]; ok {
			continue
		}
		var used int64
		err := c.QueryRow(ctx, `SELECT used FROM budget_usage WHERE scope = $1 AND key = $2 AND per = $3 AND window_start = $4`,
			r.Scope, r.Key, k.per, k.start).Scan(&used)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres store: read budget %s %q: %w", r.Scope, r.Key, err)
		}
		held[k] = used
	}
	for _, r := range rs {
		k := key{r.Scope, r.Key, r.Window.PerSeconds(), r.Window.StartSeconds()}
		if held[k]+r.Amount > r.Quota {
			return &store.BudgetError{Scope: r.Scope, Key: r.Key, Used: held[k], Requested: r.Amount, Quota: r.Quota, Window: r.Window}
		}
		held[k] += r.Amount
	}
	return nil
}

// heldBy is the reservations of call $1 that still count (gen 0, see
// schema version 10), summed per usage row, with the intent's seq.
const heldBy = `i AS (SELECT seq, reservations FROM intents WHERE call_id = $1),
	h AS (SELECT e->>0 AS scope, e->>1 AS key, (e->>4)::bigint AS per, (e->>5)::bigint AS window_start,
			sum((e->>3)::bigint) AS amount
		FROM i, jsonb_array_elements(i.reservations) e WHERE (e->>6)::bigint = 0
		GROUP BY 1, 2, 3, 4)`

// release returns the budget held by callID's reservations (in its row's
// reservations, see schema version 10), locking the usage rows in (scope,
// key, per, window_start) order first, as reservations do. A usage row
// pruned since (its window ended), or made after an operator's reset of
// the row the reservation counted in (a reset mark above the intent's
// seq), is not matched: there is nothing to give back. It runs with the
// status change that releases (started to failed, uncertain to
// not_executed), which happens once per intent, so nothing is ever given
// back twice.
func release(ctx context.Context, tx pgx.Tx, callID string) error {
	if _, err := tx.Exec(ctx, `WITH `+heldBy+`
		SELECT 1 FROM budget_usage b JOIN h ON b.scope = h.scope AND b.key = h.key AND b.per = h.per AND b.window_start = h.window_start
		ORDER BY b.scope, b.key, b.per, b.window_start FOR UPDATE OF b`, callID); err != nil {
		return fmt.Errorf("postgres store: release budget of %s: %w", callID, err)
	}
	if _, err := tx.Exec(ctx, `WITH `+heldBy+`
		UPDATE budget_usage b SET used = b.used - h.amount FROM h
		WHERE b.scope = h.scope AND b.key = h.key AND b.per = h.per AND b.window_start = h.window_start
		AND NOT EXISTS (SELECT 1 FROM budget_resets r, i WHERE r.scope = b.scope AND r.key = b.key
			AND r.per = b.per AND r.window_start = b.window_start AND r.mark > i.seq)`, callID); err != nil {
		return fmt.Errorf("postgres store: release budget of %s: %w", callID, err)
	}
	return nil
}

// settleIntent settles call $6, whose seq is $8 (NULL when this Store
// does not know it: then it is looked up), with the values $1-$5 and $9 if it is
// still started by this incarnation ($7) and this incarnation is alive:
// its open row is deleted and its settlement row inserted (the intent's
// own row is not written). The row count is the settlements inserted.
const settleIntent = `WITH o AS (DELETE FROM open_intents
		WHERE seq = coalesce($8::bigint, (SELECT seq FROM intents WHERE call_id = $6)) AND incarnation = $7
		AND EXISTS (SELECT 1 FROM incarnations WHERE id = $7 AND state = 'alive')
		RETURNING seq)
	INSERT INTO settlements (seq, status, result, error_class, error_message, settled_at, error_detail)
	SELECT seq, $1, $2, $3, $4, $5, $9 FROM o`

// Settle ends a started intent of this incarnation, while it is alive.
func (s *Store) Settle(ctx context.Context, callID string, st store.Settlement) error {
	switch st.Status {
	case store.StatusSucceeded, store.StatusFailed, store.StatusUncertain:
	default:
		return fmt.Errorf("postgres store: settle %s: status %q is not succeeded, failed or uncertain", callID, st.Status)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if store.Released(st.Status) {
		return s.settleOne(ctx, callID, st)
	}
	return s.enqueueSettle(ctx, callID, st)
}

// settleOne settles callID in a transaction of its own, committed
// asynchronously (see asyncCommit); a failed settlement releases the
// call's budget in the same transaction.
func (s *Store) settleOne(ctx context.Context, callID string, st store.Settlement) error {
	// Settled or refused, the intent is no longer this Store's to settle;
	// a settlement that failed otherwise finds it by its call id.
	var seq any
	if n, ok := s.openSeq(callID); ok {
		seq = n
	}
	defer s.forget(callID)
	settle := func(ctx context.Context, tx querier) error {
		// The status and incarnation conditions are what make recovery
		// safe: once another replica has marked this intent uncertain (and
		// this incarnation dead, in the same transaction), or when it
		// belongs to another incarnation, nothing here can move it.
		tag, err := tx.Exec(ctx, settleIntent, string(st.Status), st.Result, st.ErrorClass, st.ErrorMessage, ts(st.At), callID, s.incarnation, seq, st.ErrorDetail)
		if err != nil {
			return fmt.Errorf("postgres store: settle %s: %w", callID, err)
		}
		if tag.RowsAffected() == 0 {
			var status, inc string
			err := tx.QueryRow(ctx, `SELECT coalesce(s.status, 'started'), i.incarnation`+intentFrom+` WHERE i.call_id = $1`, callID).Scan(&status, &inc)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("settle %s: %w", callID, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("postgres store: settle %s: %w", callID, err)
			}
			if status == string(store.StatusStarted) && inc == s.incarnation {
				s.lose() // still started but refused: this incarnation is not alive
				return fmt.Errorf("settle %s (%s): this replica's lease was lost: %w", callID, status, store.ErrNotStarted)
			}
			return fmt.Errorf("settle %s (%s, incarnation %s): %w", callID, status, inc, store.ErrNotStarted)
		}
		return nil
	}
	if !store.Released(st.Status) {
		// The setting and the update in one round trip and one implicit
		// transaction (a pgx batch), committed without waiting for the
		// WAL flush.
		return s.writeConn(ctx, func(ctx context.Context, c *pgx.Conn) error {
			if err := prepare(ctx, c, asyncCommit, settleIntent); err != nil {
				return fmt.Errorf("postgres store: settle %s: %w", callID, err)
			}
			return settle(ctx, asyncConn{c})
		})
	}
	return s.writeConn(ctx, func(ctx context.Context, c *pgx.Conn) error {
		return s.runTx(ctx, c, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, asyncCommit); err != nil {
				return fmt.Errorf("postgres store: settle %s: %w", callID, err)
			}
			if err := settle(ctx, tx); err != nil {
				return err
			}
			return release(ctx, tx, callID)
		})
	})
}

// asyncCommit makes the transaction it runs in commit without waiting for
// its WAL to reach stable storage (the server's WAL writer flushes it
// within wal_writer_delay, 200 ms by default, or the next synchronous
// commit does). Only settlements use it: a settlement lost to a crash of
// the database server leaves its intent started, which recovery marks
// uncertain (see docs/durability.md); an intent is always committed
// synchronously, before its backend runs.
const asyncCommit = `SET LOCAL synchronous_commit = off`

// asyncConn runs each Exec together with asyncCommit as one pgx batch: one
// round trip and one implicit transaction, committed asynchronously. Its
// QueryRow is the connection's own (a read needs no commit).
type asyncConn struct{ *pgx.Conn }

func (c asyncConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(asyncCommit)
	q := b.Queue(sql, args...)
	var tag pgconn.CommandTag
	q.Exec(func(t pgconn.CommandTag) error { tag = t; return nil })
	err := c.SendBatch(ctx, b).Close()
	return tag, err
}

// querier is what a *pgx.Conn and a pgx.Tx both do.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ResolveIntent records an operator's verdict on an uncertain intent.
func (s *Store) ResolveIntent(ctx context.Context, callID string, executed bool, by string, at time.Time) error {
	status := store.StatusExecuted
	if !executed {
		status = store.StatusNotExecuted
	}
	return s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		// error_class as store.ResolvedClass says.
		tag, err := tx.Exec(ctx, `UPDATE settlements SET status = $1, resolved_by = $2, settled_at = $3,
			error_class = CASE WHEN $1 = 'not_executed' THEN $5 WHEN error_class = $6 THEN $7 ELSE error_class END
			WHERE seq = (SELECT seq FROM intents WHERE call_id = $4) AND status = 'uncertain'`, string(status), by, ts(at), callID,
			store.ResolvedClass(false, ""), "unknown_outcome", store.ResolvedClass(true, "unknown_outcome"))
		if err != nil {
			return fmt.Errorf("postgres store: resolve %s: %w", callID, err)
		}
		if tag.RowsAffected() == 0 {
			var cur string
			err := tx.QueryRow(ctx, `SELECT coalesce(s.status, 'started')`+intentFrom+` WHERE i.call_id = $1`, callID).Scan(&cur)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("intent %s: %w", callID, store.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("postgres store: resolve %s: %w", callID, err)
			}
			return fmt.Errorf("resolve %s (%s): %w", callID, cur, store.ErrNotUncertain)
		}
		if !executed {
			return release(ctx, tx, callID)
		}
		return nil
	})
}

// GetIntent returns the intent with this call id, or ErrNotFound.
func (s *Store) GetIntent(ctx context.Context, callID string) (*store.Intent, error) {
	in, err := s.readIntent(ctx, `SELECT `+intentCols+intentFrom+` WHERE i.call_id = $1`, callID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("intent %s: %w", callID, store.ErrNotFound)
	}
	return in, err
}

// GetIntentByKey returns the caller's intent with this idempotency key, or
// ErrNotFound.
func (s *Store) GetIntentByKey(ctx context.Context, caller, key string) (*store.Intent, error) {
	in, err := s.readIntent(ctx, `SELECT `+intentCols+intentFrom+` WHERE i.caller = $1 AND i.idempotency_key = $2`, caller, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("idempotency key %q: %w", key, store.ErrNotFound)
	}
	return in, err
}

func (s *Store) readIntent(ctx context.Context, query string, args ...any) (*store.Intent, error) {
	var in *store.Intent
	err := s.read(ctx, func(c *pgx.Conn) error {
		var err error
		in, err = scanIntent(c.QueryRow(ctx, query, args...))
		return err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres store: %w", err)
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
// the cursor is the commit sequence number of the last intent listed.
func (s *Store) PageIntents(ctx context.Context, f store.IntentFilter, cursor string) (store.IntentPage, error) {
	var before int64
	if cursor != "" {
		n, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || n <= 0 {
			return store.IntentPage{}, fmt.Errorf("postgres store: cursor %q: %w", cursor, store.ErrBadCursor)
		}
		before = n
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	// A status names where to look: started intents are the rows of
	// open_intents (the calls in flight), the rare statuses an index of
	// settlements; key is the seq of the table walked newest first.
	from, key := intentFrom, "i.seq"
	switch f.Status {
	case "":
	case store.StatusStarted:
		from, key = ` FROM open_intents o JOIN intents i ON i.seq = o.seq LEFT JOIN settlements s ON s.seq = i.seq`, "o.seq"
		where = append(where, `s.seq IS NULL`)
	case store.StatusSucceeded:
		add("s.status = ?", string(f.Status))
	default:
		from, key = ` FROM settlements s JOIN intents i ON i.seq = s.seq`, "s.seq"
		add("s.status = ?", string(f.Status))
		where = append(where, `s.status <> 'succeeded'`)
	}
	if f.Caller != "" {
		add("i.caller = ?", f.Caller)
	}
	if f.Tool != "" {
		add("i.tool = ?", f.Tool)
	}
	if before > 0 {
		add(key+" < ?", before)
	}
	q := `SELECT ` + key + `, ` + intentCols + from
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	args = append(args, limit+1) // one more tells whether a next page exists
	q += ` ORDER BY ` + key + ` DESC LIMIT $` + strconv.Itoa(len(args))
	var p store.IntentPage
	err := s.read(ctx, func(c *pgx.Conn) error {
		p = store.IntentPage{}
		rows, err := c.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var last int64
		for rows.Next() {
			if len(p.Intents) == limit {
				p.Next = strconv.FormatInt(last, 10)
				break
			}
			in, err := scanIntent(seqRow{rows, &last})
			if err != nil {
				return err
			}
			p.Intents = append(p.Intents, *in)
		}
		return rows.Err()
	})
	if err != nil {
		return store.IntentPage{}, fmt.Errorf("postgres store: list intents: %w", err)
	}
	return p, nil
}

// seqRow scans the seq column in front of the intent's columns.
type seqRow struct {
	r   pgx.Row
	seq *int64
}

func (s seqRow) Scan(dest ...any) error { return s.r.Scan(append([]any{s.seq}, dest...)...) }

func scanIntent(r pgx.Row) (*store.Intent, error) {
	var in store.Intent
	var key, approval, client, protocol pgtype.Text
	var status string
	var created, settled pgtype.Timestamptz
	if err := r.Scan(&in.CallID, &in.Caller, &in.Session, &in.Tool, &in.DefinitionHash, &in.Arguments, &in.ArgsDigest,
		&key, &approval, &in.Incarnation, &status, &in.Result, &in.ErrorClass, &in.ErrorMessage,
		&in.ResolvedBy, &created, &settled, &client, &protocol, &in.ErrorDetail); err != nil {
		return nil, err
	}
	in.IdempotencyKey, in.ApprovalID, in.Status = key.String, approval.String, store.Status(status)
	in.ClientInfo, in.ProtocolVersion = client.String, protocol.String
	in.CreatedAt, in.SettledAt = fromTS(created), fromTS(settled)
	return &in, nil
}

// BudgetUsage lists the budget held per (scope, key, window).
func (s *Store) BudgetUsage(ctx context.Context) ([]store.Usage, error) {
	var out []store.Usage
	err := s.read(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT scope, key, per, window_start, quota, used FROM budget_usage ORDER BY scope, key, per, window_start`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanUsage)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: budget usage: %w", err)
	}
	return out, nil
}

func scanUsage(r pgx.CollectableRow) (store.Usage, error) {
	var u store.Usage
	var per, start int64
	err := r.Scan(&u.Scope, &u.Key, &per, &start, &u.Quota, &u.Used)
	u.Window = budget.WindowOf(per, start)
	return u, err
}

// ts encodes t for storage: NULL for the zero time.
func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// cmpTS encodes t for comparison: the zero time is before every other.
func cmpTS(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}

func fromTS(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time.UTC()
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
