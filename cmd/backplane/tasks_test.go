package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Operator approvals as MCP tasks (io.modelcontextprotocol/tasks) through
// real processes: `backplane serve`, the Go SDK v1.8.0 client at
// 2026-07-28 declaring the extension (the SDK has no types of it: the
// tests add tasks/get and tasks/cancel as custom methods), and the CLI
// deciding from another process.

const tasksExtension = "io.modelcontextprotocol/tasks"

// tasksConfig: alice's danger needs an operator's approval (ops); the
// tool records each run in $NOTE_LOG. %[1]s is the approvals' expiry.
const tasksConfig = `operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: [danger]
    approve: [danger]
serve:
  tokens: {"alice-token": alice, "bob-token": bob}
  approval_wait: 30s
approvals:
  expire: %[1]s
tools:
  - name: danger
    description: Record the call, once someone approved it.
    input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    command: [sh, -c, 'printf "%%s\n" "$(cat)" >> "$NOTE_LOG"; echo "{\"done\":true}"']
    env: [NOTE_LOG]
    timeout: 10s
`

// taskParams and taskState are the extension's tasks/get (and
// tasks/cancel) request and answer.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type taskState struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage"`
	TTLMs          int64           `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result"`
	Error          json.RawMessage `json:"error"`
}

// tasksClient connects token's Go SDK client at 2026-07-28 to base,
// declaring the extension, with tasks/get and tasks/cancel added.
func tasksClient(ctx context.Context, t *testing.T, base, token string, rt http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(tasksExtension, map[string]any{})
	client := mcp.NewClient(&mcp.Implementation{Name: "tasks-test", Version: "v0"}, &mcp.ClientOptions{Capabilities: caps})
	for _, m := range []string{"tasks/get", "tasks/cancel"} {
		if err := mcp.AddSendingCustomMethod[*taskParams, *taskState](client, m); err != nil {
			t.Fatal(err)
		}
	}
	if rt == nil {
		rt = tokenTransport(token)
	}
	rt = taskNameTransport{rt}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: rt}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatalf("connect at 2026-07-28: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client speaks %s, want 2026-07-28", v)
	}
	if _, ok := cs.InitializeResult().Capabilities.Extensions[tasksExtension]; !ok {
		t.Errorf("server/discover capabilities %+v: no %s", cs.InitializeResult().Capabilities, tasksExtension)
	}
	return cs
}

// taskNameTransport sets the routing header the extension asks of a
// client on tasks/get and tasks/cancel (Mcp-Name: the taskId), which the
// Go SDK, not knowing the extension's methods, does not send.
type taskNameTransport struct{ base http.RoundTripper }

func (tr taskNameTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if m := r.Header.Get("Mcp-Method"); (m == "tasks/get" || m == "tasks/cancel") && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		var msg struct {
			Params struct {
				TaskID string `json:"taskId"`
			} `json:"params"`
		}
		json.Unmarshal(body, &msg)
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.Header.Set("Mcp-Name", msg.Params.TaskID)
	}
	return tr.base.RoundTrip(r)
}

// startTask calls danger with text and returns the task it is answered
// with (its id is in _meta: the SDK's CallToolResult drops taskId) and the
// approval request's id.
func startTask(ctx context.Context, t *testing.T, cs *mcp.ClientSession, text string) (taskID, approvalID string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"text": text}})
	if err != nil {
		t.Fatalf("danger: %v", err)
	}
	taskID, _ = res.Meta["backplane/task_id"].(string)
	approvalID, _ = res.Meta["backplane/approval_id"].(string)
	if taskID == "" || approvalID == "" || res.IsError {
		t.Fatalf("danger answered %+v (class %q): want a task", res, errorClass(res))
	}
	return taskID, approvalID
}

func getTask(ctx context.Context, t *testing.T, cs *mcp.ClientSession, id string) *taskState {
	t.Helper()
	st, err := mcp.CallCustomMethod[*taskParams, *taskState](ctx, cs, "tasks/get", &taskParams{TaskID: id})
	if err != nil {
		t.Fatalf("tasks/get %s: %v", id, err)
	}
	return st
}

