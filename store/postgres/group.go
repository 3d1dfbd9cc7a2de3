package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Group commit of intents.
//
// A synchronous commit waits for its WAL flush; the server shares a flush
// among the transactions committing at that moment, but each transaction
// still holds its budget rows' locks until its own flush, so the calls of
// one caller (one budget row) commit one flush after another. The
// committer instead takes every intent queued at the moment (up to
// maxGroup) and commits them in ONE transaction: one flush, one round trip,
// and one update per budget row and window with the group's summed amount
// (a per-group reservation), so a budget row is locked once per group
// rather than once per call, by every replica alike.
//
// A group is all or nothing, like each intent in it. When it cannot commit
// as a whole (a reservation that does not fit, an idempotency key or call
// id already taken, a lease that expired, a deadlock), nothing of it is
// written and each of its intents is committed again on its own by
// commitOne, which gives each the exact outcome and error it would have
// had alone. Requests that consume an approval, and groups whose
// reservations of one (scope, key, window) carry different quotas (or a
// negative amount), are committed on their own from the start. So a group never reserves what
// its intents could not have reserved one by one: the summed amount fits
// the quota exactly when each intent's, taken in turn, does.
//
// Across replicas the groups of one budget row still take turns (each
// holds the row until its flush), but each turn carries a whole group, and
// a replica's group grows while it waits. Sharded usage rows (each replica
// counting in its own slice of the quota) would let replicas flush
// concurrently; a first version deadlocked under contention (a shard row
// created on the locked path before the existing ones were locked) and is
// not part of this design.

const (
	// maxGroup is the most intents committed in one transaction.
	maxGroup = 64
)

// commitJob is one CommitIntent waiting for a committer.
type commitJob struct {
	ctx      context.Context
	req      *store.CommitRequest
	existing *store.Intent
	err      error
	done     chan struct{}
}

// committers is the queue of intents to commit and the goroutines that
// commit them.
type committers struct {
	jobs    chan *commitJob
	settles chan *settleJob
	stop    chan struct{}
	wg      sync.WaitGroup

	groups  atomic.Int64 // transactions committing more than one intent
	grouped atomic.Int64 // intents committed in them
	single  atomic.Int64 // intents committed on their own
}

// CommitStats counts how the intents were committed.
type CommitStats struct {
	// Groups is the number of transactions that committed several intents
	// at once, Grouped the intents they committed.
	Groups, Grouped int64
	// Single is the number of intents committed in a transaction of their
	// own.
	Single int64
}

// CommitStats reports how the intents committed so far were committed.
func (s *Store) CommitStats() CommitStats {
	return CommitStats{Groups: s.commits.groups.Load(), Grouped: s.commits.grouped.Load(), Single: s.commits.single.Load()}
}

// startCommitters starts the committer and the settler. One of each: the
// groups of one Store all lock the same budget rows, so a second committer
// would mostly wait for the first's flush with a smaller group, whereas a
// single one takes, at each round, everything queued while the previous
// group was flushed: its groups grow with the load (as the SQLite
// writer's do).
func (s *Store) startCommitters() {
	s.commits.jobs = make(chan *commitJob, maxGroup)
	s.commits.settles = make(chan *settleJob, maxGroup)
	s.commits.stop = make(chan struct{})
	s.commits.wg.Go(s.committer)
	s.commits.wg.Go(s.settler)
}

// stopCommitters stops the committers once no CommitIntent is in
// progress (the queue is then empty).
func (s *Store) stopCommitters() {
	if s.commits.stop == nil {
		return
	}
	close(s.commits.stop)
	s.commits.wg.Wait()
}

