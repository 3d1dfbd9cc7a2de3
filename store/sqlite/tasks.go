package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/store"
)

const taskCols = `id, caller, approval_id, tool, arguments, client_info, protocol_version,
	status, run_by, outcome, created_at, updated_at, expires_at`

// CreateTask records a new waiting task; a task already made for the same
// approval request is returned with ErrDuplicateKey. The look and the
// insert are one write transaction.
func (s *Store) CreateTask(ctx context.Context, t *store.Task) (*store.Task, error) {
	var existing *store.Task
	err := s.write1(ctx, func(w *wtx) error {
		existing = nil
		o, err := scanTask(w.queryRow(`SELECT `+taskCols+` FROM tasks WHERE approval_id = ?`, t.ApprovalID))
		switch {
		case err == nil:
			existing = o
			return fmt.Errorf("task for approval %s: %w", t.ApprovalID, store.ErrDuplicateKey)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("sqlite store: task for approval %s: %w", t.ApprovalID, err)
		}
		_, err = w.exec(`INSERT INTO tasks (`+taskCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', NULL, ?, ?, ?)`,
			t.ID, t.Caller, t.ApprovalID, t.Tool, t.Arguments, t.ClientInfo, t.ProtocolVersion,
			string(store.TaskWaiting), nanos(t.CreatedAt), nanos(t.UpdatedAt), nanos(t.ExpiresAt))
		if err != nil {
			return fmt.Errorf("sqlite store: create task %s: %w", t.ID, err)
		}
		return nil
	})
	return existing, err
}

// GetTask returns the task, or ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id string) (*store.Task, error) {
	st, err := s.rstmt(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = ?`)
	if err != nil {
		return nil, err
	}
	var t *store.Task
	err = retryBusy(ctx, s.log, func() error {
		t, err = scanTask(st.QueryRowContext(ctx, id))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: task %s: %w", id, err)
	}
	return t, nil
}

// UpdateTask moves the task from u.From to u.To: one UPDATE conditioned
// on the status, so of two processes making the same move one wins.
func (s *Store) UpdateTask(ctx context.Context, id string, u store.TaskUpdate) error {
	if err := store.CheckTaskMove(u); err != nil {
		return err
	}
	return s.write1(ctx, func(w *wtx) error {
		n, err := w.affected(`UPDATE tasks SET status = ?, updated_at = ?,
			run_by = CASE WHEN ? = 'running' THEN ? ELSE run_by END,
			outcome = coalesce(?, outcome)
			WHERE id = ? AND status = ?`,
			string(u.To), nanos(u.At), string(u.To), u.RunBy, nullBytes(u.Outcome), id, string(u.From))
		if err != nil {
			return fmt.Errorf("sqlite store: update task %s: %w", id, err)
		}
		if n == 1 {
			return nil
		}
		var status string
		if err := w.queryRow(`SELECT status FROM tasks WHERE id = ?`, id).Scan(&status); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %s: %w", id, store.ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("sqlite store: task %s: %w", id, err)
		}
		return fmt.Errorf("task %s is %s, not %s: %w", id, status, u.From, store.ErrTaskMoved)
	})
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func scanTask(r scanner) (*store.Task, error) {
	var t store.Task
	var status string
	var created, updated, expires sql.NullInt64
	if err := r.Scan(&t.ID, &t.Caller, &t.ApprovalID, &t.Tool, &t.Arguments, &t.ClientInfo, &t.ProtocolVersion,
		&status, &t.RunBy, &t.Outcome, &created, &updated, &expires); err != nil {
		return nil, err
	}
	t.Status = store.TaskStatus(status)
	t.CreatedAt, t.UpdatedAt, t.ExpiresAt = fromNanos(created), fromNanos(updated), fromNanos(expires)
	return &t, nil
}
