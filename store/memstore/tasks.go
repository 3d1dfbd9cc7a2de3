package memstore

import (
	"context"
	"fmt"
	"slices"

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
	t.Status, t.UpdatedAt = u.To, u.At
	if u.To == store.TaskRunning {
		t.RunBy = u.RunBy
	}
	if len(u.Outcome) > 0 {
		t.Outcome = slices.Clone(u.Outcome)
	}
	return nil
}
