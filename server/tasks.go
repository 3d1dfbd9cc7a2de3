package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// Operator approvals as tasks (the MCP tasks extension,
// io.modelcontextprotocol/tasks, of the 2026-07-28 revision): a
// 2026-07-28 tools/call whose client declared the extension in the
// request's capabilities, and which needs an operator's approval, is
// answered with a task (resultType "task", CreateTaskResult) instead of
// approval_required. The task is the approval request underneath
// (gateway.OpenTask: one task per request, kept in the store, so any
// replica answers for it):
//
//   - tasks/get reports it "working" while the request waits for an
//     operator, with the request's id and how to decide it (the CLI
//     commands, the console's page) in statusMessage and _meta;
//   - once an operator decides (console, CLI, in any process), the task
//     is claimed (one claim wins, across replicas) by the sweeper of a
//     serve (every Options.TaskSweep, and at once in the process whose
//     gateway took the decision), or by the first tasks/get to see it,
//     whichever comes first, and the call is run again through the
//     whole pipeline with that request, in the background: an approved
//     call runs once, whether its client polls or not; a denied or
//     expired one gets the refusal it would have got;
//   - the runner renews its claim's lease while the call runs
//     (gateway.Options.TaskLease); once a runner's lease lapsed, the task
//     goes on as the journal says (gateway.Orphan);
//   - a runner that died before the call's intent was written ran
//     nothing: another replica takes the claim over and runs the call;
//   - a runner that died after the call settled in the journal, before it
//     recorded the task's answer, left a call whose answer is known: the
//     task ends with it, as the runner would have ended it ("completed"
//     with the call's result, or with the error result of the refusal or
//     failure it settled with), and the call is never run again;
//   - a runner that died with the call in progress (its intent still
//     started) left a call whose outcome is unknown: the journal marks it
//     uncertain for an operator (the store's recovery), the task fails
//     with the uncertain-call error (unknown_outcome, the journal's
//     call_id), and the call is never run again;
//   - the call's answer is the task's end: "completed" with the tool
//     result the call would have returned (a refusal is a tool result with
//     isError, as for any call: the extension reserves "failed" for
//     JSON-RPC errors), "failed" with the JSON-RPC error of a call that got
//     one (a tool no longer visible to the caller);
//   - tasks/cancel of a waiting task cancels it and withdraws the request
//     (an operator can no longer approve it); a task already running runs
//     to its end (cancellation is cooperative);
//   - tasks/update acknowledges and ignores its responses: a task of
//     Backplane asks its client nothing (its inputRequests are never set);
//   - a task is its caller's: any other caller's tasks/get, as an unknown
//     id, is invalid params (-32602). There is no tasks/list nor
//     tasks/result in the extension: both are method not found.
//
// A request that does not declare the extension gets -32021 from the
// three methods, and its calls never get a task.

// TasksExtension is the extension's identifier, in capabilities.
const TasksExtension = "io.modelcontextprotocol/tasks"

// The _meta keys of a task of Backplane: the approval request it waits
// for, and the console's page for it (when the console is served); a
// CreateTaskResult also repeats its taskId, for SDKs without the
// extension's types (the Go SDK v1.8.0 decodes a tools/call answer as a
// CallToolResult, which keeps _meta but not taskId).
const (
	MetaTaskApprovalID = "backplane/approval_id"
	MetaTaskConsoleURL = "backplane/console_url"
	MetaTaskID         = "backplane/task_id"
)

// taskPollInterval is the pollIntervalMs a task suggests.
const taskPollInterval = time.Second

// codeMissingCapability is the 2026-07-28 error of a request that lacks a
// client capability the server needs (-32021).
const codeMissingCapability = -32021

// withTasks declares the extension in the server's capabilities (what
// server/discover answers).
func withTasks(caps *mcp.ServerCapabilities) *mcp.ServerCapabilities {
	caps.AddExtension(TasksExtension, map[string]any{})
	return caps
}

// declaresTasks reports whether a client's capabilities carry the
// extension.
func declaresTasks(caps *mcp.ClientCapabilities) bool {
	if caps == nil {
		return false
	}
	_, ok := caps.Extensions[TasksExtension]
	return ok
}

