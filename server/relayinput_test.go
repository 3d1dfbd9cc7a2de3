package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// askingTool registers the tool name, whose backend answers as an
// upstream asking its client for a token does (backend/upstream's
// deferral): a *tool.InputRequiredError until a call carries the answer,
// then the token. It counts the calls that completed.
func askingTool(t *testing.T, f *fixture, name string) *atomic.Int64 {
	t.Helper()
	var done atomic.Int64
	err := f.g.Register(context.Background(), tool.Tool{Name: name, InputSchema: json.RawMessage(emptyObject),
		Backend: tool.BackendFunc(func(_ context.Context, c *tool.Call) (*tool.Result, error) {
			if _, ok := c.Client.(tool.InputDeferrer); !ok {
				t.Error("the 2026-07-28 call's client does not defer input")
			}
			if c.Input == nil || c.Input.Responses["token"] == nil {
				return nil, &tool.InputRequiredError{Server: "up", State: "up-state-1", Requests: map[string]tool.InputRequest{
					"token": {Method: tool.RequestElicitation, Params: json.RawMessage(`{"mode":"form","message":"[asked by MCP server up, not by Backplane] token?","requestedSchema":{"type":"object","properties":{"token":{"type":"string"}}},"_meta":{"backplane/server":"up"}}`)},
				}}
			}
			if c.Input.State != "up-state-1" {
				t.Errorf("the upstream's state came back as %q", c.Input.State)
			}
			var er struct {
				Content struct{ Token string } `json:"content"`
			}
			json.Unmarshal(c.Input.Responses["token"], &er)
			done.Add(1)
			return &tool.Result{Content: json.RawMessage(`{"content":[{"type":"text","text":"token ` + er.Content.Token + `"}],"isError":false}`)}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	return &done
}

// TestModernRelaysUpstreamInput: issue 24. A 2026-07-28 call whose
// upstream asks for input is answered input_required with the upstream's
// request (naming its server) and a signed state; the Go SDK client
// fulfils it through its elicitation handler and retries, and the retry
// continues the call: the first attempt is journaled failed
// (input_required), the continuation succeeded under its key.
func TestModernRelaysUpstreamInput(t *testing.T) {
	f := newFixture(t)
	done := askingTool(t, f, "asks")
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	e := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"token": "t-77"}}}
	cs := connectModern(t, hs.URL, "tok-alice", &mcp.ClientOptions{ElicitationHandler: e.handle})
	res := call(t, cs, "asks", map[string]any{})
	if res.IsError || text(res) != "token t-77" || done.Load() != 1 {
		t.Fatalf("result %q (completed %d times)", text(res), done.Load())
	}
	if e.count() != 1 || !strings.HasPrefix(e.asked[0].Message, "[asked by MCP server up") || e.asked[0].Meta[server.MetaServer] != "up" {
		t.Fatalf("asked %+v", e.asked)
	}
	ins, err := f.st.ListIntents(context.Background(), store.IntentFilter{Tool: "asks"})
	if err != nil || len(ins) != 2 {
		t.Fatalf("intents %+v %v", ins, err)
	}
	cont, first := ins[0], ins[1] // newest first
	if first.Status != store.StatusFailed || first.ErrorClass != "input_required" ||
		cont.Status != store.StatusSucceeded || cont.IdempotencyKey != "continues:"+first.CallID {
		t.Errorf("journal: first %s/%s, continuation %s key %q", first.Status, first.ErrorClass, cont.Status, cont.IdempotencyKey)
	}
}

// TestModernInputStateReplayAndTamper: the state of an upstream's input
// requests is bound to the call: a retry with it completes the call once;
// the same retry again replays that outcome (the upstream is not asked
// again); a state altered, or presented with other arguments or by
// another caller, is refused; a client that did not declare elicitation
// is never sent the upstream's elicitation.
func TestModernInputStateReplayAndTamper(t *testing.T) {
	f := newFixture(t)
	done := askingTool(t, f, "asks")
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}}))
	elicits := `{"elicitation":{"form":{}}}`
	first := post(t, hs.URL, "tok-alice", "tools/call", map[string]any{"name": "asks", "arguments": map[string]any{}, "_meta": modernMeta(elicits)}, nil)
	if first.Error != nil || str(first.Result["resultType"]) != "input_required" {
		t.Fatalf("first answer %+v", first)
	}
	var reqs map[string]struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	json.Unmarshal(first.Result["inputRequests"], &reqs)
	if r, ok := reqs["token"]; !ok || r.Method != "elicitation/create" || r.Params.Meta["backplane/server"] != "up" {
		t.Fatalf("inputRequests %s", first.Result["inputRequests"])
	}
	state := str(first.Result["requestState"])
	if state == "" || strings.Contains(state, "up-state-1") {
		t.Fatalf("requestState %q: want Backplane's own, the upstream's inside it", state)
	}
	retry := func(token, state string, args map[string]any) rpc {
		return post(t, hs.URL, token, "tools/call", map[string]any{"name": "asks", "arguments": args, "_meta": modernMeta(elicits),
			"requestState": state, "inputResponses": map[string]any{"token": map[string]any{"action": "accept", "content": map[string]any{"token": "t-1"}}}}, nil)
	}
	r := retry("tok-alice", state, map[string]any{})
	if r.Error != nil || str(r.Result["resultType"]) != "complete" || !strings.Contains(string(r.Result["content"]), "token t-1") || done.Load() != 1 {
		t.Fatalf("the retry: %+v (completed %d times)", r, done.Load())
	}
	again := retry("tok-alice", state, map[string]any{})
	var meta map[string]any
	json.Unmarshal(again.Result["_meta"], &meta)
	if again.Error != nil || !strings.Contains(string(again.Result["content"]), "token t-1") || meta[server.MetaReplayed] != true || done.Load() != 1 {
		t.Errorf("the retry made again: %+v (completed %d times), want the recorded outcome replayed", again, done.Load())
	}
	for name, r := range map[string]rpc{
		"altered":         retry("tok-alice", state[:len(state)-2]+"AA", map[string]any{}),
		"other arguments": retry("tok-alice", state, map[string]any{"x": 1}),
		"another caller":  retry("tok-bob", state, map[string]any{}),
	} {
		if r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("%s: %+v, want -32602", name, r)
		}
	}
	if done.Load() != 1 {
		t.Errorf("completed %d times, want once", done.Load())
	}

	// No elicitation declared: the upstream's request is not sent.
	plain := post(t, hs.URL, "tok-alice", "tools/call", map[string]any{"name": "asks", "arguments": map[string]any{}, "_meta": modernMeta(`{}`)}, nil)
	var sc map[string]any
	json.Unmarshal(plain.Result["structuredContent"], &sc)
	if plain.Error != nil || str(plain.Result["resultType"]) != "complete" || plain.Result["inputRequests"] != nil || sc["class"] != "unsupported_capability" {
		t.Errorf("a client without elicitation: %+v", plain)
	}
}

