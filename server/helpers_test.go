package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// Schemas of the test catalog, as registered: the listing must carry these
// exact values (the minimum below is not a float64: decoding it through Go
// numbers would change it).
const (
	echoSchema   = `{"type":"object","properties":{"text":{"type":"string","description":"what to echo"},"n":{"type":"integer","minimum":0.99999999999999999999}},"required":["text"],"additionalProperties":false}`
	dollarSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"x":{"type":"string"}}}`
	untypedRoot  = `{"properties":{"a":{"type":"string"}}}`
	emptyObject  = `{"type":"object"}`
)

// fixture is a gateway over a real SQLite store with a small catalog:
//
//	echo      returns {"echo": <arguments>}; alice and bob may call it
//	upstream  returns an MCP result object, as an MCP upstream would
//	danger    needs an approval (alice); counts its invocations
//	costly    costs 1 of alice's caller budget of 1
//	dollar    a schema outside the subset ($schema): every call refused
//	untyped   a schema without a root type: left out of tools/list
//	broken    its backend fails after starting: uncertain
type fixture struct {
	g       *gateway.Gateway
	st      store.Store
	dangers atomic.Int64
	echoes  atomic.Int64
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	st, err := sqlite.Open(t.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rules, err := policy.NewRules([]policy.Rule{
		// self_approve: the person at alice's own client may decide
		// (the elicitation tests).
		{Caller: "alice", Allow: []string{"*"}, Approve: []string{"danger"}, SelfApprove: true},
		{Caller: "bob", Allow: []string{"echo"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st}
	f.g = gateway.New(&gateway.Options{
		Store:   st,
		Policy:  rules,
		Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1, Cost: map[string]int64{"costly": 1}, Default: new(int64)}},
	})
	register := func(name, desc, schema string, safety tool.Safety, fn tool.BackendFunc) {
		t.Helper()
		err := f.g.Register(context.Background(), tool.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(schema), Safety: safety, Backend: fn})
		if err != nil && name != "dollar" { // dollar's schema is outside the subset on purpose
			t.Fatalf("register %s: %v", name, err)
		}
	}
	register("echo", "Echo the arguments.", echoSchema, tool.Safety{ReadOnly: true, Idempotent: true},
		func(_ context.Context, c *tool.Call) (*tool.Result, error) {
			f.echoes.Add(1)
			return &tool.Result{Content: json.RawMessage(`{"echo":` + string(c.Arguments) + `}`)}, nil
		})
	register("upstream", "Answers as an MCP server does.", emptyObject, tool.Safety{},
		func(context.Context, *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{"content":[{"type":"text","text":"from upstream"}],"structuredContent":{"n":12345678901234567890},"isError":false}`)}, nil
		})
	register("danger", "Needs an approval.", `{"type":"object","properties":{"target":{"type":"string"}},"required":["target"]}`, tool.Safety{},
		func(_ context.Context, c *tool.Call) (*tool.Result, error) {
			f.dangers.Add(1)
			return &tool.Result{Content: json.RawMessage(`{"done":true}`)}, nil
		})
	register("costly", "Costs budget.", emptyObject, tool.Safety{},
		func(context.Context, *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`"spent"`)}, nil
		})
	register("dollar", "Declares $schema.", dollarSchema, tool.Safety{},
		func(context.Context, *tool.Call) (*tool.Result, error) {
			t.Error("the dollar tool must never be invoked")
			return &tool.Result{Content: json.RawMessage(`{}`)}, nil
		})
	register("untyped", "No root type.", untypedRoot, tool.Safety{},
		func(context.Context, *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
		})
	register("broken", "Fails after starting.", emptyObject, tool.Safety{},
		func(context.Context, *tool.Call) (*tool.Result, error) {
			return nil, io.ErrUnexpectedEOF
		})
	return f
}

// sessionEra makes a Go SDK client (which tries 2026-07-28 first, without
// a session) initialize a 2025-11-25 session: the tests of sessions'
// behaviour use it; modern_test.go's clients speak 2026-07-28.
var sessionEra = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// connect serves s to a Go SDK client over the SDK's in-memory transports
// (the stdio caller is the caller).
func connect(t testing.TB, s *server.Server, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.Connect(ctx, st); err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, copts)
	cs, err := c.Connect(ctx, ct, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// httpServer serves s.Handler on a loopback port.
func httpServer(t testing.TB, s *server.Server) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// connectHTTP connects a Go SDK client to hs's /mcp with token.
func connectHTTP(t testing.TB, hs *httptest.Server, token string, copts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{
		Endpoint:   hs.URL + server.PathMCP,
		HTTPClient: &http.Client{Transport: bearerTransport{token, http.DefaultTransport}},
		MaxRetries: -1,
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-http-client", Version: "v0"}, copts)
	cs, err := c.Connect(context.Background(), tr, sessionEra)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func call(t testing.TB, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

// structured decodes a result's structuredContent (numbers as json.Number).
func structured(t testing.TB, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

// structuredError decodes an error result's structured error: for a tool
// that declares an output schema (the built-ins) it is in
// _meta["backplane/error"] (schemaSafeError), else in structuredContent.
func structuredError(t testing.TB, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if !res.IsError {
		t.Fatalf("not an error result: %s", text(res))
	}
	if res.StructuredContent != nil {
		return structured(t, res)
	}
	b, err := json.Marshal(res.Meta[server.MetaError])
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

func decode(t testing.TB, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, b)
	}
	return m
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func toolNames(tools []*mcp.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}