// taskParams are the params of tasks/get, tasks/update and tasks/cancel.
type taskParams struct {
	mcp.ParamsBase
	TaskID         string          `json:"taskId"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
}

// taskResult is a task as the extension writes it: CreateTaskResult
// (resultType "task") or the result of tasks/get (resultType "complete",
// with the call's result or error once it ended).
type taskResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          int64           `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          json.RawMessage `json:"error,omitempty"`
}

// ackResult is the empty acknowledgement of tasks/update and tasks/cancel.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// taskAnswer carries a CreateTaskResult out of callModern, whose result
// type is a tool result's, to the method handler (which returns it).
type taskAnswer struct{ res *taskResult }

func (taskAnswer) Error() string { return "server: the call is answered with a task" }

// registerTasks adds the extension's methods to srv (their params decoded
// by the SDK; the middleware answers them: tasksMethod).
func registerTasks(srv *mcp.Server) {
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		if err := mcp.AddReceivingCustomMethod(srv, m, func(context.Context, *mcp.ServerSession, *taskParams) (*ackResult, error) {
			return nil, fmt.Errorf("%s is answered by the middleware", m)
		}); err != nil {
			panic(err) // not a standard method: cannot happen
		}
	}
}

// isTaskMethod reports whether the middleware answers method here.
func isTaskMethod(method string) bool {
	return method == "tasks/get" || method == "tasks/update" || method == "tasks/cancel"
}

// tasksMethod answers tasks/get, tasks/update and tasks/cancel for caller.
func (s *Server) tasksMethod(ctx context.Context, method string, req mcp.Request, caller string) (mcp.Result, error) {
	sr, ok := req.(*mcp.ServerRequest[*taskParams])
	if !ok || sr.Params == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": missing params"}
	}
	if !isModernRequest(req) || !declaresTasks(sr.ClientCapabilities()) {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
		return nil, &jsonrpc.Error{Code: codeMissingCapability, Message: method + ": the request does not declare the " + TasksExtension + " extension", Data: data}
	}
	p := sr.Params
	if p.TaskID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": taskId is required"}
	}
	v, err := s.g.GetTask(ctx, caller, p.TaskID)
	if err != nil {
		return nil, taskError(method, err)
	}
	switch method {
	case "tasks/update":
		// Backplane's tasks ask nothing of their clients: every response
		// is to a key not outstanding, which the extension says to ignore.
		return &ackResult{ResultType: "complete"}, nil
	case "tasks/cancel":
		if _, err := s.g.CancelTask(ctx, caller, p.TaskID); err != nil {
			return nil, taskError(method, err)
		}
		return &ackResult{ResultType: "complete"}, nil
	}
	if v, err = s.advanceTask(ctx, v, func() (*gateway.TaskView, error) { return s.g.GetTask(ctx, caller, p.TaskID) }); err != nil {
		return nil, taskError(method, err)
	}
	return s.taskView(v, "complete"), nil
}

// DefaultTaskSweep is how often a server's sweeper looks for tasks to act
// on (Options.TaskSweep).
const DefaultTaskSweep = time.Second

