package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TaskStatus is the state of a task: a call put behind an operator's
// approval that a client follows by polling (the MCP tasks extension)
// instead of retrying.
type TaskStatus string

const (
	// TaskWaiting: its approval request is pending.
	TaskWaiting TaskStatus = "waiting"
	// TaskRunning: the approval was decided and one process claimed the
	// task to run the call (RunBy names it), for as long as it renews its
	// lease (LeaseUntil).
	TaskRunning TaskStatus = "running"
	// The ends: the call's answer is in Outcome (completed: a result,
	// failed: a protocol error); cancelled: its caller withdrew it while it
	// waited.
	TaskCompleted TaskStatus = "completed"
	TaskFailed    TaskStatus = "failed"
	TaskCancelled TaskStatus = "cancelled"
)

// Terminal reports whether the task can no longer change.
func (s TaskStatus) Terminal() bool {
	return s == TaskCompleted || s == TaskFailed || s == TaskCancelled
}

// Task is one call waiting for, or made after, the operator's decision on
// its approval request: the approval record is the request, the task what
// its caller polls. It is bound to its caller (the gateway shows a task
// only to the caller that made it).
type Task struct {
	// ID is the handle the caller polls with: unguessable, since it is
	// all a caller shows to read the task.
	ID         string `json:"id"`
	Caller     string `json:"caller"`
	ApprovalID string `json:"approval_id"`
	Tool       string `json:"tool"`
	// Arguments are the call's arguments exactly as received, run again
	// through the whole pipeline once the approval is decided.
	Arguments []byte `json:"-"`
	// ClientInfo and ProtocolVersion are the client's, for the call's
	// audit event when it runs.
	ClientInfo      string     `json:"client_info,omitempty"`
	ProtocolVersion string     `json:"protocol_version,omitempty"`
	Status          TaskStatus `json:"status"`
	// RunBy is who claimed the task to run it (an incarnation).
	RunBy string `json:"run_by,omitempty"`
	// LeaseUntil is when RunBy's claim lapses unless renewed: a runner
	// renews it while the call runs, so a running task past it was left
	// by a runner that died (or stopped answering). Zero for a task
	// claimed before leases were kept: lapsed.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Outcome is the call's answer once the task ended, as the front end
	// that made the task wrote it (the store does not read it).
	Outcome   []byte    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ExpiresAt is when the task may be forgotten (pruned).
	ExpiresAt time.Time `json:"expires_at"`
}

// TaskUpdate moves a task from one status to the next (CheckTaskMove).
type TaskUpdate struct {
	From, To TaskStatus
	// RunBy and LeaseUntil are recorded with To running; Outcome with an
	// end.
	RunBy      string
	LeaseUntil time.Time
	Outcome    []byte
	// Holder, when set, is the runner the task must be run by for the
	// move to happen (its RunBy): a runner renewing its lease or ending
	// its task, or one taking over a lapsed claim from Holder. A runner
	// that lost its claim cannot write over the one that took it.
	Holder string
	At     time.Time
}

// Tasks keeps tasks (see Task). The one rule: a task moves only forward
// (CheckTaskMove), each move made once, so two processes polling the same
// task cannot both claim it: the second's UpdateTask gets ErrTaskMoved.
type Tasks interface {
	// DueTasks lists, oldest first and at most limit (0: 100), the tasks
	// not past their ExpiresAt at now that a runner should act on: waiting
	// ones whose approval request is no longer pending at now (decided,
	// expired or gone), and running ones whose lease had lapsed at now.
	// Every replica's sweeper reads it; the moves decide who acts.
	DueTasks(ctx context.Context, now time.Time, limit int) ([]Task, error)
	// CreateTask records a new task (status waiting). One task per
	// approval request: when one exists already, it is returned with
	// ErrDuplicateKey and nothing is written.
	CreateTask(ctx context.Context, t *Task) (existing *Task, err error)
	// GetTask returns the task, or ErrNotFound.
	GetTask(ctx context.Context, id string) (*Task, error)
	// UpdateTask applies u to task id atomically: ErrNotFound, ErrTaskMoved
	// when its status is no longer u.From, or the error of CheckTaskMove.
	UpdateTask(ctx context.Context, id string, u TaskUpdate) error
}

// ErrTaskMoved is UpdateTask's answer when the task is not in the status
// the update moves it from: another process moved it first.
var ErrTaskMoved = errors.New("task moved on meanwhile")

// ErrTaskMove is a move CheckTaskMove refuses.
var ErrTaskMove = errors.New("task cannot move so")

// CheckTaskMove reports whether u is one of the moves a task makes:
// waiting to running (claimed, RunBy and LeaseUntil set) or cancelled;
// running to running (Holder renewing its lease, RunBy the same, or
// another runner taking over Holder's lapsed claim: the store refuses it
// unless LeaseUntil had passed at At); running to completed or failed
// (with an Outcome).
func CheckTaskMove(u TaskUpdate) error {
	switch {
	case u.From == TaskWaiting && u.To == TaskRunning && u.RunBy != "" && !u.LeaseUntil.IsZero():
	case u.From == TaskRunning && u.To == TaskRunning && u.RunBy != "" && u.Holder != "" && !u.LeaseUntil.IsZero():
	case u.From == TaskWaiting && u.To == TaskCancelled:
	case u.From == TaskRunning && (u.To == TaskCompleted || u.To == TaskFailed) && len(u.Outcome) > 0:
	default:
		return fmt.Errorf("%w: %s to %s (run by %q, %d bytes of outcome)", ErrTaskMove, u.From, u.To, u.RunBy, len(u.Outcome))
	}
	return nil
}

// TakesOver reports whether u moves a running task from one runner to
// another: the store makes it only once the holder's lease has lapsed.
func (u TaskUpdate) TakesOver() bool {
	return u.From == TaskRunning && u.To == TaskRunning && u.RunBy != u.Holder
}

// TaskDue reports whether t is one DueTasks lists at now, given its
// approval request a (nil: gone): the rule every store applies.
func TaskDue(t *Task, a *Approval, now time.Time) bool {
	if !now.Before(t.ExpiresAt) {
		return false
	}
	switch t.Status {
	case TaskWaiting:
		return a == nil || EffectiveApprovalStatus(a, now) != ApprovalPending
	case TaskRunning:
		return !now.Before(t.LeaseUntil)
	}
	return false
}
