package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
)

// pruneChunk is how many intents one pruning statement examines, so no
// transaction of Prune holds many row locks or runs for long.
const pruneChunk = 1000

// pruneIntents examines the pruneChunk intents after seq $1 (commit order)
// and deletes those settled (terminal) before $3 with their reservations,
// in one statement. It returns the last seq examined, how many were
// examined, whether any was created before $3, and how many reservations
// and intents it deleted.
const pruneIntents = `WITH c AS (
		SELECT i.seq, i.call_id, s.status, s.settled_at, i.created_at FROM intents i LEFT JOIN settlements s ON s.seq = i.seq
		WHERE i.seq > $1 ORDER BY i.seq LIMIT $2),
	d AS (SELECT seq FROM c WHERE status IN ('succeeded', 'failed', 'executed', 'not_executed') AND settled_at < $3),
	ds AS (DELETE FROM settlements WHERE seq IN (SELECT seq FROM d)
		AND status IN ('succeeded', 'failed', 'executed', 'not_executed') RETURNING seq),
	r AS (DELETE FROM reservations WHERE call_id IN (SELECT call_id FROM c WHERE seq IN (SELECT seq FROM ds)) RETURNING 1),
	i AS (DELETE FROM intents WHERE seq IN (SELECT seq FROM ds) RETURNING 1)
	SELECT coalesce((SELECT max(seq) FROM c), $1), (SELECT count(*) FROM c),
		coalesce((SELECT bool_or(created_at IS NULL OR created_at < $3) FROM c), false),
		(SELECT count(*) FROM r), (SELECT count(*) FROM i)`

// Prune deletes what ended before before (see store.Retention). Intents
// are walked in commit order (the primary key) rather than through an
// index on their settlement, which every settlement would have to
// maintain; the walk stops at the first chunk in which no intent was
// created before before, since an intent settles after it is created.
func (s *Store) Prune(ctx context.Context, before time.Time) (store.PruneResult, error) {
	var total store.PruneResult
	var after int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n, res, ins int64
		var old bool
		err := s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
			return c.QueryRow(ctx, pruneIntents, after, pruneChunk, before).Scan(&after, &n, &old, &res, &ins)
		})
		if err != nil {
			return total, fmt.Errorf("postgres store: prune intents: %w", err)
		}
		total.Reservations += res
		total.Intents += ins
		if n < pruneChunk || !old {
			break
		}
	}
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var r store.PruneResult
		tag, err := tx.Exec(ctx, `DELETE FROM approvals WHERE expires_at < $1`, before)
		if err != nil {
			return err
		}
		r.Approvals = tag.RowsAffected()
		if tag, err = tx.Exec(ctx, `DELETE FROM tasks WHERE expires_at < $1`, before); err != nil {
			return err
		}
		r.Tasks = tag.RowsAffected()
		// An incarnation some intent still names stays: its intents are
		// younger or unsettled (and recovery reads their incarnation).
		tag, err = tx.Exec(ctx, `DELETE FROM incarnations WHERE state IN ('closed', 'dead') AND ended_at < $1
			AND NOT EXISTS (SELECT 1 FROM intents WHERE intents.incarnation = incarnations.id)`, before)
		if err != nil {
			return err
		}
		r.Incarnations = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `DELETE FROM budget_usage WHERE per > 0 AND window_start + per <= $1`, before.Unix())
		if err != nil {
			return err
		}
		r.Windows = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `DELETE FROM refusals WHERE at < $1`, before)
		if err != nil {
			return err
		}
		r.Refusals = tag.RowsAffected()
		total.Add(r)
		return nil
	})
	if err != nil {
		return total, fmt.Errorf("postgres store: prune: %w", err)
	}
	return total, nil
}

// ResetBudget removes (scope, key)'s usage in every window; its
// reservations are marked released so that a later release of one gives
// nothing back. The usage rows are locked first, in the order reservations
// lock them.
func (s *Store) ResetBudget(ctx context.Context, scope, key string) ([]store.Usage, error) {
	var out []store.Usage
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT scope, key, per, window_start, quota, used FROM budget_usage
			WHERE scope = $1 AND key = $2 ORDER BY scope, key, per, window_start FOR UPDATE`, scope, key)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, scanUsage); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE reservations SET released = true WHERE scope = $1 AND key = $2 AND NOT released`, scope, key); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM budget_usage WHERE scope = $1 AND key = $2`, scope, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: reset budget %s %q: %w", scope, key, err)
	}
	return out, nil
}
