package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// Tasks: a call that needs an operator's approval, followed by its client
// as a task (the MCP tasks extension) instead of retried. The approval
// request is the record operators see and decide (console, CLI, approvals
// show); the task (store.Task) is what the caller polls, bound to that
// request and to the caller. Once the request is decided, the first
// runner to claim the task (a poller, or the sweeper every serve runs over
// DueTasks; store.Tasks.UpdateTask, waiting to running: one claim wins, in
// any process) runs the call again through the whole pipeline with that
// request (CallRequest.ApprovalID), so it runs once, or gets the refusal
// of a denial or an expiry, and records its answer in the task. The front
// end decides what the answer looks like; the gateway keeps it.
//
// A claim is a lease (Options.TaskLease), renewed while the call runs. A
// runner that died before its call's intent was written (its approval
// unused) ran nothing: once the lease lapsed another runner takes the
// claim over and runs the call. One that died after it left a call that is
// never run again, and the task ends with what the journal knows of it
// (TaskView.Orphaned): the answer the call settled with, when the runner
// died between the settlement and the task's end; the uncertain-call
// error when it died with the call in progress (the store's recovery
// marks it uncertain for an operator).

// ChannelTask is how a caller withdraws its own approval request by
// cancelling its task.
const ChannelTask Channel = "task"

// TaskKeep is how long a task is kept after its approval request expires,
// for its caller to read the answer.
const TaskKeep = time.Hour

// ErrNoTasks is the answer of the task methods when the store keeps no
// tasks (a store.Store does: every implementation has store.Tasks).
var ErrNoTasks = errors.New("the store keeps no tasks")

func (g *Gateway) tasks() (store.Tasks, error) {
	ts, ok := g.store.(store.Tasks)
	if !ok {
		return nil, ErrNoTasks
	}
	return ts, nil
}

