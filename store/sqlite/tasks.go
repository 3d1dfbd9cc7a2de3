package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
)

const taskCols = `id, caller, approval_id, tool, arguments, client_info, protocol_version,
	status, run_by, outcome, created_at, updated_at, expires_at, lease_until`

// dueTasksQuery is DueTasks' (store.TaskDue's rule): ?1 now, ?2 the limit.
const dueTasksQuery = `SELECT t.id, t.caller, t.approval_id, t.tool, t.arguments, t.client_info, t.protocol_version,
	t.status, t.run_by, t.outcome, t.created_at, t.updated_at, t.expires_at, t.lease_until
	FROM tasks t LEFT JOIN approvals a ON a.id = t.approval_id
	WHERE t.status IN ('waiting', 'running') AND t.expires_at > ?1 AND (
		(t.status = 'waiting' AND (a.id IS NULL OR a.status <> 'pending' OR a.expires_at <= ?1))
		OR (t.status = 'running' AND coalesce(t.lease_until, 0) <= ?1))
	ORDER BY t.created_at, t.id LIMIT ?2`

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
		_, err = w.exec(`INSERT INTO tasks (`+taskCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', NULL, ?, ?, ?, NULL)`,
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
		takeOver := 0
		if u.TakesOver() {
			takeOver = 1
		}
		n, err := w.affected(`UPDATE tasks SET status = ?1, updated_at = ?2,
			run_by = CASE WHEN ?1 = 'running' THEN ?3 ELSE run_by END,
			lease_until = CASE WHEN ?1 = 'running' THEN ?4 ELSE lease_until END,
			outcome = coalesce(?5, outcome)
			WHERE id = ?6 AND status = ?7 AND (?8 = '' OR run_by = ?8) AND (?9 = 0 OR coalesce(lease_until, 0) <= ?10)`,
			string(u.To), nanos(u.At), u.RunBy, nanos(u.LeaseUntil), nullBytes(u.Outcome), id, string(u.From),
			u.Holder, takeOver, cmpNanos(u.At))
		if err != nil {
			return fmt.Errorf("sqlite store: update task %s: %w", id, err)
		}
		if n == 1 {
			return nil
		}
		var status, runBy string
		if err := w.queryRow(`SELECT status, run_by FROM tasks WHERE id = ?`, id).Scan(&status, &runBy); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %s: %w", id, store.ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("sqlite store: task %s: %w", id, err)
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
	err := retryBusy(ctx, s.log, func() error {
		out = out[:0]
		rows, err := s.rdb.QueryContext(ctx, dueTasksQuery, cmpNanos(now), limit)
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
		return nil, fmt.Errorf("sqlite store: due tasks: %w", err)
	}
	return out, nil
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
	var created, updated, expires, lease sql.NullInt64
	if err := r.Scan(&t.ID, &t.Caller, &t.ApprovalID, &t.Tool, &t.Arguments, &t.ClientInfo, &t.ProtocolVersion,
		&status, &t.RunBy, &t.Outcome, &created, &updated, &expires, &lease); err != nil {
		return nil, err
	}
	t.Status = store.TaskStatus(status)
	t.CreatedAt, t.UpdatedAt, t.ExpiresAt = fromNanos(created), fromNanos(updated), fromNanos(expires)
	t.LeaseUntil = fromNanos(lease)
	return &t, nil
}
