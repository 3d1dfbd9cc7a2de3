package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// subContent is a ContentSource that offers subscriptions only and counts
// what reaches it, as an upstream would see it.
type subContent struct {
	mu   sync.Mutex
	subs map[string]int // URI -> Subscribe minus Unsubscribe
	sent int            // Subscribe calls
}

func (c *subContent) ListResources(context.Context) ([]*mcp.Resource, error) { return nil, nil }
func (c *subContent) ListResourceTemplates(context.Context) ([]*mcp.ResourceTemplate, error) {
	return nil, nil
}
func (c *subContent) ReadResource(context.Context, string, *tool.Call) (*mcp.ReadResourceResult, error) {
	return nil, errors.New("none")
}
func (c *subContent) ListPrompts(context.Context) ([]*mcp.Prompt, error) { return nil, nil }
func (c *subContent) GetPrompt(context.Context, string, map[string]string, *tool.Call) (*mcp.GetPromptResult, error) {
	return nil, errors.New("none")
}
func (c *subContent) Complete(context.Context, *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return nil, errors.New("none")
}
func (c *subContent) Subscribe(_ context.Context, uri string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs == nil {
		c.subs = map[string]int{}
	}
	c.subs[uri]++
	c.sent++
	return nil
}
func (c *subContent) Unsubscribe(_ context.Context, uri string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs[uri]--; c.subs[uri] == 0 {
		delete(c.subs, uri)
	}
	return nil
}
func (c *subContent) OnResourceUpdated(func(string))        {}
func (c *subContent) Offers() (completions, subscribe bool) { return false, true }

func (c *subContent) counts() (held, sent int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.subs {
		held += n
	}
	return held, c.sent
}

// limitServer serves a gateway with no tools and subContent, whose
// resources test://* are granted to alice (stdio and token tok-a).
func limitServer(t *testing.T, opts server.Options) (*server.Server, *subContent, *lockedBuffer) {
	t.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Resources: []string{"test://*"}}})
	if err != nil {
		t.Fatal(err)
	}
	audit := &lockedBuffer{}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules, Logger: slog.New(slog.NewJSONHandler(audit, nil))})
	content := &subContent{}
	opts.StdioCaller = "alice"
	opts.Tokens = map[string]string{"tok-a": "alice"}
	opts.Operators = map[string]string{"tok-ops": "ops"}
	opts.Content, opts.ContentPolicy = content, rules
	return server.New(g, &opts), content, audit
}

// limitError is the limit a JSON-RPC error of CodeLimitExceeded names.
func limitError(t *testing.T, err error) string {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != server.CodeLimitExceeded {
		t.Fatalf("error %v, want a JSON-RPC error %d", err, server.CodeLimitExceeded)
	}
	var data struct{ Limit string }
	if json.Unmarshal(je.Data, &data) != nil {
		t.Fatalf("error data %s", je.Data)
	}
	return data.Limit
}

// limitedCount is backplane_mcp_requests_limited_total of alice and limit.
func limitedCount(t *testing.T, hs *httptest.Server, limit string) float64 {
	t.Helper()
	v, _ := metricValue(t, scrape(t, hs, "tok-ops"), "backplane_mcp_requests_limited_total", `caller="alice"`, `limit="`+limit+`"`)
	return v
}

