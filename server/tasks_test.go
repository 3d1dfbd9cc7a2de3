package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tests of operator approvals as tasks (tasks.go), on the wire: a
// 2026-07-28 client declaring io.modelcontextprotocol/tasks.

const tasksCaps = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`

// taskFixture is a gateway where alice's calls of "danger" need an
// operator (no self_approve), approval requests expire after expire, and
// the tool counts its runs.
type taskFixture struct {
	g    *gateway.Gateway
	st   store.Store
	url  string
	runs atomic.Int64
}

func newTaskFixture(t *testing.T, expire time.Duration) *taskFixture {
	t.Helper()
	st, err := sqlite.Open(t.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rules, err := policy.NewRules([]policy.Rule{
		{Caller: "alice", Allow: []string{"*"}, Approve: []string{"danger"}},
		{Caller: "bob", Allow: []string{"*"}, Approve: []string{"danger"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &taskFixture{st: st}
	f.g = gateway.New(&gateway.Options{Store: st, Policy: rules, Approvals: gateway.ApprovalOptions{Expire: expire},
		Logger: slog.New(slog.DiscardHandler)})
	err = f.g.Register(context.Background(), tool.Tool{Name: "danger", Description: "Needs an approval.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"target":{"type":"string"}},"required":["target"]}`),
		Backend: tool.BackendFunc(func(_ context.Context, c *tool.Call) (*tool.Result, error) {
			f.runs.Add(1)
			return &tool.Result{Content: json.RawMessage(`{"done":` + string(c.Arguments) + `}`)}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}}))
	f.url = hs.URL
	return f
}

// callTask makes alice's call of danger, declaring the extension, and
// returns its CreateTaskResult.
func (f *taskFixture) callTask(t *testing.T, target string) map[string]json.RawMessage {
	t.Helper()
	r := post(t, f.url, "tok-alice", "tools/call", map[string]any{"name": "danger", "arguments": map[string]any{"target": target}, "_meta": modernMeta(tasksCaps)}, nil)
	if r.Error != nil || str(r.Result["resultType"]) != "task" {
		t.Fatalf("tools/call = %+v, %v: want a CreateTaskResult", r.Result, r.Error)
	}
	return r.Result
}

// get is tasks/get of id by the caller of token.
func (f *taskFixture) get(t *testing.T, token, id string) rpc {
	t.Helper()
	return post(t, f.url, token, "tasks/get", map[string]any{"taskId": id, "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": id})
}

