//lint:file-ignore SA1019 sampling, roots and logging are deprecated only from protocol 2026-07-28; the versions relayed here (2025-11-25 and older) have them, and the issue asks for them.

package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tests of this file put Backplane between a Go SDK client and the
// real server-everything (testdata/mcp-peers, npm ci there first), run
// as a process over stdio: what the upstream sends during a call must
// reach the client that made it.

type approveAll struct{}

func (approveAll) Ask(context.Context, *store.Approval) (gateway.ApprovalAnswer, error) {
	return gateway.ApprovalAnswer{Approve: true, By: "operator", Channel: "cli"}, nil
}

// lockedBuffer is an audit log the test reads while the gateway writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// everything serves a gateway whose one upstream is server-everything,
// with the given bridge (nil: the default), to stdio caller alice.
func everything(t *testing.T, bridge *upstream.Bridge) (*server.Server, *lockedBuffer) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: server-everything cannot run")
	}
	bin, err := filepath.Abs(filepath.Join("..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-everything"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("server-everything is not installed (run npm ci in testdata/mcp-peers): %v", err)
	}
	st, err := sqlite.Open(t.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// SelfApprove: a client with elicitation approves its own calls.
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}, Approve: []string{"*"}, SelfApprove: true}})
	if err != nil {
		t.Fatal(err)
	}
	audit := &lockedBuffer{}
	log := slog.New(slog.NewJSONHandler(audit, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := gateway.New(&gateway.Options{Store: st, Policy: rules, Logger: log,
		Approvals: gateway.ApprovalOptions{Approver: approveAll{}}, Timeout: 60 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := upstream.Connect(ctx, upstream.Server{Name: "everything", Command: []string{bin},
		Validator: upstream.ValidatorDraft2020, Bridge: bridge}, &upstream.Options{Registry: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return server.New(g, &server.Options{StdioCaller: "alice", Tokens: map[string]string{"tok-e": "alice"}, ApprovalWait: 30 * time.Second}), audit
}

func callCtx(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("call %s: %v", params.Name, err)
	}
	return res
}

// TestUpstreamProgressReachesCaller: trigger-long-running-operation's
// progress notifications arrive under the client's own token, each step
// in order; a second client calling at the same time with the same token
// value gets its own and no other.
func TestUpstreamProgressReachesCaller(t *testing.T) {
	s, _ := everything(t, nil)
	type got struct {
		mu    sync.Mutex
		steps []float64
		bad   []any
	}
	client := func(g *got) *mcp.ClientSession {
		return connect(t, s, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if r.Params.ProgressToken != "tok" || r.Params.Total != 4 {
				g.bad = append(g.bad, r.Params.ProgressToken)
				return
			}
			g.steps = append(g.steps, r.Params.Progress)
		}})
	}
	var a, b got
	ca, cb := client(&a), client(&b)
	var wg sync.WaitGroup
	for i, cs := range []*mcp.ClientSession{ca, cb} {
		wg.Go(func() {
			// Different arguments: identical ones would share one approval
			// request (by design), which only one of the calls consumes.
			p := &mcp.CallToolParams{Name: "everything.trigger-long-running-operation", Arguments: map[string]any{"duration": 1 + i, "steps": 4}}
			p.SetProgressToken("tok")
			if res := callCtx(t, cs, p); res.IsError {
				t.Errorf("the call failed: %s", text(res))
			}
		})
	}
	wg.Wait()
	for name, g := range map[string]*got{"a": &a, "b": &b} {
		waitFor(t, "4 progress notifications for "+name, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.steps) >= 4
		})
		g.mu.Lock()
		if want := []float64{1, 2, 3, 4}; !equalFloats(g.steps, want) || len(g.bad) > 0 {
			t.Errorf("client %s: progress %v (want %v), stray tokens %v", name, g.steps, want, g.bad)
		}
		g.mu.Unlock()
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUpstreamSamplingBridged: with sampling bridged, a client that
// declares sampling answers trigger-sampling-request, the tool returns
// its answer, and the audit log names the request with the call id.
func TestUpstreamSamplingBridged(t *testing.T) {
	s, audit := everything(t, &upstream.Bridge{Sampling: true})
	var asked string
	cs := connect(t, s, &mcp.ClientOptions{CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		if tc, ok := r.Params.Messages[0].Content.(*mcp.TextContent); ok {
			asked = tc.Text
		}
		return &mcp.CreateMessageResult{Model: "test-model", Role: "assistant", Content: &mcp.TextContent{Text: "the sampled answer 4217"}}, nil
	}})
	res := callCtx(t, cs, &mcp.CallToolParams{Name: "everything.trigger-sampling-request", Arguments: map[string]any{"prompt": "say 4217", "maxTokens": 20}})
	if res.IsError || !strings.Contains(text(res), "the sampled answer 4217") {
		t.Fatalf("result %s, want the client's answer in it", text(res))
	}
	if !strings.Contains(asked, "say 4217") {
		t.Errorf("the client was asked %q", asked)
	}
	callID, _ := res.Meta[server.MetaCallID].(string)
	if callID == "" || !auditHas(audit.String(), "upstream request", "sampling/createMessage", callID, "relayed") {
		t.Errorf("no audit event of the relayed sampling request with call id %q:\n%s", callID, audit)
	}

	// A client without sampling: the upstream gets an error, the tool
	// reports it, and the refusal is audited.
	plain := connect(t, s, nil)
	res = callCtx(t, plain, &mcp.CallToolParams{Name: "everything.trigger-sampling-request", Arguments: map[string]any{"prompt": "x", "maxTokens": 5}})
	if !res.IsError {
		t.Errorf("a client without sampling: result %s, want an error", text(res))
	}
	if !auditHas(audit.String(), "upstream request", "sampling/createMessage", "refused") {
		t.Errorf("the refusal is not audited:\n%s", audit)
	}
}

// auditHas reports whether one line of the log holds every part.
func auditHas(log string, parts ...string) bool {
	for line := range strings.Lines(log) {
		ok := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestUpstreamSamplingNotBridgedByDefault: the default bridge does not
// declare sampling, so server-everything does not offer its sampling tool.
func TestUpstreamSamplingNotBridgedByDefault(t *testing.T) {
	s, _ := everything(t, nil)
	cs := connect(t, s, nil)
	names := listNames(t, cs)
	if names["everything.trigger-sampling-request"] {
		t.Error("trigger-sampling-request is listed: sampling was declared upstream")
	}
	if !names["everything.trigger-elicitation-request"] || !names["everything.get-roots-list"] {
		t.Errorf("elicitation and roots tools missing: %v", names)
	}
}

func listNames(t *testing.T, cs *mcp.ClientSession) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out[tool.Name] = true
	}
	return out
}

// TestUpstreamElicitationBridged: the client's answer to the upstream's
// elicitation comes back in the tool's result. The same client is first
// asked to approve the call (the tool is not read-only), by Backplane.
func TestUpstreamElicitationBridged(t *testing.T) {
	s, audit := everything(t, nil)
	var message string
	cs := connect(t, s, &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		if strings.HasPrefix(r.Params.Message, "Backplane approval request") {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		}
		message = r.Params.Message
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada Lovelace 1815", "check": true}}, nil
	}})
	res := callCtx(t, cs, &mcp.CallToolParams{Name: "everything.trigger-elicitation-request", Arguments: map[string]any{}})
	if res.IsError || !strings.Contains(text(res), "Ada Lovelace 1815") {
		t.Fatalf("result %s, want the client's answer in it", text(res))
	}
	if message == "" {
		t.Error("the client was not asked")
	}
	callID, _ := res.Meta[server.MetaCallID].(string)
	if !auditHas(audit.String(), "upstream request", "elicitation/create", callID, "relayed") {
		t.Errorf("the relayed elicitation is not audited with call id %q", callID)
	}
}

