package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

const taskCols = `id, caller, approval_id, tool, arguments, client_info, protocol_version,
	status, run_by, outcome, created_at, updated_at, expires_at`

// CreateTask records a new waiting task; a task already made for the same
// approval request (by any replica) is returned with ErrDuplicateKey: the
// unique approval_id decides, in one statement.
func (s *Store) CreateTask(ctx context.Context, t *store.Task) (*store.Task, error) {
	var existing *store.Task
	err := s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
		existing = nil
		tag, err := c.Exec(ctx, `INSERT INTO tasks (`+taskCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '', NULL, $9, $10, $11)
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
			outcome = coalesce($4::bytea, outcome)
			WHERE id = $5 AND status = $6`,
			string(u.To), ts(u.At), u.RunBy, outcome, id, string(u.From))
		if err != nil {
			return fmt.Errorf("postgres store: update task %s: %w", id, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var status string
		if err := c.QueryRow(ctx, `SELECT status FROM tasks WHERE id = $1`, id).Scan(&status); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task %s: %w", id, store.ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("postgres store: task %s: %w", id, err)
		}
		return fmt.Errorf("task %s is %s, not %s: %w", id, status, u.From, store.ErrTaskMoved)
	})
}

func scanTask(r pgx.Row) (*store.Task, error) {
	var t store.Task
	var status string
	var created, updated, expires pgtype.Timestamptz
	if err := r.Scan(&t.ID, &t.Caller, &t.ApprovalID, &t.Tool, &t.Arguments, &t.ClientInfo, &t.ProtocolVersion,
		&status, &t.RunBy, &t.Outcome, &created, &updated, &expires); err != nil {
		return nil, err
	}
	t.Status = store.TaskStatus(status)
	t.CreatedAt, t.UpdatedAt, t.ExpiresAt = fromTS(created), fromTS(updated), fromTS(expires)
	return &t, nil
}
