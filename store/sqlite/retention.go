package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
)

// pruneChunk is how many intents one pruning transaction examines: small
// enough that the calls whose writes share its transaction are not held up
// for long, large enough that a long backlog is pruned in few commits.
const pruneChunk = 512

// terminalStatuses are the statuses Prune may delete, as SQL literals.
const terminalStatuses = `('succeeded', 'failed', 'executed', 'not_executed')`

// Prune deletes what ended before before (see store.Retention), in
// transactions of at most pruneChunk intents, oldest commit first, then
// returns the freed pages to the file system (incremental vacuum).
//
// Intents are walked by commit order (the primary key), not by an index on
// their settlement time, which every settlement would have to maintain: the
// walk stops at the first chunk in which no intent was created before
// before, since an intent settles after it is created.
func (s *Store) Prune(ctx context.Context, before time.Time) (store.PruneResult, error) {
	var total store.PruneResult
	cut := before.UnixNano()
	var after int64 // the last seq examined
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var r store.PruneResult
		more := false
		err := s.write(ctx, func(w *wtx) error {
			r, more = store.PruneResult{}, false
			rows, err := w.query(`SELECT i.seq, coalesce(s.status, 'started'), s.settled_at, i.created_at,
				coalesce(json_array_length(i.reservations), 0) FROM intents i LEFT JOIN settlements s ON s.seq = i.seq
				WHERE i.seq > ? ORDER BY i.seq LIMIT ?`, after, pruneChunk)
			if err != nil {
				return err
			}
			var ids []int64  // seqs
			var held []int64 // the reservations of each of ids, pruned with it
			last, n, old := after, 0, false
			for rows.Next() {
				var seq int64
				var status string
				var settled, created sql.NullInt64
				var reservations int64
				if err := rows.Scan(&seq, &status, &settled, &created, &reservations); err != nil {
					rows.Close()
					return err
				}
				last, n = seq, n+1
				if !created.Valid || created.Int64 < cut {
					old = true
				}
				if store.Status(status).Terminal() && settled.Valid && settled.Int64 < cut {
					ids = append(ids, seq)
					held = append(held, reservations)
				}
			}
			if err := rows.Close(); err != nil {
				return err
			}
			for i, seq := range ids {
				// The status condition again: nothing settled it since the
				// SELECT (same transaction), but the rule is stated where
				// the row goes. Its reservations are in the row.
				k, err := w.affected(`DELETE FROM settlements WHERE seq = ? AND status IN `+terminalStatuses, seq)
				if err != nil {
					return err
				}
				if k == 1 {
					if _, err := w.exec(`DELETE FROM intents WHERE seq = ?`, seq); err != nil {
						return err
					}
				}
				r.Intents += k
				r.Reservations += k * held[i]
			}
			after = last
			more = n == pruneChunk && old
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("sqlite store: prune intents: %w", err)
		}
		total.Add(r)
		if !more {
			break
		}
	}
	err := s.write(ctx, func(w *wtx) error {
		var r store.PruneResult
		var err error
		if r.Approvals, err = w.affected(`DELETE FROM approvals WHERE expires_at < ?`, cut); err != nil {
			return err
		}
		if r.Tasks, err = w.affected(`DELETE FROM tasks WHERE expires_at < ?`, cut); err != nil {
			return err
		}
		if r.Logins, err = w.affected(`DELETE FROM pending_logins WHERE expires < ?`, cut); err != nil {
			return err
		}
		// An incarnation some intent still names stays (the intents'
		// foreign key): its intents are younger or unsettled.
		if r.Incarnations, err = w.affected(`DELETE FROM incarnations WHERE state IN ('closed', 'dead') AND ended_at < ?
			AND NOT EXISTS (SELECT 1 FROM intents WHERE intents.incarnation = incarnations.id)`, cut); err != nil {
			return err
		}
		if r.Windows, err = w.affected(`DELETE FROM budget_usage WHERE per > 0 AND window_start + per <= ?`, before.Unix()); err != nil {
			return err
		}
		if r.Refusals, err = w.affected(`DELETE FROM refusals WHERE at < ?`, cut); err != nil {
			return err
		}
		total.Add(r)
		return nil
	})
	if err != nil {
		return total, fmt.Errorf("sqlite store: prune: %w", err)
	}
	if err := s.vacuum(ctx); err != nil {
		return total, err
	}
	return total, nil
}

// vacuum returns the free pages of the database file to the file system.
func (s *Store) vacuum(ctx context.Context) error {
	err := s.write(ctx, func(w *wtx) error {
		// incremental_vacuum frees one page per step; Exec steps it to
		// the end, freeing every page on the free list.
		_, err := w.s.wc.ExecContext(context.Background(), `PRAGMA incremental_vacuum`)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite store: incremental vacuum: %w", err)
	}
	return nil
}

// ensureIncrementalVacuum makes the database reclaim space on demand
// (auto_vacuum=INCREMENTAL). A new database takes the setting at once; one
// created before it (older versions of this package) needs one full VACUUM
// to switch, done here once and logged: it rewrites the whole file, so the
// first Open after an upgrade of a large journal takes a while.
func ensureIncrementalVacuum(ctx context.Context, c *sql.Conn, s *Store) error {
	mode := func() (int, error) {
		var m int
		err := c.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&m)
		return m, err
	}
	m, err := mode()
	if err != nil || m == 2 {
		return err
	}
	if err := retryBusy(ctx, s.log, func() error {
		_, err := c.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`)
		return err
	}); err != nil {
		return err
	}
	if m, err = mode(); err != nil || m == 2 {
		return err // a new, empty database: set without a rewrite
	}
	s.log.Info("rewriting the database once (VACUUM) to enable incremental vacuum")
	if err := retryBusy(ctx, s.log, func() error {
		_, err := c.ExecContext(ctx, `VACUUM`)
		return err
	}); err != nil {
		return fmt.Errorf("VACUUM to enable incremental vacuum: %w", err)
	}
	if m, err = mode(); err != nil {
		return err
	}
	if m != 2 {
		return fmt.Errorf("auto_vacuum is %d after VACUUM, want 2 (incremental)", m)
	}
	return nil
}

// ResetBudget removes (scope, key)'s usage in every window and moves the
// budget generation on: a usage row made after it has a later generation
// than the reservations taken before it, so that a later release of one of
// those gives nothing back (see schema version 5).
func (s *Store) ResetBudget(ctx context.Context, scope, key string) ([]store.Usage, error) {
	var out []store.Usage
	err := s.write(ctx, func(w *wtx) error {
		out = out[:0]
		rows, err := w.query(`SELECT per, window_start, quota, used FROM budget_usage WHERE scope = ? AND key = ?
			ORDER BY per, window_start`, scope, key)
		if err != nil {
			return err
		}
		for rows.Next() {
			u := store.Usage{Scope: scope, Key: key}
			var per, start int64
			if err := rows.Scan(&per, &start, &u.Quota, &u.Used); err != nil {
				rows.Close()
				return err
			}
			u.Window = budget.WindowOf(per, start)
			out = append(out, u)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if _, err := w.exec(`UPDATE budget_generation SET n = n + 1`); err != nil {
			return err
		}
		_, err = w.exec(`DELETE FROM budget_usage WHERE scope = ? AND key = ?`, scope, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite store: reset budget %s %q: %w", scope, key, err)
	}
	return out, nil
}

// query runs a SELECT of several rows on the writer's connection.
func (w *wtx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}
