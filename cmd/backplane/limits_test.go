package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeSubscribeFloodAndRateLimit: through the real binary (issue 22,
// item 7: 20,000 resources/subscribe on one session were each held and
// forwarded upstream; refusals filled the audit log). A session's
// subscribe flood stops at serve.max_subscriptions_per_session, and only
// what was taken reaches the upstream (its own log counts them); a
// repeated subscribe costs nothing; a request flood meets serve.rate_limit
// with 429 and Retry-After; /metrics counts both kinds of refusal, and the
// audit log has sampled events of them, not one per refusal.
func TestServeSubscribeFloodAndRateLimit(t *testing.T) {
	g := newGWDir(t, `operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: ["up.*"]
    resources: ["mem://*"]
servers:
  - name: up
    command: [`+jsonString(mcpTestServer(t))+`]
    env: [MCPTEST_TEMPLATE, MCPTEST_LOG]
serve:
  tokens: {"alice-token": alice}
  max_subscriptions_per_session: 8
  rate_limit: {per_second: 1, burst: 100}
`)
	upLog := filepath.Join(g.dir, "upstream.log")
	g.setEnv("MCPTEST_TEMPLATE", "mem://{name}")
	g.setEnv("MCPTEST_LOG", upLog)
	p := startServe(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   p.base + "/mcp",
		HTTPClient: &http.Client{Transport: tokenTransport("alice-token")},
		MaxRetries: -1,
	}, sessionEra)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.log())
	}
	defer cs.Close()

	const flood = 40
	taken, refused := 0, 0
	for i := range flood {
		err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("mem://r%d", i)})
		var je *jsonrpc.Error
		switch {
		case err == nil:
			taken++
		case errors.As(err, &je) && je.Code == -32029 && strings.Contains(je.Message, "serve.max_subscriptions_per_session"):
			refused++
		default:
			t.Fatalf("subscribe %d: %v\n%s", i, err, p.log())
		}
	}
	if taken != 8 || refused != flood-8 {
		t.Errorf("%d subscriptions taken, %d refused; want 8 and %d", taken, refused, flood-8)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mem://r0"}); err != nil {
		t.Errorf("a repeated subscribe: %v", err)
	}
	data, _ := os.ReadFile(upLog)
	if n := strings.Count(string(data), "\nsubscribe mem://") + boolInt(strings.HasPrefix(string(data), "subscribe mem://")); n != 8 {
		t.Errorf("the upstream was sent %d subscribes, want 8:\n%s", n, data)
	}

	// The rest of the bucket (100 at once, one more a second): raw
	// POSTs until the first 429. Each pass past the burst needs a second
	// of the loop, so 1000 are plenty under any load.
	var limited *http.Response
	for range 1000 {
		req, _ := http.NewRequest(http.MethodPost, p.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Authorization", "Bearer alice-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			limited = resp
			break
		}
	}
	if limited == nil {
		t.Fatalf("no 429 in 1000 requests at 1 a second:\n%s", p.log())
	}
	if secs, err := strconv.Atoi(limited.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("Retry-After %q", limited.Header.Get("Retry-After"))
	}

	_, metrics := httpGet(t, p.base+"/metrics", "ops-token")
	// (The client's own background requests may meet the limit too:
	// at least the one seen.)
	for limit, want := range map[string]int{"subscriptions_per_session": flood - 8, "rate": 1} {
		re := regexp.MustCompile(`(?m)^backplane_mcp_requests_limited_total\{caller="alice",limit="` + limit + `"\} (\d+)$`)
		m := re.FindStringSubmatch(metrics)
		if m == nil {
			t.Errorf("/metrics has no count of %s refusals", limit)
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n < want || limit != "rate" && n != want {
			t.Errorf("/metrics counts %d %s refusals, want %d", n, limit, want)
		}
	}

	// The audit log: sampled events of the subscription refusals (at
	// most one a second, the first with "refused":1), none per refusal.
	if err := p.stop(t); err != nil {
		t.Errorf("serve: %v\n%s", err, p.log())
	}
	audit, err := os.ReadFile(filepath.Join(g.dir, ".backplane", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var events []map[string]any
	for line := range strings.Lines(string(audit)) {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil && e["msg"] == "limit" && e["limit"] == "subscriptions_per_session" {
			events = append(events, e)
		}
	}
	if len(events) == 0 || len(events) >= flood-8 || events[0]["refused"] != 1.0 || events[0]["caller"] != "alice" {
		t.Errorf("%d audit events of %d refusals: %v", len(events), flood-8, events)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