// advanceTask does what is due for task v, for tasks/get and the sweeper
// alike: an orphaned task (its runner died after its call's intent was
// written) ends with what the journal knows (the call's settled answer,
// else failed with the uncertain-call error); a task ready to run
// (decided, or left by a runner that died before its intent) is claimed
// and, when this server wins the claim, run. reread reads the task again
// when ending it lost to another replica.
func (s *Server) advanceTask(ctx context.Context, v *gateway.TaskView, reread func() (*gateway.TaskView, error)) (*gateway.TaskView, error) {
	if o := v.Orphaned; o != nil {
		var failed bool
		var outcome []byte
		if o.Unknown {
			failed, outcome = true, orphanOutcome(o.Err)
		} else {
			// The journal has the call's answer: the task ends as its
			// runner would have ended it.
			var err error
			if o.Err != nil {
				err = o.Err
			}
			failed, outcome = taskOutcome(o.Result, err, s.declaresOutput(v.Task.Tool, o.Result, err))
		}
		if err := s.g.EndTask(ctx, v.Task.ID, v.Task.RunBy, failed, outcome); err != nil {
			return reread()
		}
		v.Task.Status, v.Task.Outcome = store.TaskCompleted, outcome
		if failed {
			v.Task.Status = store.TaskFailed
		}
		if o.Unknown {
			s.log.Warn("task failed: its runner stopped while its call was in progress; the call is uncertain and never run again",
				"task_id", v.Task.ID, "approval_id", v.Task.ApprovalID, "call_id", o.CallID, "run_by", v.Task.RunBy)
		} else {
			s.log.Info("task ended with its call's settled answer: its runner stopped after the call settled, before recording it",
				"task_id", v.Task.ID, "approval_id", v.Task.ApprovalID, "call_id", o.CallID, "run_by", v.Task.RunBy, "status", string(v.Task.Status))
		}
		return v, nil
	}
	claimed, err := s.g.ClaimTask(ctx, v, s.taskRunner())
	if err != nil {
		return nil, err
	}
	if claimed {
		s.runTask(v.Task)
	}
	return v, nil
}

// orphanOutcome is the JSON-RPC error an orphaned task fails with: the
// uncertain-call error in the one error shape as its data.
func orphanOutcome(ge *gateway.Error) []byte {
	data, _ := json.Marshal(ge)
	b, err := json.Marshal(&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: ge.Message, Data: data})
	if err != nil {
		return []byte(`{"code":-32603,"message":"the call's outcome is unknown"}`)
	}
	return b
}

// startTaskSweeper starts the loop that acts on due tasks every
// Options.TaskSweep, until Shutdown: a decision made in another process
// (the CLI, another replica's console) reaches its task without waiting
// for the client's next tasks/get, and a task left by a runner that died
// moves on. A decision made through this server's gateway (its console,
// an elicitation) sweeps at once: the gateway's approval events say so,
// and the poll stays for the others (an event lost to a full channel
// only waits for the next tick). Exactly one replica runs a task: the
// claim decides.
func (s *Server) startTaskSweeper() {
	every := s.opts.TaskSweep
	if every < 0 {
		return
	}
	if every == 0 {
		every = DefaultTaskSweep
	}
	events, unsubscribe := s.g.SubscribeApprovals()
	go func() {
		defer unsubscribe()
		tick := time.NewTicker(every)
		defer tick.Stop()
		failing := false // a store error is logged once, until a sweep works again
		for {
			select {
			case <-s.stop.Done():
				return
			case <-tick.C:
			case ev := <-events:
				if ev.Kind != "decided" {
					continue
				}
				drainDecided(events) // one sweep serves a burst of decisions
			}
			err := s.sweepTasks()
			switch {
			case errors.Is(err, gateway.ErrNoTasks):
				return // the store keeps none: nothing to sweep, ever
			case err != nil && !failing && s.stop.Err() == nil:
				s.log.Warn("task sweep failed; retrying", "error", err)
				failing = true
			case err == nil:
				failing = false
			}
		}
	}()
}

// drainDecided takes the approval events already waiting in events: the
// sweep about to run acts on every decision they report.
func drainDecided(events <-chan opsview.ApprovalEvent) {
	for {
		select {
		case <-events:
		default:
			return
		}
	}
}

// sweepTasks acts once on every due task.
func (s *Server) sweepTasks() error {
	ctx, cancel := context.WithTimeout(s.stop, 30*time.Second)
	defer cancel()
	due, err := s.g.DueTasks(ctx, 0)
	for _, v := range due {
		if ctx.Err() != nil {
			break
		}
		if _, aerr := s.advanceTask(ctx, v, func() (*gateway.TaskView, error) { return v, nil }); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	return err
}

// taskError is the JSON-RPC error of a task method: an unknown task (or
// another caller's) is invalid params, as the extension says.
func taskError(method string, err error) error {
	if errors.Is(err, gateway.ErrActionNotFound) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": task not found"}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: method + ": " + err.Error()}
}

