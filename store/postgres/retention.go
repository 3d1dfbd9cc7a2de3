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
// and deletes those settled (terminal) before $3, in one statement (their
// reservations are in their rows). It returns the last seq examined, how
// many were examined, whether any was created before $3, and how many
// reservations and intents it deleted.
const pruneIntents = `WITH c AS (
		SELECT i.seq, i.call_id, s.status, s.settled_at, i.created_at FROM intents i LEFT JOIN settlements s ON s.seq = i.seq
		WHERE i.seq > $1 ORDER BY i.seq LIMIT $2),
	d AS (SELECT seq FROM c WHERE status IN ('succeeded', 'failed', 'executed', 'not_executed') AND settled_at < $3),
	ds AS (DELETE FROM settlements WHERE seq IN (SELECT seq FROM d)
		AND status IN ('succeeded', 'failed', 'executed', 'not_executed') RETURNING seq),
	i AS (DELETE FROM intents WHERE seq IN (SELECT seq FROM ds) RETURNING coalesce(jsonb_array_length(reservations), 0) AS n)
	SELECT coalesce((SELECT max(seq) FROM c), $1), (SELECT count(*) FROM c),
		coalesce((SELECT bool_or(created_at IS NULL OR created_at < $3) FROM c), false),
		(SELECT coalesce(sum(n), 0) FROM i), (SELECT count(*) FROM i)`

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
		if tag, err = tx.Exec(ctx, `DELETE FROM pending_logins WHERE expires < $1`, before); err != nil {
			return err
		}
		r.Logins = tag.RowsAffected()
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
		// The reset marks of ended windows go with them: a release finds
		// no usage row there to give back to.
		if _, err = tx.Exec(ctx, `DELETE FROM budget_resets WHERE per > 0 AND window_start + per <= $1`, before.Unix()); err != nil {
			return err
		}
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

// ResetBudget removes (scope, key)'s usage in every window. Its
// reservations, inside their intents' rows, stay as they are: each usage
// row removed gets a reset mark (see schema version 10), drawn once the
// rows are locked (in the order reservations lock them), so that a later
// release of a reservation counted in it gives nothing back. A usage row
// made by a reservation committing meanwhile is not seen, not removed and
// not marked: that reservation came after the reset.
func (s *Store) ResetBudget(ctx context.Context, scope, key string) ([]store.Usage, error) {
	var out []store.Usage
	err := s.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT scope, key, per, window_start, quota, used FROM budget_usage
			WHERE scope = $1 AND key = $2 ORDER BY scope, key, per, window_start FOR UPDATE`, scope, key)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectRows(rows, scanUsage); err != nil || len(out) == 0 {
			return err
		}
		pers, starts := make([]int64, len(out)), make([]int64, len(out))
		for i, u := range out {
			pers[i], starts[i] = u.Window.PerSeconds(), u.Window.StartSeconds()
		}
		// Exactly the rows locked above; the mark is drawn after their
		// locks were taken, so above the seq of every intent counted in
		// them.
		_, err = tx.Exec(ctx, `WITH m AS (SELECT nextval(pg_get_serial_sequence('intents', 'seq')) AS mark),
			d AS (DELETE FROM budget_usage WHERE scope = $1 AND key = $2
				AND (per, window_start) IN (SELECT * FROM unnest($3::bigint[], $4::bigint[]))
				RETURNING scope, key, per, window_start)
			INSERT INTO budget_resets (scope, key, per, window_start, mark)
			SELECT d.scope, d.key, d.per, d.window_start, m.mark FROM d, m
			ON CONFLICT (scope, key, per, window_start) DO UPDATE SET mark = excluded.mark`, scope, key, pers, starts)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: reset budget %s %q: %w", scope, key, err)
	}
	return out, nil
}