// TestUpstreamRootsAndLogs: get-roots-list returns the calling client's
// roots; the upstream's log message sent during the call reaches that
// client at its level.
func TestUpstreamRootsAndLogs(t *testing.T) {
	s, _ := everything(t, nil)
	var mu sync.Mutex
	var logs []string
	c := mcp.NewClient(&mcp.Implementation{Name: "roots-client", Version: "v0"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			mu.Lock()
			defer mu.Unlock()
			logs = append(logs, string(r.Params.Level)+" "+toJSON(r.Params.Data))
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///work/project-7731", Name: "project-7731"})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.Connect(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	cs, err := c.Connect(context.Background(), ct, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if err := cs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	res := callCtx(t, cs, &mcp.CallToolParams{Name: "everything.get-roots-list", Arguments: map[string]any{}})
	if res.IsError || !strings.Contains(text(res), "file:///work/project-7731") {
		t.Fatalf("result %s, want the client's root", text(res))
	}
	waitFor(t, "the upstream's log message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range logs {
			if strings.Contains(l, "Roots updated") {
				return true
			}
		}
		return false
	})
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestUpstreamProgressOverHTTP: the same relay to a client over
// streamable HTTP.
func TestUpstreamProgressOverHTTP(t *testing.T) {
	s, _ := everything(t, nil)
	hs := httpServer(t, s)
	var mu sync.Mutex
	var steps []float64
	cs, err := connectHTTP(t, hs, "tok-e", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		if r.Params.ProgressToken == "tok-h" {
			steps = append(steps, r.Params.Progress)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := &mcp.CallToolParams{Name: "everything.trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 3}}
	p.SetProgressToken("tok-h")
	if res := callCtx(t, cs, p); res.IsError {
		t.Fatalf("the call failed: %s", text(res))
	}
	waitFor(t, "3 progress notifications", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(steps) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if !equalFloats(steps, []float64{1, 2, 3}) {
		t.Errorf("progress %v", steps)
	}
}