// OpenTask makes the task of a call answered approval_required: approvalID
// is the pending request the call got (its error's details), cr the call
// as made. The same call made again gets the same task (one task per
// request). A request that is not the caller's, or no longer pending, is
// not made a task (ErrActionConflict, ErrActionNotFound).
func (g *Gateway) OpenTask(ctx context.Context, cr CallRequest, approvalID string) (*store.Task, error) {
	ts, err := g.tasks()
	if err != nil {
		return nil, err
	}
	a, err := g.store.GetApproval(ctx, approvalID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (a.Caller != cr.Caller || a.Tool != cr.Tool)) {
		return nil, opError("not_found", fmt.Sprintf("no approval request %s for this call", approvalID), ErrActionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading approval %s: %w", approvalID, err)
	}
	now := g.now()
	if st := store.EffectiveApprovalStatus(a, now); st != store.ApprovalPending {
		return nil, opError("conflict", fmt.Sprintf("approval request %s is %s", approvalID, st), ErrActionConflict)
	}
	t := &store.Task{
		ID: "task_" + rand.Text(), Caller: cr.Caller, ApprovalID: a.ID, Tool: cr.Tool, Arguments: cr.Arguments,
		ClientInfo: cr.ClientInfo, ProtocolVersion: cr.ProtocolVersion,
		Status: store.TaskWaiting, CreatedAt: now, UpdatedAt: now, ExpiresAt: a.ExpiresAt.Add(TaskKeep),
	}
	existing, err := ts.CreateTask(ctx, t)
	switch {
	case errors.Is(err, store.ErrDuplicateKey) && existing != nil:
		return existing, nil
	case err != nil:
		return nil, fmt.Errorf("recording the task of approval %s: %w", approvalID, err)
	}
	g.log.Info("task", "task_id", t.ID, "approval_id", a.ID, "caller", cr.Caller, "tool", cr.Tool, "outcome", "opened")
	return t, nil
}

// TaskView is a task as its caller polls it: the task and its approval
// request as they stand.
type TaskView struct {
	Task     store.Task
	Approval store.Approval // Status as seen now (expired derived)
	// Hints are the ways an operator decides the request (the CLI
	// commands, the console's page), while it is pending.
	Hints []string
	// Orphaned, for a running task whose runner is gone after its call's
	// intent was written (its lease lapsed, no answer recorded, and the
	// intent settled or marked uncertain by the store's recovery), is what
	// the task ends with: the call is never run again, and its outcome is
	// the journal's.
	Orphaned *Orphan
}

// Orphan is the end of a task whose runner is gone after its call's intent
// was written, as the journal has it: exactly one of Result and Err is
// set.
type Orphan struct {
	CallID string
	// Result, or else Err, is the answer the call settled with: what the
	// runner would have recorded in the task had it lived (a result; a
	// refused result, a failure, an uncertain outcome of a known class
	// such as timeout). Err is the live error as the journal kept it: its
	// class and message, every violation, the details but those for the
	// caller's eyes only (a login URL: named in details.withheld) and an
	// upstream's input requests (see settledetail.go).
	Result *CallResult
	Err    *Error
	// Unknown is set when the journal does not know the call's outcome:
	// the call was still in progress when its runner's process died (the
	// store's recovery marked it uncertain, for an operator to resolve),
	// or it settled with an unknown outcome. Err is then the uncertain-call
	// error (unknown_outcome) naming the call and the gone runner.
	Unknown bool
}

// defaultTaskLease is how long a runner's claim on a task lasts unless
// renewed (Options.TaskLease): a runner renews it every third of it while
// the call runs, so a lapsed lease means the runner is gone.
const defaultTaskLease = 30 * time.Second

// taskOrphanAfter is, for a task claimed before leases were kept (no
// LeaseUntil), how long after its claim it is taken for left by its runner.
const taskOrphanAfter = 30 * time.Second

// GetTask returns caller's task id. Another caller's task, like one that
// does not exist or is past its ExpiresAt, is not found (ErrActionNotFound):
// a task id shows nothing to anyone but its caller.
func (g *Gateway) GetTask(ctx context.Context, caller, id string) (*TaskView, error) {
	ts, err := g.tasks()
	if err != nil {
		return nil, err
	}
	t, err := ts.GetTask(ctx, id)
	now := g.now()
	if errors.Is(err, store.ErrNotFound) || (err == nil && (t.Caller != caller || !now.Before(t.ExpiresAt))) {
		return nil, opError("not_found", "no such task", ErrActionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading task: %w", err)
	}
	return g.viewTask(ctx, t, now)
}

// DueTasks returns the tasks a runner should act on now, as their callers
// would see them: waiting ones whose request was decided or expired, and
// running ones whose runner's lease lapsed (store.Tasks.DueTasks). A
// sweeper (every serve has one) claims each (ClaimTask: one claim wins,
// across replicas) and runs it, or ends an orphaned one
// (TaskView.Orphaned), so that a decision made anywhere (the CLI, the
// console, another replica) leads to the call without its client polling.
func (g *Gateway) DueTasks(ctx context.Context, limit int) ([]*TaskView, error) {
	ts, err := g.tasks()
	if err != nil {
		return nil, err
	}
	now := g.now()
	due, err := ts.DueTasks(ctx, now, limit)
	if err != nil {
		return nil, fmt.Errorf("listing due tasks: %w", err)
	}
	out := make([]*TaskView, 0, len(due))
	for i := range due {
		v, err := g.viewTask(ctx, &due[i], now)
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

// viewTask is t with its approval request as they stand at now.
func (g *Gateway) viewTask(ctx context.Context, t *store.Task, now time.Time) (*TaskView, error) {
	a, err := g.store.GetApproval(ctx, t.ApprovalID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("reading approval %s: %w", t.ApprovalID, err)
	}
	v := &TaskView{Task: *t}
	if a != nil {
		v.Approval = *a
		v.Approval.Status = store.EffectiveApprovalStatus(a, now)
	} else {
		// Pruned with its expiry: the request is over.
		v.Approval = store.Approval{ID: t.ApprovalID, Caller: t.Caller, Tool: t.Tool, Status: store.ApprovalExpired}
	}
	if v.Approval.Status == store.ApprovalPending {
		v.Hints = g.hints(t.ApprovalID)
	}
	if t.Status == store.TaskRunning && v.Approval.ConsumedBy != "" && g.leaseLapsed(t, now) {
		v.Orphaned = g.orphaned(ctx, t, v.Approval.ConsumedBy)
	}
	return v, nil
}

// leaseLapsed reports whether the claim of running task t lapsed at now.
func (g *Gateway) leaseLapsed(t *store.Task, now time.Time) bool {
	if t.LeaseUntil.IsZero() {
		return now.Sub(t.UpdatedAt) > taskOrphanAfter
	}
	return !now.Before(t.LeaseUntil)
}

// orphaned is what a running task ends with whose runner is gone after
// its call's intent callID was written (its approval consumed): the call
// may have run, so it is never run again; its outcome is the journal's.
// An intent still started is left to the store's recovery first
// (Store.Recover: a process whose lock no one holds, a replica whose lease
// lapsed), which marks it uncertain for an operator to resolve; while its
// process is alive (a runner merely late), nil: the task waits.
func (g *Gateway) orphaned(ctx context.Context, t *store.Task, callID string) *Orphan {
	in, err := g.store.GetIntent(ctx, callID)
	if err != nil {
		return nil
	}
	if in.Status == store.StatusStarted {
		if _, err := g.store.Recover(ctx); err != nil {
			g.log.Warn("task", "task_id", t.ID, "outcome", "recover_failed", "error", err.Error())
			return nil
		}
		if in, err = g.store.GetIntent(ctx, callID); err != nil || in.Status == store.StatusStarted {
			return nil
		}
	}
	if res, serr := settledAnswer(in); res != nil || serr != nil {
		if serr != nil {
			serr.Tool = t.Tool
		}
		return &Orphan{CallID: in.CallID, Result: res, Err: serr}
	}
	e := newError(tool.ClassUnknownOutcome, "task", fmt.Sprintf(
		"the process that ran this task's call (%s) stopped before recording its answer; the call is %s in the journal (%s) and is never run again",
		t.RunBy, in.Status, in.CallID), map[string]any{"call_id": in.CallID, "approval_id": t.ApprovalID, "status": string(in.Status), "run_by": t.RunBy})
	e.CallID = in.CallID
	return &Orphan{CallID: in.CallID, Err: e, Unknown: true}
}

// settledAnswer is the answer settled intent in gave its call, rebuilt
// from the journal as invoke returned it: the result of a call that
// succeeded, the error of one whose result was refused (succeeded with a
// class), that failed, or that settled uncertain with a known class
// (timeout, cancelled, malformed_result). Both are nil when the journal
// does not know the outcome: uncertain with unknown_outcome (what
// recovery marks a call its dead process left started), or an uncertain
// intent since resolved by an operator without a class of its own.
func settledAnswer(in *store.Intent) (*CallResult, *Error) {
	settledError := func(class tool.Class) *Error {
		e := newError(class, "invoke", in.ErrorMessage, map[string]any{"status": string(in.Status)})
		e.CallID = in.CallID
		return e.withDetail(in.ErrorDetail) // settledetail.go
	}
	switch in.Status {
	case store.StatusSucceeded:
		if in.ErrorClass != "" {
			return nil, settledError(tool.Class(in.ErrorClass))
		}
		r, err := store.DecodeResult(in.Result)
		if err != nil {
			e := newError(tool.ClassMalformedResult, "invoke", "the recorded result cannot be read: "+err.Error(), map[string]any{"status": string(in.Status)})
			e.CallID = in.CallID
			return nil, e
		}
		return &CallResult{CallID: in.CallID, Result: r.Content, IsError: r.IsError}, nil
	case store.StatusFailed:
		if in.ErrorClass == "" {
			return nil, settledError(tool.ClassExecutionFailure)
		}
		return nil, settledError(tool.Class(in.ErrorClass))
	}
	// Uncertain, or resolved by an operator after it was.
	if in.ErrorClass == "" || in.ErrorClass == string(tool.ClassUnknownOutcome) {
		return nil, nil
	}
	return nil, settledError(tool.Class(in.ErrorClass))
}

// ClaimTask claims a task for this process to run (RunTask): a waiting
// task whose request is decided (or expired), or a running one whose
// runner's lease lapsed before its call's intent was written (the approval
// is unused: nothing ran, and the call is run here instead). It reports
// whether this process won the claim: of any number of pollers and
// sweepers, in any replicas, one does. Should the first runner still be
// alive and commit after all, the approval's single use decides which
// call runs: never both.
func (g *Gateway) ClaimTask(ctx context.Context, v *TaskView, by string) (bool, error) {
	ts, err := g.tasks()
	if err != nil {
		return false, err
	}
	now := g.now()
	u := store.TaskUpdate{To: store.TaskRunning, RunBy: by, LeaseUntil: now.Add(g.lease), At: now}
	outcome := "claimed"
	switch {
	case v.Task.Status == store.TaskWaiting && v.Approval.Status != store.ApprovalPending:
		u.From = store.TaskWaiting
	case v.Task.Status == store.TaskRunning && v.Approval.ConsumedBy == "" && v.Orphaned == nil && g.leaseLapsed(&v.Task, now):
		u.From, u.Holder, outcome = store.TaskRunning, v.Task.RunBy, "taken_over"
	default:
		return false, nil
	}
	err = ts.UpdateTask(ctx, v.Task.ID, u)
	if errors.Is(err, store.ErrTaskMoved) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	g.log.Info("task", "task_id", v.Task.ID, "approval_id", v.Task.ApprovalID, "outcome", outcome, "by", by, "from", v.Task.RunBy)
	v.Task.Status, v.Task.RunBy, v.Task.LeaseUntil = store.TaskRunning, by, u.LeaseUntil
	return true, nil
}

// holdTask renews the lease of claimed task t every third of it until the
// returned stop is called. A renewal refused because the claim moved (a
// runner that was taken for gone) stops renewing: the approval's single
// use still keeps the call from running twice.
func (g *Gateway) holdTask(t *store.Task) (stop func()) {
	ts, err := g.tasks()
	if err != nil || t.RunBy == "" {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(max(g.lease/3, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(g.lease/3, time.Second))
			now := g.now()
			err := ts.UpdateTask(ctx, t.ID, store.TaskUpdate{From: store.TaskRunning, To: store.TaskRunning,
				RunBy: t.RunBy, Holder: t.RunBy, LeaseUntil: now.Add(g.lease), At: now})
			cancel()
			switch {
			case errors.Is(err, store.ErrTaskMoved):
				g.log.Warn("task", "task_id", t.ID, "outcome", "claim_lost", "by", t.RunBy, "error", err.Error())
				return
			case err != nil:
				g.log.Warn("task", "task_id", t.ID, "outcome", "lease_not_renewed", "by", t.RunBy, "error", err.Error())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// RunTask runs a claimed task's call through the whole pipeline with its
// approval request: the call runs once (the request is consumed by it),
// or gets the refusal a retry would (denied, expired, no longer allowed).
// base carries what the front end adds (its client channels, progress);
// its caller, tool, arguments and approval are the task's.
//
// The claim's lease is renewed while the call runs. A call refused because
// the task's approval was used by another call (a runner taken for gone
// that committed after all) ends with that call's uncertain outcome: it
// is in the journal, and this task never runs it again.
func (g *Gateway) RunTask(ctx context.Context, t *store.Task, base CallRequest) (*CallResult, error) {
	stop := g.holdTask(t)
	defer stop()
	base.Caller, base.Tool, base.Arguments, base.ApprovalID = t.Caller, t.Tool, t.Arguments, t.ApprovalID
	base.ClientInfo, base.ProtocolVersion = t.ClientInfo, t.ProtocolVersion
	base.Approver, base.ApprovalWait, base.IdempotencyKey = nil, nil, ""
	res, err := g.Call(ctx, base)
	var ge *Error
	if errors.As(err, &ge) && ge.Class == tool.ClassForbidden && ge.Step == "approve" {
		if by, _ := ge.Details["consumed_by"].(string); by != "" {
			e := newError(tool.ClassUnknownOutcome, "task", fmt.Sprintf(
				"this task's approval %s was used by call %s, made by an earlier runner of the task taken for gone; that call's outcome is the journal's and it is never run again",
				t.ApprovalID, by), map[string]any{"call_id": by, "approval_id": t.ApprovalID})
			e.CallID = by
			return nil, e
		}
	}
	return res, err
}

// EndTask records the answer of a claimed task's call: completed (a
// result) or failed (a protocol error), as the front end writes it. by is
// the runner that holds the claim (store.Task.RunBy; for an orphaned
// task, the gone runner's): a runner whose claim was taken over cannot
// write over the answer of the one that took it.
func (g *Gateway) EndTask(ctx context.Context, id, by string, failed bool, outcome []byte) error {
	ts, err := g.tasks()
	if err != nil {
		return err
	}
	to := store.TaskCompleted
	if failed {
		to = store.TaskFailed
	}
	if err := ts.UpdateTask(ctx, id, store.TaskUpdate{From: store.TaskRunning, To: to, Outcome: outcome, Holder: by, At: g.now()}); err != nil {
		return fmt.Errorf("ending task %s: %w", id, err)
	}
	g.log.Info("task", "task_id", id, "outcome", string(to))
	return nil
}

// CancelTask is caller's cancellation of its task. A waiting task is
// cancelled and its approval request withdrawn (recorded as denied by the
// caller, channel task: an operator cannot approve it any more, and the
// same call made again before it expires gets that denial). A task
// already claimed or ended is left as it is (cancellation is cooperative:
// its call runs to its end). It reports whether the task was cancelled.
func (g *Gateway) CancelTask(ctx context.Context, caller, id string) (bool, error) {
	v, err := g.GetTask(ctx, caller, id)
	if err != nil {
		return false, err
	}
	if v.Task.Status != store.TaskWaiting {
		return false, nil
	}
	ts, _ := g.tasks()
	now := g.now()
	err = ts.UpdateTask(ctx, id, store.TaskUpdate{From: store.TaskWaiting, To: store.TaskCancelled, At: now})
	if errors.Is(err, store.ErrTaskMoved) {
		return false, nil // claimed meanwhile: it runs
	}
	if err != nil {
		return false, err
	}
	err = g.store.DecideApproval(ctx, v.Task.ApprovalID, store.ApprovalDecision{
		Approve: false, By: caller, At: now, Channel: string(ChannelTask), Reason: "withdrawn: the caller cancelled its task " + id,
	})
	switch {
	case err == nil:
		a := v.Approval
		a.Status, a.DecidedBy, a.DecidedAt, a.Channel, a.Reason = store.ApprovalDenied, caller, now, string(ChannelTask), "withdrawn"
		g.events.publish(opsview.ApprovalEvent{Kind: "decided", Approval: a})
	case errors.Is(err, store.ErrAlreadyDecided), errors.Is(err, store.ErrApprovalExpired), errors.Is(err, store.ErrNotFound):
		// Decided just before, or over: the task is cancelled all the same.
	default:
		return true, fmt.Errorf("withdrawing approval %s: %w", v.Task.ApprovalID, err)
	}
	g.log.Info("task", "task_id", id, "approval_id", v.Task.ApprovalID, "outcome", "cancelled", "by", caller)
	return true, nil
}

// givenApproval reads a task's approval request (CallRequest.ApprovalID)
// and checks it is this call's and unused.
func (c *call) givenApproval(ctx context.Context, key store.ApprovalKey) (*store.Approval, error) {
	g, id := c.g, c.req.ApprovalID
	a, err := boundedRead(ctx, g.approval.ReadTimeout, func(rctx context.Context) (*store.Approval, error) {
		return g.store.GetApproval(rctx, id)
	})
	details := map[string]any{"approval_id": id}
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.audit("approve", "gone", "approval_id", id)
		return nil, newError(tool.ClassForbidden, "approve", fmt.Sprintf("approval request %s is gone (expired and pruned); call again for a new one", id), details)
	case err != nil:
		return nil, c.storeFailure(ctx, "approve", err)
	case a.Caller != key.Caller || a.Tool != key.Tool || a.ArgsDigest != key.ArgsDigest:
		c.audit("approve", "other_call", "approval_id", id)
		return nil, newError(tool.ClassForbidden, "approve", fmt.Sprintf("approval request %s is for another call", id), details)
	case a.DefinitionHash != key.DefinitionHash:
		c.audit("approve", "definition_changed", "approval_id", id)
		return nil, newError(tool.ClassForbidden, "approve", fmt.Sprintf("the definition of %s changed since approval request %s was made; call again for a new one", a.Tool, id), details)
	case a.ConsumedBy != "":
		c.audit("approve", "used", "approval_id", id, "consumed_by", a.ConsumedBy)
		details["consumed_by"] = a.ConsumedBy
		return nil, newError(tool.ClassForbidden, "approve", fmt.Sprintf("approval request %s was already used by call %s", id, a.ConsumedBy), details)
	}
	return a, nil
}