// enqueueCommit hands req to a committer and waits for its outcome. Once
// queued, the request is committed or refused to its end even if ctx ends
// (as every write: see the package comment); ctx bounds the wait for a
// place in the queue and, before a committer takes it, cancels it.
func (s *Store) enqueueCommit(ctx context.Context, req *store.CommitRequest) (*store.Intent, error) {
	j := &commitJob{ctx: ctx, req: req, done: make(chan struct{})}
	select {
	case s.commits.jobs <- j:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	<-j.done
	return j.existing, j.err
}

// committer commits groups of queued intents until stopCommitters.
func (s *Store) committer() {
	for {
		group, ok := nextGroup(s.commits.jobs, s.commits.stop)
		if !ok {
			return
		}
		s.commitGroup(group)
	}
}

// nextGroup waits for one job, then takes those already queued behind it,
// up to maxGroup; false once stop is closed.
func nextGroup[J any](jobs <-chan J, stop <-chan struct{}) ([]J, bool) {
	var group []J
	select {
	case j := <-jobs:
		group = append(group, j)
	case <-stop:
		return nil, false
	}
	for len(group) < maxGroup {
		select {
		case j := <-jobs:
			group = append(group, j)
		default:
			return group, true
		}
	}
	return group, true
}

// commitGroup commits the jobs, together when it can (see the comment at
// the top of this file), and ends each job.
func (s *Store) commitGroup(group []*commitJob) {
	var together, alone []*commitJob
	for _, j := range group {
		switch {
		case j.ctx.Err() != nil:
			j.err = j.ctx.Err()
			close(j.done)
		case j.req.ApprovalID != "":
			alone = append(alone, j)
		default:
			together = append(together, j)
		}
	}
	if len(together) > 1 {
		err := s.commitTogether(together)
		if err == nil {
			s.commits.groups.Add(1)
			s.commits.grouped.Add(int64(len(together)))
			for _, j := range together {
				close(j.done)
			}
			together = nil
		} else {
			s.log.Debug("group commit fell back to single commits", "intents", len(together), "error", err)
		}
	}
	alone = append(alone, together...)
	// Each on its own, concurrently: the server shares their flushes.
	var wg sync.WaitGroup
	for _, j := range alone {
		wg.Go(func() {
			j.existing, j.err = s.commitOne(j.ctx, j.req)
			if j.err == nil {
				s.commits.single.Add(1)
			}
			close(j.done)
		})
	}
	wg.Wait()
}

// errNotTogether: the group's reservations of one (scope, key, window)
// carry different quotas, or one is negative (then a sum that fits does not
// prove that each fits in turn); its intents are committed one by one.
var errNotTogether = errors.New("reservations of one budget with different quotas")

// insertIntents inserts started intents, one per element of its arrays,
// with their reservations, while this incarnation ($1) is alive with an
// unexpired lease (see insertIntent, which it is the many-rows form of),
// with their open rows, and returns each one's call id and seq. It runs
// after reserveSums, in the same transaction (see insertIntent for why).
const insertIntents = `WITH i AS (INSERT INTO intents (call_id, caller, session, tool, definition_hash, arguments,
		args_digest, idempotency_key, approval_id, incarnation, created_at, client, protocol_version, reservations)
	SELECT u.call_id, u.caller, u.session, u.tool, u.definition_hash, u.arguments,
		u.args_digest, u.idempotency_key, u.approval_id, inc.id, u.created_at, u.client, u.protocol_version,
		u.reservations::jsonb
	FROM (SELECT coalesce((SELECT i.id FROM incarnations i
			WHERE i.id = $1 AND i.state = 'alive' AND i.lease_expires_at > clock_timestamp()
			FOR KEY SHARE), backplane_refuse('incarnation')) AS id) inc,
		unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[], $8::text[],
			$9::text[], $10::text[], $11::timestamptz[], $12::text[], $13::text[], $14::text[]) WITH ORDINALITY
			AS u(call_id, caller, session, tool, definition_hash, arguments, args_digest,
				idempotency_key, approval_id, created_at, client, protocol_version, reservations, n)
	ORDER BY u.n
	RETURNING seq, call_id, incarnation),
	o AS (INSERT INTO open_intents (seq, incarnation) SELECT seq, incarnation FROM i)
	SELECT call_id, seq FROM i`

// reserveSums adds to the usage of each budget row named by the elements
// of its arrays (scope $1, key $2, window $3 seconds long starting at $4)
// the amount $6, unless that takes it above the quota $5; it is refused
// ('budget') when any row does not fit. Rows are locked in the arrays'
// order (WITH ORDINALITY): the caller sends them in the one global order
// (see commitTogether). An upsert whose condition refuses the update still
// locks its row and returns nothing, so fewer returned rows than elements
// is a refusal. One statement for the whole group, rather than one per
// budget row: each statement costs the server a round of its executor.
const reserveSums = `WITH u AS (
		INSERT INTO budget_usage AS b (scope, key, per, window_start, quota, used)
		SELECT w.scope, w.key, w.per, w.window_start, w.quota,
			CASE WHEN w.amount <= w.quota THEN w.amount ELSE backplane_refuse('budget')::bigint END
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[]) WITH ORDINALITY
			AS w(scope, key, per, window_start, quota, amount, n)
		ORDER BY w.n
		ON CONFLICT (scope, key, per, window_start) DO UPDATE SET used = b.used + excluded.used, quota = excluded.quota
		WHERE b.used + excluded.used <= excluded.quota
		RETURNING 1)
	SELECT CASE WHEN (SELECT count(*) FROM u) = cardinality($1::text[]) THEN 'reserved' ELSE backplane_refuse('budget') END`

// budgetKey is one budget row: a (scope, key) in one window.
type budgetKey struct {
	scope, key string
	per, start int64
}

// commitTogether commits the jobs' intents and reservations in one
// transaction (one pgx batch, one round trip) or nothing of them.
func (s *Store) commitTogether(jobs []*commitJob) error {
	n := len(jobs)
	var (
		callIDs, callers, sessions, tools, defs, digests = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		args                                             = make([][]byte, n)
		keys, approvals                                  = make([]pgtype.Text, n), make([]pgtype.Text, n)
		clients, protocols, held                         = make([]pgtype.Text, n), make([]pgtype.Text, n), make([]pgtype.Text, n)
		created                                          = make([]pgtype.Timestamptz, n)

		quota = map[budgetKey]int64{}
		sum   = map[budgetKey]int64{}
		buf   []byte
	)
	for i, j := range jobs {
		in := &j.req.Intent
		callIDs[i], callers[i], sessions[i], tools[i], defs[i], digests[i] = in.CallID, in.Caller, in.Session, in.Tool, in.DefinitionHash, in.ArgsDigest
		args[i] = in.Arguments
		keys[i] = pgtype.Text{String: in.IdempotencyKey, Valid: in.IdempotencyKey != ""}
		approvals[i] = pgtype.Text{String: in.ApprovalID, Valid: in.ApprovalID != ""}
		clients[i] = pgtype.Text{String: in.ClientInfo, Valid: in.ClientInfo != ""}
		protocols[i] = pgtype.Text{String: in.ProtocolVersion, Valid: in.ProtocolVersion != ""}
		if !in.CreatedAt.IsZero() {
			created[i] = pgtype.Timestamptz{Time: in.CreatedAt, Valid: true}
		}
		if len(j.req.Reservations) > 0 {
			buf = appendReservations(buf[:0], j.req.Reservations)
			held[i] = pgtype.Text{String: string(buf), Valid: true}
		}
		for _, r := range j.req.Reservations {
			k := budgetKey{r.Scope, r.Key, r.Window.PerSeconds(), r.Window.StartSeconds()}
			if q, ok := quota[k]; ok && q != r.Quota || r.Amount < 0 {
				return errNotTogether
			}
			quota[k] = r.Quota
			sum[k] += r.Amount
		}
	}
	// Budget rows in the one global order every transaction locks them in.
	rows := slices.SortedFunc(maps.Keys(sum), func(a, b budgetKey) int {
		return cmp.Or(strings.Compare(a.scope, b.scope), strings.Compare(a.key, b.key), cmp.Compare(a.per, b.per), cmp.Compare(a.start, b.start))
	})
	bScope, bKey := make([]string, len(rows)), make([]string, len(rows))
	bPer, bStart, bQuota, bSum := make([]int64, len(rows)), make([]int64, len(rows)), make([]int64, len(rows)), make([]int64, len(rows))
	for i, k := range rows {
		bScope[i], bKey[i], bPer[i], bStart[i], bQuota[i], bSum[i] = k.scope, k.key, k.per, k.start, quota[k], sum[k]
	}
	// The budget rows first, then the intents (see insertIntent).
	b := &pgx.Batch{}
	if len(rows) > 0 {
		b.Queue(reserveSums, bScope, bKey, bPer, bStart, bQuota, bSum)
	}
	b.Queue(insertIntents, s.incarnation, callIDs, callers, sessions, tools, defs, args, digests, keys, approvals, created, clients, protocols, held)
	ids, seqs := make([]string, 0, n), make([]int64, 0, n)
	readSeqs := func(rows pgx.Rows) error {
		ids, seqs = ids[:0], seqs[:0]
		for rows.Next() {
			var id string
			var seq int64
			if err := rows.Scan(&id, &seq); err != nil {
				return err
			}
			ids, seqs = append(ids, id), append(seqs, seq)
		}
		return rows.Err()
	}
	return s.writeConn(context.Background(), func(ctx context.Context, c *pgx.Conn) error {
		if err := prepare(ctx, c, insertIntents, reserveSums); err != nil {
			return fmt.Errorf("postgres store: commit %d intents together: %w", n, err)
		}
		if _, err := sendBatch(ctx, c, b, b.Len()-1, readSeqs); err != nil {
			return fmt.Errorf("postgres store: commit %d intents together: %w", n, err)
		}
		s.openMu.Lock()
		for i, id := range ids {
			s.open[id] = seqs[i]
		}
		s.openMu.Unlock()
		return nil
	})
}

// Group settlement: the settlements (succeeded or uncertain) queued at the
// moment are written by one statement (their open rows deleted, their
// settlement rows inserted) in one asynchronously committed
// transaction (see asyncCommit). The statement names the intents by seq,
// which this Store learnt when it committed them (Store.open), so it
// reads no journal row: a join of the call ids with intents was planned,
// for a prepared statement, as a scan of the whole journal. The intents it
// could not settle (no longer started, of another incarnation, or this
// incarnation no longer alive), and those whose seq this Store does not
// know, are settled on their own by settleOne, which returns the exact
// error; so are the second and later settlements of one call id in a
// group, after the group, so that exactly one of them wins. Failed
// settlements release budget and are always settled on their own.

// settleJob is one Settle waiting for a settler.
type settleJob struct {
	ctx    context.Context
	callID string
	seq    int64 // the intent's, when this Store knows it (Store.open)
	st     store.Settlement
	err    error
	done   chan struct{}
}

// settleIntents settles the started intents of this incarnation ($1, while
// it is alive) whose seqs are $2, each with the values at the same index,
// and returns the seqs it settled: the open rows of those still started by
// $1 are deleted and their settlement rows inserted (see settleIntent).
const settleIntents = `WITH o AS (DELETE FROM open_intents WHERE seq = ANY($2::bigint[]) AND incarnation = $1
		AND EXISTS (SELECT 1 FROM incarnations WHERE id = $1 AND state = 'alive')
		RETURNING seq)
	INSERT INTO settlements (seq, status, result, error_class, error_message, settled_at, error_detail)
	SELECT u.seq, u.status, u.result, u.error_class, u.error_message, u.settled_at, u.error_detail
	FROM unnest($2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::timestamptz[], $8::bytea[])
		AS u(seq, status, result, error_class, error_message, settled_at, error_detail)
	JOIN o ON o.seq = u.seq
	RETURNING seq`

// enqueueSettle hands a settlement to a settler and waits for its outcome
// (see enqueueCommit).
func (s *Store) enqueueSettle(ctx context.Context, callID string, st store.Settlement) error {
	j := &settleJob{ctx: ctx, callID: callID, st: st, done: make(chan struct{})}
	select {
	case s.commits.settles <- j:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-j.done
	return j.err
}

// settler settles groups of queued settlements until stopCommitters.
func (s *Store) settler() {
	for {
		group, ok := nextGroup(s.commits.settles, s.commits.stop)
		if !ok {
			return
		}
		s.settleGroup(group)
	}
}

// settleGroup settles the jobs, together when there are several, and ends
// each job.
func (s *Store) settleGroup(group []*settleJob) {
	var together, alone, later []*settleJob
	seen := map[string]bool{}
	for _, j := range group {
		switch {
		case j.ctx.Err() != nil:
			j.err = j.ctx.Err()
			close(j.done)
		case seen[j.callID]:
			later = append(later, j)
		default:
			seen[j.callID] = true
			if seq, ok := s.openSeq(j.callID); ok {
				j.seq = seq
				together = append(together, j)
			} else {
				alone = append(alone, j)
			}
		}
	}
	if len(together) > 1 {
		settled, err := s.settleTogether(together)
		if err != nil {
			s.log.Debug("group settlement fell back to single settlements", "intents", len(together), "error", err)
		}
		for _, j := range together {
			if settled[j.seq] {
				s.forget(j.callID)
				close(j.done)
			} else {
				alone = append(alone, j)
			}
		}
	} else {
		alone = append(alone, together...)
	}
	run := func(jobs []*settleJob) {
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() {
				j.err = s.settleOne(j.ctx, j.callID, j.st)
				close(j.done)
			})
		}
		wg.Wait()
	}
	run(alone)
	run(later)
}