// TestModernApprovalThenUpstreamInput: a call that needs the caller's own
// approval and whose upstream then asks for input takes three rounds
// through the Go SDK client (the approval, the upstream's request, the
// result): one approval request, consumed by the first attempt that ran,
// and its continuation is not put to the person again.
func TestModernApprovalThenUpstreamInput(t *testing.T) {
	f := newFixture(t)
	var done atomic.Int64
	err := f.g.Register(context.Background(), tool.Tool{Name: "guarded", InputSchema: json.RawMessage(emptyObject), Safety: tool.Safety{RequiresApproval: true},
		Backend: tool.BackendFunc(func(_ context.Context, c *tool.Call) (*tool.Result, error) {
			if c.Input == nil {
				return nil, &tool.InputRequiredError{Server: "up", Requests: map[string]tool.InputRequest{
					"token": {Method: tool.RequestElicitation, Params: json.RawMessage(`{"message":"[asked by MCP server up, not by Backplane] token?","requestedSchema":{"type":"object","properties":{"token":{"type":"string"}}}}`)},
				}}
			}
			done.Add(1)
			return &tool.Result{Content: json.RawMessage(`{"content":[{"type":"text","text":"guarded ran"}]}`)}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	var messages []string
	cs := connectModern(t, hs.URL, "tok-alice", &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		messages = append(messages, req.Params.Message)
		if strings.HasPrefix(req.Params.Message, "[asked by MCP server up") {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"token": "t"}}, nil
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}})
	res := call(t, cs, "guarded", map[string]any{})
	if res.IsError || text(res) != "guarded ran" || done.Load() != 1 {
		t.Fatalf("result %q (ran %d times); asked %q", text(res), done.Load(), messages)
	}
	if len(messages) != 2 || !strings.HasPrefix(messages[0], "Backplane approval request") {
		t.Errorf("asked %q, want the approval then the upstream's request", messages)
	}
	if a := approvalsOf(t, f.st, "guarded"); len(a) != 1 || a[0].ConsumedBy == "" {
		t.Errorf("approvals %+v, want one, consumed", a)
	}
}
