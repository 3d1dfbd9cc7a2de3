package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/store"
)

func cloneTask(t *store.Task) *store.Task {
	c := *t
	c.Arguments, c.Outcome = slices.Clone(t.Arguments), slices.Clone(t.Outcome)
	return &c
}

// CreateTask records a new waiting task, one per approval request.
func (s *Store) CreateTask(ctx context.Context, t *store.Task) (*store.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[t.ID]; ok {
		return nil, fmt.Errorf("memstore: task %q exists", t.ID)
	}
	for _, o := range s.tasks {
		if o.ApprovalID == t.ApprovalID {
			return cloneTask(o), fmt.Errorf("task for approval %s: %w", t.ApprovalID, store.ErrDuplicateKey)
		}
	}
	c := cloneTask(t)
	c.Status, c.RunBy, c.Outcome = store.TaskWaiting, "", nil
	s.tasks[t.ID] = c
	return nil, nil
}

// DueTasks lists the tasks a runner should act on (store.TaskDue), oldest
// first.
func (s *Store) DueTasks(ctx context.Context, now time.Time, limit int) ([]store.Task, error) {
	if limit <= 0 {
		limit = 100
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Task
	for _, t := range s.tasks {
		a := s.approvals[t.ApprovalID]
		if store.TaskDue(t, a, now) {
			out = append(out, *cloneTask(t))
		}
	}
	slices.SortFunc(out, func(a, b store.Task) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// GetTask returns the task, or ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id string) (*store.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	return cloneTask(t), nil
}

// UpdateTask moves the task from u.From to u.To, once.
func (s *Store) UpdateTask(ctx context.Context, id string, u store.TaskUpdate) error {
	if err := store.CheckTaskMove(u); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return fmt.Errorf("task %s: %w", id, store.ErrNotFound)
	}
	if t.Status != u.From {
		return fmt.Errorf("task %s is %s, not %s: %w", id, t.Status, u.From, store.ErrTaskMoved)
	}
	if u.Holder != "" && t.RunBy != u.Holder {
		return fmt.Errorf("task %s is run by %s, not %s: %w", id, t.RunBy, u.Holder, store.ErrTaskMoved)
	}
	if u.TakesOver() && u.At.Before(t.LeaseUntil) {
		return fmt.Errorf("task %s: the lease of %s runs until %v: %w", id, t.RunBy, t.LeaseUntil, store.ErrTaskMoved)
	}
	t.Status, t.UpdatedAt = u.To, u.At
	if u.To == store.TaskRunning {
		t.RunBy, t.LeaseUntil = u.RunBy, u.LeaseUntil
	}
	if len(u.Outcome) > 0 {
		t.Outcome = slices.Clone(u.Outcome)
	}
	return nil
}
