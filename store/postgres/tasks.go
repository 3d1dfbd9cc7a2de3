package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

const taskCols = `id, caller, approval_id, tool, arguments, client_info, protocol_version,
	status, run_by, outcome, created_at, updated_at, expires_at, lease_until`

// dueTasksQuery is DueTasks' (store.TaskDue's rule): $1 now, $2 the limit.
const dueTasksQuery = `SELECT t.id, t.caller, t.approval_id, t.tool, t.arguments, t.client_info, t.protocol_version,
	t.status, t.run_by, t.outcome, t.created_at, t.updated_at, t.expires_at, t.lease_until
	FROM tasks t LEFT JOIN approvals a ON a.id = t.approval_id
	WHERE t.status IN ('waiting', 'running') AND t.expires_at > $1 AND (
		(t.status = 'waiting' AND (a.id IS NULL OR a.status <> 'pending' OR a.expires_at <= $1))
		OR (t.status = 'running' AND (t.lease_until IS NULL OR t.lease_until <= $1)))
	ORDER BY t.created_at, t.id LIMIT $2`

// CreateTask records a new waiting task; a task already made for the same
// approval request (by any replica) is returned with ErrDuplicateKey: the
// unique approval_id decides, in one statement.
func (s *Store) CreateTask(ctx context.Context, t *store.Task) (*store.Task, error) {
	var existing *store.Task
	err := s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
		existing = nil
		tag, err := c.Exec(ctx, `INSERT INTO tasks (`+taskCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '', NULL, $9, $10, $11, NULL)
			ON CONFLICT (approval_id) DO NOTHING`,
			t.ID, t.Caller, t.ApprovalID, t.Tool, t.Arguments, t.ClientInfo, t.ProtocolVersion,
			string(store.TaskWaiting), ts(t.CreatedAt), ts(t.UpdatedAt), ts(t.ExpiresAt))
		if err != nil {
			return fmt.Errorf("postgres store: create task %s: %w", t.ID, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		o, err := scanTask(c.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE approval_id = $1`, t.ApprovalID))
		if err != nil {
			return fmt.Errorf("postgres store: task for approval %s: %w", t.ApprovalID, err)
		}
		existing = o
		return fmt.Errorf("task for approval %s: %w", t.ApprovalID, store.ErrDuplicateKey)
	})
	return existing, err
}

// GetTask returns the task, or ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id string) (*store.Task, error) {
	var t *store.Task
	err := s.read(ctx, func(c *pgx.Conn) error {
		var err error
		t, err = scanTask(c.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1`, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres store: task %s: %w", id, err)
	}
	return t, nil
}

// UpdateTask moves the task from u.From to u.To: one UPDATE conditioned
// on the status, so of two replicas making the same move one wins.
func (s *Store) UpdateTask(ctx context.Context, id string, u store.TaskUpdate) error {
	if err := store.CheckTaskMove(u); err != nil {
		return err
	}
	var outcome any
	if len(u.Outcome) > 0 {
		outcome = u.Outcome
	}
	return s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
		tag, err := c.Exec(ctx, `UPDATE tasks SET status = $1, updated_at = $2,
			run_by = CASE WHEN $1 = 'running' THEN $3 ELSE run_by END,
			lease_until = CASE WHEN $1 = 'running' THEN $7::timestamptz ELSE lease_until END,
			outcome = coalesce($4::bytea, outcome)
			WHERE id = $5 AND status = $6 AND ($8 = '' OR run_by = $8)
			AND (NOT $9 OR lease_until IS NULL OR lease_until <= $2)`,
			string(u.To), ts(u.At), u.RunBy, outcome, id, string(u.From), ts(u.LeaseUntil), u.Holder, u.TakesOver())
		if err != nil {
			return fmt.Errorf("postgres store: update task %s: %w", id, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var status, runBy string
		if err := c.QueryRow(ctx, `SELECT status, run_by FROM tasks WHERE id = $1`, id).Scan(&status, &runBy); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task %s: %w", id, store.ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("postgres store: task %s: %w", id, err)
		}
		return fmt.Errorf("task %s is %s (run by %q), not %s (run by %q, or a lapsed lease): %w", id, status, runBy, u.From, u.Holder, store.ErrTaskMoved)
	})
}

// DueTasks lists the tasks a runner should act on (store.TaskDue), oldest
// first: one read, on the partial index of the open tasks.
func (s *Store) DueTasks(ctx context.Context, now time.Time, limit int) ([]store.Task, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []store.Task
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, dueTasksQuery, now, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, err := scanTask(rows)
			if err != nil {
				return err
			}
			out = append(out, *t)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres store: due tasks: %w", err)
	}
	return out, nil
}

func scanTask(r pgx.Row) (*store.Task, error) {
	var t store.Task
	var status string
	var created, updated, expires, lease pgtype.Timestamptz
	if err := r.Scan(&t.ID, &t.Caller, &t.ApprovalID, &t.Tool, &t.Arguments, &t.ClientInfo, &t.ProtocolVersion,
		&status, &t.RunBy, &t.Outcome, &created, &updated, &expires, &lease); err != nil {
		return nil, err
	}
	t.Status = store.TaskStatus(status)
	t.CreatedAt, t.UpdatedAt, t.ExpiresAt = fromTS(created), fromTS(updated), fromTS(expires)
	t.LeaseUntil = fromTS(lease)
	return &t, nil
}
