package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// updContent is subContent that lets the test announce resource updates,
// as an upstream does.
type updContent struct {
	subContent
	mu sync.Mutex
	fn func(uri string)
}

func (c *updContent) OnResourceUpdated(fn func(string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fn = fn
}

func (c *updContent) update(uri string) {
	c.mu.Lock()
	fn := c.fn
	c.mu.Unlock()
	fn(uri)
}

// TestModernListenToolsListChanged: issue 24. A 2026-07-28 client's
// subscriptions/listen stream (the Go SDK client opens one when it has a
// tools list_changed handler) is told when what its caller may see
// changes, and not when only another caller's tools change.
func TestModernListenToolsListChanged(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}}))
	changed := map[string]chan struct{}{"alice": make(chan struct{}, 8), "bob": make(chan struct{}, 8)}
	for who, tok := range map[string]string{"alice": "tok-alice", "bob": "tok-bob"} {
		connectModern(t, hs.URL, tok, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			changed[who] <- struct{}{}
		}})
	}
	register := func(name string) {
		t.Helper()
		err := f.g.Register(context.Background(), tool.Tool{Name: name, InputSchema: json.RawMessage(emptyObject),
			Backend: tool.BackendFunc(func(context.Context, *tool.Call) (*tool.Result, error) {
				return &tool.Result{Content: json.RawMessage(`{}`)}, nil
			})})
		if err != nil {
			t.Fatal(err)
		}
	}
	// alice may call every tool, bob only echo: a new tool is alice's
	// change alone, twice over (each change is told, not only the first).
	for _, name := range []string{"new-one", "new-two"} {
		register(name)
		select {
		case <-changed["alice"]:
		case <-time.After(20 * time.Second):
			t.Fatalf("alice's listen stream was not told that %s was added", name)
		}
	}
	select {
	case <-changed["bob"]:
		t.Error("bob's listen stream was told of a change to tools he cannot see")
	case <-time.After(500 * time.Millisecond):
	}
}

// TestModernListenResourceUpdates: a resource subscription of a listen
// stream (the Go SDK client's Subscribe at 2026-07-28) is decided by the
// policy as resources/subscribe is, reaches the upstream, and hears the
// upstream's updates of that resource.
func TestModernListenResourceUpdates(t *testing.T) {
	f := newFixture(t)
	content := &updContent{}
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Resources: []string{"test://watched", "test://other"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}, Content: content, ContentPolicy: rules})
	hs := httpServer(t, s)
	updated := make(chan string, 8)
	cs := connectModern(t, hs.URL, "tok-alice", &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		updated <- req.Params.URI
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const uri = "test://watched"
	subscribed := make(chan error, 1)
	go func() { subscribed <- cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if held, _ := content.counts(); held == 1 {
			break
		}
		select {
		case err := <-subscribed:
			t.Fatalf("Subscribe returned before the upstream had the subscription: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the listen stream's subscription did not reach the upstream")
		}
		time.Sleep(20 * time.Millisecond)
	}
	content.update("test://other")
	content.update(uri)
	select {
	case got := <-updated:
		if got != uri {
			t.Errorf("told of %s, want only %s", got, uri)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the update did not reach the listen stream")
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for held, _ := content.counts(); held != 0; held, _ = content.counts() {
		if time.Now().After(deadline) {
			t.Fatal("the ended listen stream's subscription was not released upstream")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestModernListenLeavesOutRefusedResources: a subscriptions/listen
// stream for two resources, one of which its caller may not read, carries
// the other: the acknowledgement lists only it, its updates arrive, and the
// refused one is audited. A stream for the refused one alone is refused,
// as resources/subscribe is.
func TestModernListenLeavesOutRefusedResources(t *testing.T) {
	audit := &lockedBuffer{}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Logger: slog.New(slog.NewJSONHandler(audit, nil))})
	content := &updContent{}
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Resources: []string{"test://watched"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}, Content: content, ContentPolicy: rules})
	hs := httpServer(t, s)
	listen := func(ctx context.Context, uris ...string) *http.Response {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": map[string]any{
			"notifications": map[string]any{"resourceSubscriptions": uris}, "_meta": modernMeta(`{}`)}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+server.PathMCP, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer tok-alice")
		req.Header.Set("Mcp-Protocol-Version", server.ModernProtocolVersion)
		req.Header.Set("Mcp-Method", "subscriptions/listen")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	alone := listen(ctx, "test://secret")
	answer, _ := firstEvent(bufio.NewScanner(alone.Body), `"id":9`)
	alone.Body.Close()
	if !strings.Contains(answer.data, `"error"`) || !strings.Contains(answer.data, "resource not found") {
		t.Errorf("a stream for a refused resource alone: %q", answer.data)
	}

	both := listen(ctx, "test://watched", "test://secret")
	defer both.Body.Close()
	sc := bufio.NewScanner(both.Body)
	ack, ok := firstEvent(sc, "notifications/subscriptions/acknowledged")
	if !ok {
		t.Fatal("no acknowledgement on the stream")
	}
	var n struct {
		Params struct {
			Notifications struct {
				ResourceSubscriptions []string `json:"resourceSubscriptions"`
			} `json:"notifications"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(ack.data), &n); err != nil {
		t.Fatal(err)
	}
	if got := n.Params.Notifications.ResourceSubscriptions; len(got) != 1 || got[0] != "test://watched" {
		t.Errorf("acknowledged %v, want only test://watched", got)
	}
	content.update("test://watched")
	if upd, ok := firstEvent(sc, "notifications/resources/updated"); !ok || !strings.Contains(upd.data, "test://watched") {
		t.Errorf("the update on the stream: %q", upd.data)
	}
	denied := 0
	for line := range strings.Lines(audit.String()) {
		if strings.Contains(line, `"step":"subscribe"`) && strings.Contains(line, `"outcome":"deny"`) && strings.Contains(line, "test://secret") {
			denied++
		}
	}
	if denied != 2 {
		t.Errorf("%d refusals of test://secret audited, want one per stream:\n%s", denied, audit)
	}
}