// taskRunner names this server as the claimer of the tasks it runs.
func (s *Server) taskRunner() string {
	s.runnerOnce.Do(func() {
		host, _ := os.Hostname()
		s.runnerID = fmt.Sprintf("serve-%s-%d-%s", host, os.Getpid(), strings.ToLower(rand.Text()[:8]))
	})
	return s.runnerID
}

// runTask runs a claimed task's call in the background, counted among the
// calls in flight (Shutdown waits for it, then cancels it), and records
// its answer. The call is made with the task's approval request, through
// the whole pipeline: a call whose fate is unknown is settled uncertain in
// the journal as any other, never run again.
func (s *Server) runTask(t store.Task) {
	s.active.Add(1)
	go func() {
		defer s.active.Add(-1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stopWatch := context.AfterFunc(s.stop, cancel)
		defer stopWatch()
		start := time.Now()
		res, err := s.g.RunTask(ctx, &t, gateway.CallRequest{})
		label := t.Tool
		if ge := (*gateway.Error)(nil); errors.As(err, &ge) && ge.Class == tool.ClassNotFound {
			label = unknownTool // as runCall labels it
		}
		s.metrics.observe(label, res, err, time.Since(start))
		failed, outcome := taskOutcome(res, err, s.declaresOutput(t.Tool, res, err))
		// The answer is recorded even when the call was cancelled by
		// shutdown: the task must not stay running for ever.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer wcancel()
		if err := s.g.EndTask(wctx, t.ID, t.RunBy, failed, outcome); err != nil {
			s.log.Error("task answer not recorded", "task_id", t.ID, "approval_id", t.ApprovalID, "error", err)
		}
	}()
}

// taskOutcome is the answer a call's outcome makes a task end with: the
// tool result (completed) or the JSON-RPC error (failed); declaresOutput
// as toolResult takes it.
func taskOutcome(res *gateway.CallResult, err error, declaresOutput bool) (failed bool, outcome []byte) {
	out, rpcErr := toolResult(res, err, declaresOutput)
	if rpcErr != nil {
		var je *jsonrpc.Error
		if !errors.As(rpcErr, &je) {
			je = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: rpcErr.Error()}
		}
		b, merr := json.Marshal(je)
		if merr != nil {
			b = []byte(`{"code":-32603,"message":"internal error"}`)
		}
		return true, b
	}
	b, merr := json.Marshal(resultTyped(out, "complete"))
	if merr != nil {
		return true, []byte(`{"code":-32603,"message":"the tool result could not be encoded"}`)
	}
	return false, b
}

// taskView is v as the extension writes it, with resultType rt.
func (s *Server) taskView(v *gateway.TaskView, rt string) *taskResult {
	t, a := v.Task, v.Approval
	out := &taskResult{
		ResultType: rt, TaskID: t.ID,
		CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), LastUpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano),
		TTLMs: max(t.ExpiresAt.Sub(t.CreatedAt).Milliseconds(), 1), PollIntervalMs: taskPollInterval.Milliseconds(),
	}
	out.Meta = mcp.Meta{MetaTaskApprovalID: t.ApprovalID}
	if rt == "task" {
		out.Meta[MetaTaskID] = t.ID
	}
	for _, h := range v.Hints {
		if strings.HasPrefix(h, "http://") || strings.HasPrefix(h, "https://") {
			out.Meta[MetaTaskConsoleURL] = h
		}
	}
	switch t.Status {
	case store.TaskWaiting:
		out.Status = "working"
		switch a.Status {
		case store.ApprovalPending:
			out.StatusMessage = fmt.Sprintf("waiting for an operator to decide approval request %s (%s), before %s",
				a.ID, strings.Join(v.Hints, "; or "), a.ExpiresAt.UTC().Format(time.RFC3339))
		default:
			out.StatusMessage = fmt.Sprintf("approval request %s is %s; the call is about to be made", a.ID, a.Status)
		}
	case store.TaskRunning:
		out.Status = "working"
		out.StatusMessage = fmt.Sprintf("approval request %s is %s; the call is being made", a.ID, a.Status)
	case store.TaskCompleted:
		out.Status = "completed"
		out.Result = json.RawMessage(t.Outcome)
		out.StatusMessage = completedMessage(a, t.Outcome)
	case store.TaskFailed:
		out.Status = "failed"
		out.Error = json.RawMessage(t.Outcome)
		out.StatusMessage = "the call got a protocol error"
	case store.TaskCancelled:
		out.Status = "cancelled"
		out.StatusMessage = fmt.Sprintf("cancelled by its caller; approval request %s was withdrawn", a.ID)
	}
	return out
}