// until polls tasks/get until the task's status is want.
func (f *taskFixture) until(t *testing.T, id, want string) map[string]json.RawMessage {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := f.get(t, "tok-alice", id)
		if r.Error != nil {
			t.Fatalf("tasks/get: %+v", r.Error)
		}
		if s := str(r.Result["status"]); s == want {
			return r.Result
		} else if s != "working" || time.Now().After(deadline) {
			t.Fatalf("task status %q (%s), want %s", s, r.Result["statusMessage"], want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTaskApprovedRunsOnce(t *testing.T) {
	f := newTaskFixture(t, time.Minute)
	ctx := context.Background()
	created := f.callTask(t, "x")
	id := str(created["taskId"])
	var meta map[string]any
	json.Unmarshal(created["_meta"], &meta)
	aid, _ := meta[server.MetaTaskApprovalID].(string)
	var ttl, poll int64
	json.Unmarshal(created["ttlMs"], &ttl)
	json.Unmarshal(created["pollIntervalMs"], &poll)
	switch {
	case !strings.HasPrefix(id, "task_") || len(id) < 26:
		t.Errorf("taskId %q: want an unguessable id", id)
	case str(created["status"]) != "working" || ttl <= 0 || poll <= 0:
		t.Errorf("CreateTaskResult %v: want working, ttlMs and pollIntervalMs", created)
	case aid == "" || created["result"] != nil || created["requestState"] != nil:
		t.Errorf("CreateTaskResult %v: want the approval id in _meta, no result nor requestState", created)
	}
	// The task is the approval request: operators see it pending.
	a, err := f.st.GetApproval(ctx, aid)
	if err != nil || a.Status != store.ApprovalPending || a.Caller != "alice" {
		t.Fatalf("approval %s = %+v, %v: want it pending for alice", aid, a, err)
	}
	// The same call made again is the same task.
	if again := f.callTask(t, "x"); str(again["taskId"]) != id {
		t.Errorf("the same call got task %s, want %s", str(again["taskId"]), id)
	}

	w := f.get(t, "tok-alice", id)
	if str(w.Result["status"]) != "working" || str(w.Result["resultType"]) != "complete" || !strings.Contains(str(w.Result["statusMessage"]), aid) {
		t.Errorf("tasks/get while pending = %v: want working, naming %s", w.Result, aid)
	}
	// Another caller cannot see it.
	if r := f.get(t, "tok-bob", id); r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("bob's tasks/get = %+v: want -32602, as for an unknown task", r)
	}
	if f.runs.Load() != 0 {
		t.Fatal("the call ran before its approval")
	}

	if _, err := f.g.DecideApproval(ctx, aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	done := f.until(t, id, "completed")
	var res struct {
		Content           []map[string]any `json:"content"`
		StructuredContent map[string]any   `json:"structuredContent"`
		IsError           bool             `json:"isError"`
		ResultType        string           `json:"resultType"`
	}
	if err := json.Unmarshal(done["result"], &res); err != nil || res.IsError || res.StructuredContent["done"] == nil || len(res.Content) == 0 {
		t.Fatalf("completed task result %s (%v): want the tool's result", done["result"], err)
	}
	for range 3 {
		f.get(t, "tok-alice", id)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	a, _ = f.st.GetApproval(ctx, aid)
	if a.ConsumedBy == "" {
		t.Errorf("approval %s not consumed by the task's call", aid)
	}
}

func TestTaskDeniedAndExpired(t *testing.T) {
	f := newTaskFixture(t, 1500*time.Millisecond)
	ctx := context.Background()
	denied := f.callTask(t, "deny-me")
	expired := f.callTask(t, "let-expire")
	var meta map[string]any
	json.Unmarshal(denied["_meta"], &meta)
	if _, err := f.g.DecideApproval(ctx, meta[server.MetaTaskApprovalID].(string), gateway.ApprovalDecision{Operator: "ops", Approve: false, Reason: "no", Channel: gateway.ChannelConsole}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		task map[string]json.RawMessage
		want string
	}{{denied, "denied by ops"}, {expired, "expired"}} {
		done := f.until(t, str(tc.task["taskId"]), "completed")
		var res struct {
			IsError           bool           `json:"isError"`
			StructuredContent map[string]any `json:"structuredContent"`
		}
		json.Unmarshal(done["result"], &res)
		// The refusal the call would have got: an error result, class forbidden.
		if !res.IsError || res.StructuredContent["class"] != "forbidden" || !strings.Contains(res.StructuredContent["message"].(string), tc.want) {
			t.Errorf("task result %s: want the forbidden refusal (%s)", done["result"], tc.want)
		}
	}
	if n := f.runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
}

func TestTaskCancelWithdrawsApproval(t *testing.T) {
	f := newTaskFixture(t, time.Minute)
	ctx := context.Background()
	created := f.callTask(t, "cancel-me")
	id := str(created["taskId"])
	var meta map[string]any
	json.Unmarshal(created["_meta"], &meta)
	aid := meta[server.MetaTaskApprovalID].(string)
	r := post(t, f.url, "tok-alice", "tasks/cancel", map[string]any{"taskId": id, "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": id})
	if r.Error != nil || str(r.Result["resultType"]) != "complete" || r.Result["taskId"] != nil {
		t.Fatalf("tasks/cancel = %+v: want an empty ack", r)
	}
	if got := f.until(t, id, "cancelled"); got["result"] != nil {
		t.Errorf("cancelled task carries a result: %v", got)
	}
	a, err := f.st.GetApproval(ctx, aid)
	if err != nil || a.Status != store.ApprovalDenied || a.Channel != string(gateway.ChannelTask) {
		t.Errorf("approval after cancel = %+v, %v: want it withdrawn", a, err)
	}
	if _, err := f.g.DecideApproval(ctx, aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err == nil {
		t.Error("an operator approved a withdrawn request")
	}
	// Cancel again: the same ack (idempotent).
	if r := post(t, f.url, "tok-alice", "tasks/cancel", map[string]any{"taskId": id, "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": id}); r.Error != nil {
		t.Errorf("second tasks/cancel: %+v", r.Error)
	}
	if f.runs.Load() != 0 {
		t.Error("a cancelled task's call ran")
	}
}

func TestTaskMethodsGated(t *testing.T) {
	f := newTaskFixture(t, time.Minute)
	// Without the extension: the call answers approval_required, the
	// methods -32021.
	r := post(t, f.url, "tok-alice", "tools/call", map[string]any{"name": "danger", "arguments": map[string]any{"target": "y"}, "_meta": modernMeta(`{}`)}, nil)
	var sc map[string]any
	json.Unmarshal(r.Result["structuredContent"], &sc)
	if r.Error != nil || str(r.Result["resultType"]) != "complete" || sc["class"] != "approval_required" {
		t.Errorf("tools/call without the extension = %+v: want approval_required", r)
	}
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		r := post(t, f.url, "tok-alice", m, map[string]any{"taskId": "task_x", "inputResponses": map[string]any{}, "_meta": modernMeta(`{}`)}, map[string]string{"Mcp-Name": "task_x"})
		if r.Error == nil || r.Error.Code != -32021 || !strings.Contains(string(r.Error.Data), server.TasksExtension) {
			t.Errorf("%s without the extension = %+v: want -32021 naming it", m, r)
		}
		r = post(t, f.url, "tok-alice", m, map[string]any{"taskId": "task_unknown", "inputResponses": map[string]any{}, "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": "task_unknown"})
		if r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("%s of an unknown task = %+v: want -32602", m, r)
		}
	}
	for _, m := range []string{"tasks/result", "tasks/list"} {
		r := post(t, f.url, "tok-alice", m, map[string]any{"taskId": "task_x", "_meta": modernMeta(tasksCaps)}, map[string]string{"Mcp-Name": "task_x"})
		if r.Error == nil || r.Error.Code != -32601 {
			t.Errorf("%s = %+v: want -32601 (not in the extension)", m, r)
		}
	}
	// server/discover declares the extension.
	d := post(t, f.url, "tok-alice", "server/discover", map[string]any{"_meta": modernMeta(`{}`)}, nil)
	if !strings.Contains(string(d.Result["capabilities"]), server.TasksExtension) {
		t.Errorf("server/discover capabilities %s: want the tasks extension", d.Result["capabilities"])
	}
}

// TestTaskRoutingHeader: tasks/get carries Mcp-Name with its taskId
// (a balancer routes on it); missing or other: HTTP 400, -32020.
func TestTaskRoutingHeader(t *testing.T) {
	f := newTaskFixture(t, time.Minute)
	id := str(f.callTask(t, "hdr")["taskId"])
	params := map[string]any{"taskId": id, "_meta": modernMeta(tasksCaps)}
	for _, hdr := range []map[string]string{{"Mcp-Name": ""}, {"Mcp-Name": "task_other"}} {
		r := post(t, f.url, "tok-alice", "tasks/get", params, hdr)
		if r.status != 400 || r.Error == nil || r.Error.Code != -32020 {
			t.Errorf("tasks/get with Mcp-Name %q: HTTP %d %+v, want 400 and -32020", hdr["Mcp-Name"], r.status, r.Error)
		}
	}
	if r := post(t, f.url, "tok-alice", "tasks/get", params, map[string]string{"Mcp-Name": id}); r.status != 200 || r.Error != nil {
		t.Errorf("tasks/get with the right Mcp-Name: HTTP %d %+v", r.status, r.Error)
	}
}

// sdkTaskParams and sdkTask are tasks/get for the Go SDK client (which
// has no types of the extension).
type sdkTaskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type sdkTask struct {
	mcp.ResultBase
	TaskID string          `json:"taskId"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
}

// TestTaskOverStdio: a 2026-07-28 client on stdio declaring the extension
// gets a task too, and follows it to the result.
func TestTaskOverStdio(t *testing.T) {
	f := newTaskFixture(t, time.Minute)
	ctx := context.Background()
	s := server.New(f.g, &server.Options{StdioCaller: "alice"})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.Connect(ctx, st); err != nil {
		t.Fatal(err)
	}
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(server.TasksExtension, map[string]any{})
	client := mcp.NewClient(&mcp.Implementation{Name: "stdio-client"}, &mcp.ClientOptions{Capabilities: caps})
	if err := mcp.AddSendingCustomMethod[*sdkTaskParams, *sdkTask](client, "tasks/get"); err != nil {
		t.Fatal(err)
	}
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"target": "stdio"}})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.Meta[server.MetaTaskID].(string)
	aid, _ := res.Meta[server.MetaTaskApprovalID].(string)
	if id == "" || aid == "" {
		t.Fatalf("tools/call over stdio = %+v: want a task", res)
	}
	if _, err := f.g.DecideApproval(ctx, aid, gateway.ApprovalDecision{Operator: "ops", Approve: true, Channel: gateway.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := mcp.CallCustomMethod[*sdkTaskParams, *sdkTask](ctx, cs, "tasks/get", &sdkTaskParams{TaskID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == "completed" {
			if !strings.Contains(string(got.Result), `"done"`) || f.runs.Load() != 1 {
				t.Errorf("completed with %s after %d runs", got.Result, f.runs.Load())
			}
			return
		}
		if got.Status != "working" || time.Now().After(deadline) {
			t.Fatalf("task status %s", got.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
