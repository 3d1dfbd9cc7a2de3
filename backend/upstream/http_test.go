package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/tool"
)

const (
	secret = "Bearer upstream-secret-7f3a"
	// httpSchema holds what decoding would change.
	httpSchema = `{"type":"object","properties":{"name":{"type":"string","description":"caf\u00e9"},"n":{"type":"integer","minimum":1.0}},"required":["name"],"additionalProperties":false}`
)

// httpUpstream is an in-process MCP server over streamable HTTP that
// requires the Authorization header.
type httpUpstream struct {
	addr     string
	jsonResp bool
	srv      *http.Server
	calls    atomic.Int64
	unauth   atomic.Int64
}

func (h *httpUpstream) handler() http.Handler {
	s := sdk.NewServer(&sdk.Implementation{Name: "httptest", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "greet", Description: "Greets over HTTP.", InputSchema: json.RawMessage(httpSchema),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			h.calls.Add(1)
			var a struct{ Name string }
			json.Unmarshal(req.Params.Arguments, &a)
			return &sdk.CallToolResult{
				Content:           []sdk.Content{&sdk.TextContent{Text: "hello, " + a.Name}},
				StructuredContent: json.RawMessage(`{"exact":1.0}`),
			}, nil
		})
	s.AddTool(&sdk.Tool{Name: "refuse", Description: "Invalid params.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no"}
		})
	s.AddPrompt(&sdk.Prompt{Name: "hp", Title: "HTTP prompt", Arguments: []*sdk.PromptArgument{{Name: "a", Required: true}}},
		func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "hp"}}}}, nil
		})
	mcpHandler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{JSONResponse: h.jsonResp})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != secret {
			h.unauth.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	})
}

// start serves on h.addr (a new port the first time).
func (h *httpUpstream) start(t *testing.T) {
	t.Helper()
	addr := h.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var l net.Listener
	var err error
	for range 50 { // the old listener's port may take a moment to free
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	h.addr = l.Addr().String()
	h.srv = &http.Server{Handler: h.handler()}
	go h.srv.Serve(l)
	srv := h.srv
	t.Cleanup(func() { srv.Close() })
}

func (h *httpUpstream) url() string { return "http://" + h.addr + "/mcp" }

// TestHTTPUpstream: over streamable HTTP (SSE answers, then JSON answers)
// the headers are sent, the schema registered byte for byte, the result
// returned as sent, and -32602 proves the call did not run.
func TestHTTPUpstream(t *testing.T) {
	for _, jsonResp := range []bool{false, true} {
		name := "sse"
		if jsonResp {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			h := &httpUpstream{jsonResp: jsonResp}
			h.start(t)
			e := newEnv(t)
			e.connect(t, Server{Name: "remote", URL: h.url(), Headers: map[string]string{"Authorization": secret}}, nil)
			tl, _, ok := e.g.Tool("remote.greet")
			if !ok || string(tl.InputSchema) != httpSchema || !tl.Pinned {
				t.Fatalf("remote.greet: %v %s", ok, tl.InputSchema)
			}
			res := e.mustCall(t, "remote.greet", `{"name":"ann"}`)
			want := `{"content":[{"type":"text","text":"hello, ann"}],"structuredContent":{"exact":1.0},"isError":false}`
			if string(res.Result) != want {
				t.Errorf("result %s\nwant %s", res.Result, want)
			}
			_, ge := e.call(t, "remote.refuse", `{}`)
			if ge == nil || ge.Class != tool.ClassExecutionFailure || ge.Details["status"] != "failed" {
				t.Errorf("remote.refuse: %+v, want execution_failure, failed", ge)
			}
			if h.unauth.Load() != 0 {
				t.Errorf("%d requests arrived without the header", h.unauth.Load())
			}
			if strings.Contains(e.logs.String(), "upstream-secret") {
				t.Errorf("the header's value was logged:\n%s", e.logs.String())
			}
		})
	}
}

// TestHTTPWrongHeaderRefusedAtStart: a server that refuses the credentials
// fails Connect, and the message does not quote the header.
func TestHTTPWrongHeaderRefusedAtStart(t *testing.T) {
	h := &httpUpstream{}
	h.start(t)
	e := newEnv(t)
	_, err := e.tryConnect(Server{Name: "remote", URL: h.url(), Headers: map[string]string{"Authorization": "Bearer wrong-secret"}}, nil)
	if err == nil {
		t.Fatal("Connect with a wrong header succeeded")
	}
	if strings.Contains(err.Error(), "wrong-secret") || strings.Contains(e.logs.String(), "wrong-secret") {
		t.Errorf("the header's value appears in %q or the log", err)
	}
	if len(e.g.Tools()) != 0 {
		t.Errorf("%d tools registered", len(e.g.Tools()))
	}
}

// TestHTTPReconnect: the server goes away and comes back on the same
// address. Once the loss is seen calls fail with ErrNotStarted; after, the
// upstream is connected again (a new session) and calls work.
func TestHTTPReconnect(t *testing.T) {
	h := &httpUpstream{}
	h.start(t)
	e := newEnv(t)
	u := e.connect(t, Server{Name: "remote", URL: h.url(), Headers: map[string]string{"Authorization": secret}}, nil)
	e.mustCall(t, "remote.greet", `{"name":"a"}`)

	h.srv.Close()
	// Until the loss is seen, a request may still be written on a kept-alive
	// connection the server just closed: that call is honestly uncertain.
	// Once it is seen, calls fail at once, not started.
	eventually(t, 20*time.Second, "the loss seen", func() bool { return !u.Connected() })
	b := &toolBackend{u: u, name: "greet"}
	_, err := b.Invoke(context.Background(), &tool.Call{Arguments: json.RawMessage(`{"name":"b"}`)})
	if !errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("call while the server is gone: %v, want ErrNotStarted", err)
	}
	h.start(t) // same address, a new server that knows no session
	eventually(t, 20*time.Second, "reconnected", func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.restarts > 0 && u.link != nil
	})
	before := h.calls.Load()
	e.mustCall(t, "remote.greet", `{"name":"c"}`)
	if h.calls.Load() != before+1 {
		t.Errorf("the new server got %d calls, want 1", h.calls.Load()-before)
	}
}

// TestHTTPUpstreamContentFromTheWire: over streamable HTTP too, prompts are
// listed from the raw answers (SSE and JSON), their bytes kept.
func TestHTTPUpstreamContentFromTheWire(t *testing.T) {
	for _, jsonResp := range []bool{false, true} {
		h := &httpUpstream{jsonResp: jsonResp}
		h.start(t)
		e := newEnv(t)
		u := e.connect(t, Server{Name: "remote", URL: h.url(), Headers: map[string]string{"Authorization": secret}}, nil)
		c, err := NewContent(context.Background(), []*Upstream{u})
		if err != nil {
			t.Fatal(err)
		}
		list, err := c.ListPrompts(context.Background())
		// Listed under the server's prefix, like its tools; the
		// descriptor is the server's own with the prefixed name.
		if err != nil || len(list) != 1 || list[0].Name != "remote.hp" {
			t.Fatalf("json %v: prompts %v, %v", jsonResp, list, err)
		}
		raw, ok := c.Descriptor("prompts/list", "remote.hp")
		if !ok || !strings.Contains(string(raw), `"title":"HTTP prompt"`) || !strings.Contains(string(raw), `"required":true`) || !strings.Contains(string(raw), `"name":"remote.hp"`) {
			t.Errorf("json %v: descriptor %s, %v", jsonResp, raw, ok)
		}
	}
}
