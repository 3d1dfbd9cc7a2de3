package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
)

// TestSSEPollingIsResumed: issue 24 (SEP-1699). A 2025-11-25 server over
// streamable HTTP closes the SSE stream of a call in the middle of it,
// with a retry hint, and answers later: the gateway's client resumes the
// stream with a GET carrying Last-Event-ID and gets the answer.
func TestSSEPollingIsResumed(t *testing.T) {
	const polls = 4
	s := sdk.NewServer(&sdk.Implementation{Name: "polling", Version: "1"}, &sdk.ServerOptions{
		SupportedProtocolVersions: slices.DeleteFunc(sdk.SupportedProtocolVersions(), func(v string) bool { return v >= Protocol20260728 }),
	})
	var closed atomic.Int64
	s.AddTool(&sdk.Tool{Name: "poll", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			if req.Extra == nil || req.Extra.CloseSSEStream == nil {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "no stream to close"}}, IsError: true}, nil
			}
			// Polling: the stream is closed again and again while the
			// call works, each time with the hint to come back soon.
			for range polls {
				req.Extra.CloseSSEStream(sdk.CloseSSEStreamArgs{RetryAfter: 50 * time.Millisecond})
				closed.Add(1)
				select {
				case <-time.After(200 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "answered after the close"}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{EventStore: sdk.NewMemoryEventStore(nil)})
	var resumed atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
			resumed.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)

	e := newEnv(t)
	u := e.connect(t, Server{Name: "p", URL: ts.URL}, nil)
	if u.Protocol() != Protocol20251125 {
		t.Fatalf("protocol %q, want %s", u.Protocol(), Protocol20251125)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	res, err := e.g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "p.poll", Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the call took %v", time.Since(start))
	if !strings.Contains(string(res.Result), "answered after the close") {
		t.Errorf("result %s", res.Result)
	}
	if closed.Load() != polls || resumed.Load() < polls {
		t.Errorf("the stream was closed %d times and resumed %d times, want %d and at least %d", closed.Load(), resumed.Load(), polls, polls)
	}
}