// completedMessage says how a task's call ended: ran, or refused by the
// approval's decision.
func completedMessage(a store.Approval, outcome []byte) string {
	var r struct {
		IsError bool `json:"isError"`
	}
	_ = json.Unmarshal(outcome, &r)
	switch {
	case !r.IsError:
		return fmt.Sprintf("approved by %s; the call ran", a.DecidedBy)
	case a.Status == store.ApprovalDenied:
		return fmt.Sprintf("denied by %s; the call did not run", a.DecidedBy)
	case a.Status == store.ApprovalExpired:
		return "the approval request expired before a decision; the call did not run"
	}
	return "the call ended with an error result"
}

// callAsTask is the hook of callModern: a call that got approval_required
// (an operator's decision is needed) from a client that declared the
// extension is answered with its task (callModern returns it as a
// taskAnswer error). ok is false when the call is answered as it is.
func (s *Server) callAsTask(ctx context.Context, cr gateway.CallRequest, mc modernCall, err error) (*taskResult, bool) {
	var ge *gateway.Error
	if !declaresTasks(mc.caps) || !errors.As(err, &ge) || ge.Class != tool.ClassApprovalRequired {
		return nil, false
	}
	id, _ := ge.Details["approval_id"].(string)
	if id == "" {
		return nil, false
	}
	t, terr := s.g.OpenTask(ctx, cr, id)
	if terr != nil {
		s.log.Warn("task not opened; the call is answered approval_required", "approval_id", id, "caller", cr.Caller, "error", terr)
		return nil, false
	}
	v, verr := s.g.GetTask(ctx, cr.Caller, t.ID)
	if verr != nil {
		s.log.Warn("task not read back; the call is answered approval_required", "task_id", t.ID, "error", verr)
		return nil, false
	}
	return s.taskView(v, "task"), true
}

// asTaskAnswer returns the CreateTaskResult err carries, if it does.
func asTaskAnswer(err error) (*taskResult, bool) {
	var ta taskAnswer
	if errors.As(err, &ta) {
		return ta.res, true
	}
	return nil, false
}

// checkTaskName checks the routing header of the extension's methods on a
// 2026-07-28 request: tasks/get, tasks/update and tasks/cancel carry
// Mcp-Name with the body's params.taskId (so that a balancer can route on
// it), else HTTP 400 with -32020 HeaderMismatch, as for the names of
// tools/call. The SDK checks the others; it does not know these methods.
func (s *Server) checkTaskName(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil || r.Header.Get("Mcp-Protocol-Version") < ModernProtocolVersion ||
			!isTaskMethod(r.Header.Get("Mcp-Method")) {
			next.ServeHTTP(w, r)
			return
		}
		body, read := peekBody(r)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				TaskID string `json:"taskId"`
			} `json:"params"`
		}
		if !read || json.Unmarshal(body, &msg) != nil || !isTaskMethod(msg.Method) {
			next.ServeHTTP(w, r) // the SDK answers what it cannot read, or a mismatched Mcp-Method
			return
		}
		name, ok := r.Header["Mcp-Name"]
		var why string
		switch {
		case !ok || len(name) == 0:
			why = fmt.Sprintf("missing required Mcp-Name header for method %q", msg.Method)
		case name[0] != msg.Params.TaskID:
			why = fmt.Sprintf("header mismatch: Mcp-Name header value '%s' does not match body value '%s'", name[0], msg.Params.TaskID)
		default:
			next.ServeHTTP(w, r)
			return
		}
		id := msg.ID
		if len(id) == 0 {
			id = json.RawMessage("null")
		}
		out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": codeHeaderMismatch, "message": why}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(out)
	})
}

// codeHeaderMismatch is 2026-07-28's error of a routing header that
// disagrees with the body (-32020).
const codeHeaderMismatch = -32020