// pollTask polls until the task is no longer working.
func pollTask(ctx context.Context, t *testing.T, cs *mcp.ClientSession, id string) *taskState {
	t.Helper()
	for {
		st := getTask(ctx, t, cs, id)
		if st.Status != "working" {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("task %s still working: %s", id, st.StatusMessage)
		case <-time.After(time.Duration(min(max(st.PollIntervalMs, 50), 250)) * time.Millisecond):
		}
	}
}

// toolResultOf decodes a completed task's result.
func toolResultOf(t *testing.T, st *taskState) (isError bool, structured map[string]any) {
	t.Helper()
	var r struct {
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
		Content           []any          `json:"content"`
	}
	if err := json.Unmarshal(st.Result, &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("task result %s: %v", st.Result, err)
	}
	return r.IsError, r.StructuredContent
}

// countRuns counts danger's runs with text.
func countRuns(t *testing.T, g *gwDir, text string) int {
	n := 0
	for _, line := range g.notes(t) {
		if strings.Contains(line, `"`+text+`"`) {
			n++
		}
	}
	return n
}

// TestServeTaskApproveAndDeny: a call needing an operator is answered
// with a task; tasks/get reports it waiting, naming the request; bob
// cannot see it; an operator approves with the CLI from another process,
// and the task completes with the tool's result, the tool having run
// once; a denied task completes with the refusal; a cancelled one
// withdraws its request.
func TestServeTaskApproveAndDeny(t *testing.T) {
	g := newGWDir(t, fmt.Sprintf(tasksConfig, "10m"))
	p := startServe(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs := tasksClient(ctx, t, p.base, "alice-token", nil)

	id, aid := startTask(ctx, t, cs, "approve me")
	st := getTask(ctx, t, cs, id)
	if st.Status != "working" || st.ResultType != "complete" || !strings.Contains(st.StatusMessage, aid) ||
		!strings.Contains(st.StatusMessage, "backplane approvals approve "+aid) || st.TTLMs <= 0 || st.Meta["backplane/approval_id"] != aid {
		t.Errorf("tasks/get while pending = %+v: want working, naming %s and how to decide it", st, aid)
	}
	if u := p.base + "/ui/approvals/" + aid; st.Meta["backplane/console_url"] != u || !strings.Contains(st.StatusMessage, u) {
		t.Errorf("tasks/get while pending: _meta %v, message %q: want the console's page %s", st.Meta, st.StatusMessage, u)
	}
	bob := tasksClient(ctx, t, p.base, "bob-token", nil)
	if _, err := mcp.CallCustomMethod[*taskParams, *taskState](ctx, bob, "tasks/get", &taskParams{TaskID: id}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("bob's tasks/get of alice's task: %v, want not found", err)
	}
	// The approval record is the one the CLI shows.
	if a := g.approvalsByID(t, "--status", "pending")[aid]; a == nil || a["tool"] != "danger" || a["caller"] != "alice" {
		t.Fatalf("approvals list --status pending: %v, want %s", g.approvalsByID(t), aid)
	}
	g.operator(t, "approvals", "approve", aid).wantCode(t, exitOK)
	done := pollTask(ctx, t, cs, id)
	if done.Status != "completed" {
		t.Fatalf("task after approval: %+v\n%s", done, p.log())
	}
	if isErr, sc := toolResultOf(t, done); isErr || sc["done"] != true {
		t.Errorf("completed task's result %s: want the tool's", done.Result)
	}
	for range 3 {
		if again := getTask(ctx, t, cs, id); again.Status != "completed" {
			t.Errorf("a later tasks/get: %s", again.Status)
		}
	}
	if n := countRuns(t, g, "approve me"); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	if a := g.approvalsByID(t)[aid]; a["status"] != "approved" || a["consumed_by"] == nil {
		t.Errorf("approval after the task: %v", a)
	}

	id, aid = startTask(ctx, t, cs, "deny me")
	g.operator(t, "approvals", "deny", aid).wantCode(t, exitOK)
	done = pollTask(ctx, t, cs, id)
	if isErr, sc := toolResultOf(t, done); done.Status != "completed" || !isErr || sc["class"] != "forbidden" || !strings.Contains(fmt.Sprint(sc["message"]), "denied by ops") {
		t.Errorf("denied task: %+v: want completed with the forbidden refusal", done)
	}

	id, aid = startTask(ctx, t, cs, "cancel me")
	if ack, err := mcp.CallCustomMethod[*taskParams, *taskState](ctx, cs, "tasks/cancel", &taskParams{TaskID: id}); err != nil || ack.ResultType != "complete" || ack.TaskID != "" {
		t.Fatalf("tasks/cancel: %+v, %v: want an empty ack", ack, err)
	}
	if st := getTask(ctx, t, cs, id); st.Status != "cancelled" {
		t.Errorf("task after cancel: %s", st.Status)
	}
	if a := g.approvalsByID(t)[aid]; a["status"] != "denied" || a["channel"] != "task" {
		t.Errorf("approval after cancel: %v: want it withdrawn", a)
	}
	r := g.operator(t, "approvals", "approve", aid)
	if r.code == exitOK {
		t.Error("an operator approved a withdrawn request")
	}
	if n := countRuns(t, g, "deny me") + countRuns(t, g, "cancel me"); n != 0 {
		t.Errorf("a denied or cancelled task's call ran %d times", n)
	}
}

// TestServeTaskExpires: a request that expires before a decision ends
// its task with the refusal the call would have got.
func TestServeTaskExpires(t *testing.T) {
	g := newGWDir(t, fmt.Sprintf(tasksConfig, "2s"))
	p := startServe(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := tasksClient(ctx, t, p.base, "alice-token", nil)
	id, _ := startTask(ctx, t, cs, "let me expire")
	done := pollTask(ctx, t, cs, id)
	if isErr, sc := toolResultOf(t, done); done.Status != "completed" || !isErr || !strings.Contains(fmt.Sprint(sc["message"]), "expired") {
		t.Errorf("expired task: %+v: want completed with the expiry's refusal", done)
	}
	if n := countRuns(t, g, "let me expire"); n != 0 {
		t.Errorf("an expired task's call ran %d times", n)
	}
}

// TestBalancerStatelessTask: a task made on one replica is polled through
// a round-robin balancer (no affinity), approved from a fourth process,
// and completes exactly once whichever replicas answer the polls.
func TestBalancerStatelessTask(t *testing.T) {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s}", `  approval_wait: 0s
policy:
  - caller: alice
    allow: [danger]
    approve: [danger]
approvals:
  expire: 10m
tools:
`+dangerTool))
	reps := startReplicas(t, g, "A", "B", "C")
	b := startBalancer(t, reps, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seen := &replicaSeen{by: map[string]int{}}
	cs := tasksClient(ctx, t, b.base, "alice-token", seen.wrap(tokenTransport("alice-token")))

	id, aid := startTask(ctx, t, cs, "through the balancer")
	for range 3 {
		if st := getTask(ctx, t, cs, id); st.Status != "working" {
			t.Fatalf("task before approval: %+v", st)
		}
	}
	g.run(t, "", append([]string{"approvals", "approve", aid, "--as", "bob"}, g.auditFlag()...)...).wantCode(t, exitOK)
	done := pollTask(ctx, t, cs, id)
	if isErr, sc := toolResultOf(t, done); done.Status != "completed" || isErr || sc["done"] != true {
		t.Fatalf("task after approval: %+v", done)
	}
	// Every replica reads the one answer; none runs the call again.
	for range 6 {
		if st := getTask(ctx, t, cs, id); st.Status != "completed" || string(st.Result) != string(done.Result) {
			t.Errorf("a later tasks/get: %s %s", st.Status, st.Result)
		}
	}
	if n := countRuns(t, g, "through the balancer"); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	if n := len(seen.snapshot()); n < 3 {
		t.Errorf("the client's requests reached %v: want all three replicas", seen.snapshot())
	}
	t.Logf("requests answered per replica: %v", seen.snapshot())
}
