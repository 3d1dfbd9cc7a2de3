package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// statelessClient is the Go SDK's client at 2026-07-28 through the
// balancer: no session, so each request may reach any replica. It fails
// the test if the gateway did not answer server/discover (the client then
// falls back to a 2025-11-25 session, which needs affinity).
func statelessClient(ctx context.Context, t *testing.T, b *balancer, seen *replicaSeen) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "balancer-test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   b.base + "/mcp",
		HTTPClient: &http.Client{Transport: seen.wrap(tokenTransport("alice-token"))},
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatalf("connect at 2026-07-28 through the balancer: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client speaks %q with the gateway, want 2026-07-28 (server/discover answered)", v)
	}
	return cs
}

// TestBalancerStatelessRoundRobin: a 2026-07-28 client behind a plain
// round-robin balancer (no affinity) lists and calls, is told a call needs
// approval, an operator approves it from a fourth process, and the retry,
// answered by whichever replica the balancer picks, runs the call exactly
// once; a second retry returns the recorded outcome without running it.
func TestBalancerStatelessRoundRobin(t *testing.T) {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s}", `  approval_wait: 0s
policy:
  - caller: alice
    allow: [note, danger]
    approve: [danger]
approvals:
  expire: 10m
tools:
`+noteTool+dangerTool))
	reps := startReplicas(t, g, "A", "B", "C")
	b := startBalancer(t, reps, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seen := &replicaSeen{by: map[string]int{}}
	cs := statelessClient(ctx, t, b, seen)

	for i := 0; i < 3; i++ {
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list %d: %v", i, err)
		}
		var names []string
		for _, tl := range lt.Tools {
			names = append(names, tl.Name)
		}
		if !strings.Contains(strings.Join(names, ","), "note") {
			t.Errorf("tools/list %d: %v, want note", i, names)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"n": i + 1}})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v, class %q", i, err, errorClass(res))
		}
	}

	args := map[string]any{"text": "through the balancer"}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "danger", Arguments: args})
	if err != nil {
		t.Fatalf("danger: %v", err)
	}
	if c := errorClass(res); c != "approval_required" {
		t.Fatalf("danger: class %q, want approval_required", c)
	}
	var refusal struct {
		Details struct {
			ApprovalID string `json:"approval_id"`
		} `json:"details"`
	}
	raw := structuredOf(res)
	if json.Unmarshal(raw, &refusal) != nil || refusal.Details.ApprovalID == "" {
		t.Fatalf("approval_required without an approval id: %s", raw)
	}
	g.run(t, "", append([]string{"approvals", "approve", refusal.Details.ApprovalID, "--as", "bob"}, g.auditFlag()...)...).wantCode(t, exitOK)

	// The retries: the first runs the call, whichever replica answers; the
	// ones after it find the approval consumed and are refused or asked
	// again, never run.
	ran := 0
	for i := 0; i < 4; i++ {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "danger", Arguments: args})
		if err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
		if errorClass(res) == "" {
			ran++
		}
	}
	dangerRuns := 0
	for _, line := range g.notes(t) {
		if strings.Contains(line, "through the balancer") {
			dangerRuns++
		}
	}
	if ran != 1 || dangerRuns != 1 {
		t.Errorf("of four retries %d succeeded and the tool ran %d times; want exactly one of each", ran, dangerRuns)
	}
	if n := len(seen.snapshot()); n < 3 {
		t.Errorf("the client's requests reached %v: want all three replicas", seen.snapshot())
	}
	t.Logf("requests answered per replica: %v", seen.snapshot())
}

// TestBalancerStatelessQuota: 64 concurrent 2026-07-28 calls from 8
// clients through a round-robin balancer with no affinity spend one quota
// of 20 across three replicas exactly once.
func TestBalancerStatelessQuota(t *testing.T) {
	const quota, clients, perClient = 20, 8, 8
	g, b := quotaReplicas(t, quota, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	seen := &replicaSeen{by: map[string]int{}}
	var css []*mcp.ClientSession
	for range clients {
		css = append(css, statelessClient(ctx, t, b, seen))
	}
	spendQuota(ctx, t, g, css, perClient, quota, seen)
	if n := len(seen.snapshot()); n < 3 {
		t.Errorf("requests reached %v: want all three replicas", seen.snapshot())
	}
}

// TestBalancerStatelessUpstreamInput: issue 24. A 2026-07-28 client behind
// the round-robin balancer calls a tool whose upstream (each replica's own
// stdio copy of it) asks for input: the input_required answer comes from
// one replica, and the retry carrying the answer, signed state and all,
// continues the call on whichever replica the balancer picks. Every call
// gets its own answer, each attempt is journaled once as input_required
// and each continuation once as succeeded.
func TestBalancerStatelessUpstreamInput(t *testing.T) {
	db := newPGSchema(t)
	logFile := filepath.Join(t.TempDir(), "upstream.log")
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s}", `  request_state_key_env: BACKPLANE_TEST_STATE_KEY
policy:
  - caller: alice
    allow: ["go.*"]
servers:
  - name: go
    command: [`+jsonString(mcpTestServer(t))+`]
    env: [MCPTEST_ELICIT, MCPTEST_LOG]
`))
	g.setEnv("BACKPLANE_TEST_STATE_KEY", "a request-state key shared by the three replicas, 32+ bytes")
	g.setEnv("MCPTEST_ELICIT", "1")
	g.setEnv("MCPTEST_LOG", logFile)
	reps := startReplicas(t, g, "A", "B", "C")
	b := startBalancer(t, reps, false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	var calls []string // the replica that answered each tools/call request, in order
	base := tokenTransport("alice-token")
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		if err == nil && r.Header.Get("Mcp-Method") == "tools/call" {
			mu.Lock()
			calls = append(calls, resp.Header.Get(replicaHeader))
			mu.Unlock()
		}
		return resp, err
	})
	var token string
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "balancer-input", Version: "v0"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"token": token}}, nil
		},
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.base + "/mcp", HTTPClient: &http.Client{Transport: tr}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	const n = 6
	for i := range n {
		token = fmt.Sprintf("token-%d", i)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "go.elicit", Arguments: map[string]any{}})
		if err != nil || res.IsError || len(res.Content) != 1 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"token":"`+token+`"`) {
			t.Fatalf("call %d: %+v %v (class %q)", i, res, err, errorClass(res))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	moved := 0
	for i := 0; i+1 < len(calls); i += 2 {
		if calls[i] != "" && calls[i+1] != "" && calls[i] != calls[i+1] {
			moved++
		}
	}
	t.Logf("tools/call requests answered by %v", calls)
	if len(calls) != 2*n || moved == 0 {
		t.Errorf("%d tools/call requests, %d retries on another replica than their first round; want %d and at least one", len(calls), moved, 2*n)
	}
	data, _ := os.ReadFile(logFile)
	if got := strings.Count(string(data), "elicit answered state=elicit-state-1"); got != n {
		t.Errorf("the upstreams answered %d retries, want %d", got, n)
	}
	status := map[string]int{}
	for _, in := range g.pgJournal(t) {
		status[fmt.Sprint(in["status"], " ", in["error_class"])]++
	}
	if want := map[string]int{"failed input_required": n, "succeeded <nil>": n}; fmt.Sprint(status) != fmt.Sprint(want) {
		t.Errorf("journal %v, want %v", status, want)
	}
}