// settleTogether settles the jobs' intents, whose seqs are known, in one
// asynchronously committed transaction and returns the seqs it settled.
func (s *Store) settleTogether(jobs []*settleJob) (map[int64]bool, error) {
	n := len(jobs)
	seqs := make([]int64, n)
	statuses, classes, messages := make([]string, n), make([]string, n), make([]string, n)
	results, details := make([][]byte, n), make([][]byte, n)
	at := make([]pgtype.Timestamptz, n)
	for i, j := range jobs {
		seqs[i], statuses[i], classes[i], messages[i] = j.seq, string(j.st.Status), j.st.ErrorClass, j.st.ErrorMessage
		results[i], details[i] = j.st.Result, j.st.ErrorDetail
		if !j.st.At.IsZero() {
			at[i] = pgtype.Timestamptz{Time: j.st.At, Valid: true}
		}
	}
	settled := make(map[int64]bool, n)
	err := s.writeConn(context.Background(), func(ctx context.Context, c *pgx.Conn) error {
		clear(settled)
		if err := prepare(ctx, c, asyncCommit, settleIntents); err != nil {
			return fmt.Errorf("postgres store: settle %d intents together: %w", n, err)
		}
		b := &pgx.Batch{}
		b.Queue(asyncCommit)
		b.Queue(settleIntents, s.incarnation, seqs, statuses, results, classes, messages, at, details).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var seq int64
				if err := rows.Scan(&seq); err != nil {
					return err
				}
				settled[seq] = true
			}
			return rows.Err()
		})
		if err := c.SendBatch(ctx, b).Close(); err != nil {
			clear(settled) // rolled back, or its commit is unknown
			return fmt.Errorf("postgres store: settle %d intents together: %w", n, err)
		}
		return nil
	})
	return settled, err
}