// TestSubscriptionCaps: a session holds at most MaxSubscriptionsPerSession,
// a caller at most MaxSubscriptionsPerCaller over its sessions; a repeated
// subscribe costs nothing; what is refused never reaches the upstream, is
// counted in /metrics and audited; unsubscribing, or a session's end,
// frees its place (issue 22, item 7).
func TestSubscriptionCaps(t *testing.T) {
	s, content, audit := limitServer(t, server.Options{MaxSubscriptionsPerSession: 3, MaxSubscriptionsPerCaller: 5})
	hs := httpServer(t, s)
	ctx := context.Background()
	a, b := connect(t, s, nil), connect(t, s, nil)
	sub := func(cs *mcp.ClientSession, uri string) error {
		return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
	}
	for i := range 3 {
		if err := sub(a, fmt.Sprintf("test://a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		if err := sub(a, "test://a0"); err != nil { // held: no new one
			t.Fatalf("a repeated subscribe: %v", err)
		}
	}
	if got := limitError(t, sub(a, "test://a3")); got != "subscriptions_per_session" {
		t.Errorf("the session's fourth: limit %q", got)
	}
	for i := range 2 {
		if err := sub(b, fmt.Sprintf("test://b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := limitError(t, sub(b, "test://b2")); got != "subscriptions_per_caller" {
		t.Errorf("the caller's sixth: limit %q", got)
	}
	if held, sent := content.counts(); held != 5 || sent != 5 {
		t.Errorf("upstream: %d held, %d subscribes sent; want 5 and 5", held, sent)
	}
	if n := s.SubscriptionCount("alice"); n != 5 {
		t.Errorf("SubscriptionCount %d, want 5", n)
	}
	for limit, want := range map[string]float64{"subscriptions_per_session": 1, "subscriptions_per_caller": 1} {
		if got := limitedCount(t, hs, limit); got != want {
			t.Errorf("metric of %s: %v, want %v", limit, got, want)
		}
	}
	if !auditHas(audit.String(), `"msg":"limit"`, `"caller":"alice"`, `"limit":"subscriptions_per_session"`, `"refused":1`) {
		t.Errorf("the refusal is not audited:\n%s", audit)
	}

	if err := a.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "test://a0"}); err != nil {
		t.Fatal(err)
	}
	if err := sub(b, "test://b2"); err != nil {
		t.Errorf("after an unsubscribe: %v", err)
	}
	a.Close()
	// The count is released first, the upstream's unsubscribes are sent
	// after (outside the lock): wait for both.
	held := func() int { h, _ := content.counts(); return h }
	for deadline := time.Now().Add(20 * time.Second); s.SubscriptionCount("alice") != 3 || held() != 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("20s after the session's end: %d subscriptions count, the upstream holds %d; want 3 and 3", s.SubscriptionCount("alice"), held())
		}
	}
}

// TestRateLimitStdio: over stdio, a request past the caller's bucket is
// answered with CodeLimitExceeded and the time to wait, before any work;
// the refusals are counted in /metrics and sampled in the audit log.
func TestRateLimitStdio(t *testing.T) {
	s, _, audit := limitServer(t, server.Options{RateLimit: 1, RateBurst: 20})
	hs := httpServer(t, s)
	cs := connect(t, s, nil)
	var err error
	pings := 0
	for ; pings < 1000 && err == nil; pings++ {
		err = cs.Ping(context.Background(), nil)
	}
	if got := limitError(t, err); got != "rate" {
		t.Fatalf("limit %q", got)
	}
	var je *jsonrpc.Error
	errors.As(err, &je)
	var data struct{ RetryAfterSeconds int }
	if json.Unmarshal(je.Data, &data); data.RetryAfterSeconds < 1 || !strings.Contains(je.Message, "serve.rate_limit") {
		t.Errorf("error %q %s: want the key and a retry after of at least 1s", je.Message, je.Data)
	}
	refused := 1
	for range 20 {
		if cs.Ping(context.Background(), nil) != nil {
			refused++
		}
	}
	if got := limitedCount(t, hs, "rate"); got != float64(refused) {
		t.Errorf("metric %v, want %d refusals", got, refused)
	}
	events := 0
	for line := range strings.Lines(audit.String()) {
		if strings.Contains(line, `"msg":"limit"`) && strings.Contains(line, `"limit":"rate"`) {
			events++
		}
	}
	// At most one event a second: fewer events than refusals unless the
	// 21 refusals took 20 seconds.
	if events == 0 || events >= refused {
		t.Errorf("%d audit events for %d refusals:\n%s", events, refused, audit)
	}
}

// TestRateLimitHTTP: over HTTP, a request past the caller's bucket is
// answered 429 with Retry-After before the MCP handler reads it.
func TestRateLimitHTTP(t *testing.T) {
	s, _, _ := limitServer(t, server.Options{RateLimit: 1, RateBurst: 5})
	hs := httpServer(t, s)
	var resp *http.Response
	for range 1000 {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+server.PathMCP, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Authorization", "Bearer tok-a")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusTooManyRequests {
			resp = r
			break
		}
	}
	if resp == nil {
		t.Fatal("no 429 in 1000 requests at 1 a second")
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if got := limitedCount(t, hs, "rate"); got < 1 {
		t.Errorf("metric %v, want at least 1", got)
	}
}

// TestRateLimitHooks: the hook endpoint draws from the caller's bucket too
// (a looping agent's hook is a caller's request like any other); the
// hook verb fails closed on the 429.
func TestRateLimitHooks(t *testing.T) {
	s, _, _ := limitServer(t, server.Options{RateLimit: 1, RateBurst: 5, Hooks: &server.HookOptions{Workspace: t.TempDir()}})
	hs := httpServer(t, s)
	limited := false
	for range 1000 {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+server.PathHooks+"claude-code", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer tok-a")
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("no 429 from the hook endpoint in 1000 requests at 1 a second")
	}
	if got := limitedCount(t, hs, "rate"); got < 1 {
		t.Errorf("metric %v, want at least 1", got)
	}
}
