package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
)

func TestToolsListPerCaller(t *testing.T) {
	f := newFixture(t)
	alice := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	bob := connect(t, server.New(f.g, &server.Options{StdioCaller: "bob"}), nil)
	carol := connect(t, server.New(f.g, &server.Options{StdioCaller: "carol"}), nil) // no rule: nothing

	ctx := context.Background()
	la, err := alice.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// untyped is allowed to alice but has no "type": "object" root: it is
	// left out rather than listed with an altered schema.
	want := []string{"broken", "costly", "danger", "dollar", "echo", "upstream"}
	if got := toolNames(la.Tools); !slices.Equal(got, want) {
		t.Errorf("alice sees %v, want %v", got, want)
	}
	lb, err := bob.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(lb.Tools); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("bob sees %v, want [echo]", got)
	}
	lc, err := carol.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lc.Tools) != 0 {
		t.Errorf("carol, whom no rule names, sees %v", toolNames(lc.Tools))
	}

	// Description and schema as registered (compared canonically here: the
	// Go client decodes the schema into float64s; the byte-exact check is
	// TestToolsListSchemaBytesOverHTTP).
	for _, tool := range la.Tools {
		reg, _, ok := f.g.Tool(tool.Name)
		if !ok {
			t.Fatalf("listed %s is not registered", tool.Name)
		}
		if tool.Description != reg.Description {
			t.Errorf("%s: description %q, want %q", tool.Name, tool.Description, reg.Description)
		}
		if tool.Name == "echo" {
			continue // its minimum does not survive float64, see the HTTP test
		}
		got, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		if canon(t, got) != canon(t, reg.InputSchema) {
			t.Errorf("%s: schema %s, want %s", tool.Name, got, reg.InputSchema)
		}
	}
	if a := la.Tools[slices.IndexFunc(la.Tools, func(x *mcp.Tool) bool { return x.Name == "echo" })].Annotations; a == nil || !a.ReadOnlyHint || !a.IdempotentHint {
		t.Errorf("echo's safety flags are not in its annotations: %+v", a)
	}
}

func canon(t testing.TB, b []byte) string {
	t.Helper()
	v, err := jsonstrict.Decode(b, nil)
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	c, err := canonjson.Append(nil, v)
	if err != nil {
		t.Fatalf("canonicalize %s: %v", b, err)
	}
	return string(c)
}

func TestToolsListPaging(t *testing.T) {
	f := newFixture(t)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice", PageSize: 2}), nil)
	var names []string
	pages := 0
	cursor := ""
	for {
		res, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(res.Tools) > 2 {
			t.Fatalf("page of %d tools, page size 2", len(res.Tools))
		}
		names = append(names, toolNames(res.Tools)...)
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	want := []string{"broken", "costly", "danger", "dollar", "echo", "upstream"}
	if !slices.Equal(names, want) || pages != 3 {
		t.Errorf("paged listing %v in %d pages, want %v in 3", names, pages, want)
	}
	_, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{Cursor: "%%%"})
	if err == nil {
		t.Error("a malformed cursor was accepted")
	}
}

func TestCallSucceeds(t *testing.T) {
	f := newFixture(t)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	res := call(t, cs, "echo", map[string]any{"text": "hi", "n": 3})
	if res.IsError {
		t.Fatalf("isError: %s", text(res))
	}
	sc := structured(t, res)
	echo, _ := sc["echo"].(map[string]any)
	if echo["text"] != "hi" || echo["n"] != json.Number("3") {
		t.Errorf("structuredContent %v", sc)
	}
	if got := canon(t, []byte(text(res))); got != `{"echo":{"n":3,"text":"hi"}}` {
		t.Errorf("content text %s", text(res))
	}
	id, _ := res.Meta[server.MetaCallID].(string)
	if id == "" {
		t.Fatalf("no call id in _meta: %v", res.Meta)
	}
	in, err := f.st.GetIntent(context.Background(), id)
	if err != nil {
		t.Fatalf("the journal has no intent %s: %v", id, err)
	}
	if in.Caller != "alice" || in.Tool != "echo" || in.Status != store.StatusSucceeded || !strings.HasPrefix(in.Session, "mcp_") {
		t.Errorf("intent %+v", in)
	}

	// A result that is not an object is text only.
	res = call(t, cs, "costly", nil) // arguments omitted: the empty object
	if res.IsError || text(res) != `"spent"` || res.StructuredContent != nil {
		t.Errorf("costly: isError %v, text %q, structured %v", res.IsError, text(res), res.StructuredContent)
	}
}

func TestCallUpstreamResultPassesThrough(t *testing.T) {
	f := newFixture(t)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	res := call(t, cs, "upstream", map[string]any{})
	if res.IsError {
		t.Fatalf("isError: %s", text(res))
	}
	if len(res.Content) != 1 || text(res) != "from upstream" {
		t.Errorf("content %v: the upstream's content list was not passed through", res.Content)
	}
	if sc := structured(t, res); sc["n"] == nil {
		t.Errorf("structuredContent %v, want the upstream's", sc)
	}
}

func TestCallInvalidArgumentsReportsEveryViolation(t *testing.T) {
	f := newFixture(t)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	// Three violations: text missing, n not an integer, extra not allowed.
	res := call(t, cs, "echo", map[string]any{"n": 1.5, "extra": true})
	if !res.IsError {
		t.Fatalf("invalid arguments did not give isError: %s", text(res))
	}
	sc := structured(t, res)
	if sc["class"] != "validation" || sc["step"] != "validate" || sc["tool"] != "echo" {
		t.Errorf("structuredContent %v", sc)
	}
	errs, _ := sc["errors"].([]any)
	if len(errs) != 3 {
		t.Fatalf("%d violations, want 3: %v", len(errs), sc["errors"])
	}
	var pointers, keywords []string
	for _, e := range errs {
		m := e.(map[string]any)
		pointers = append(pointers, m["pointer"].(string))
		keywords = append(keywords, m["keyword"].(string))
	}
	slices.Sort(pointers)
	slices.Sort(keywords)
	if !slices.Equal(pointers, []string{"", "/extra", "/n"}) || !slices.Equal(keywords, []string{"additionalProperties", "required", "type"}) {
		t.Errorf("pointers %v, keywords %v", pointers, keywords)
	}
	for _, want := range []string{"validation", "/extra", "/n", "text"} {
		if !strings.Contains(text(res), want) {
			t.Errorf("content text does not mention %q:\n%s", want, text(res))
		}
	}
	if f.echoes.Load() != 0 {
		t.Error("the backend was invoked")
	}
}

func TestCallRefusals(t *testing.T) {
	f := newFixture(t)
	alice := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	bob := connect(t, server.New(f.g, &server.Options{StdioCaller: "bob"}), nil)

	class := func(res *mcp.CallToolResult) string {
		t.Helper()
		if !res.IsError {
			t.Fatalf("not an error result: %s", text(res))
		}
		c, _ := structured(t, res)["class"].(string)
		return c
	}
	// Not granted, nor put to an approval: to bob, costly does not exist,
	// exactly like an unknown tool (finding 7).
	_, errCostly := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "costly", Arguments: map[string]any{"bad": 1}})
	_, errNone := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "costlz", Arguments: map[string]any{"bad": 1}})
	if errCostly == nil || errNone == nil ||
		errCostly.Error() != strings.ReplaceAll(errNone.Error(), "costlz", "costly") {
		t.Errorf("bob calling costly: %v; an unknown tool: %v; want the same answer", errCostly, errNone)
	}
	// Outside the subset: unsupported_capability naming $schema.
	res := call(t, alice, "dollar", map[string]any{"x": "y"})
	if c := class(res); c != "unsupported_capability" || structured(t, res)["keyword"] != "$schema" {
		t.Errorf("dollar: %v", structured(t, res))
	}
	// Budget: the first costly call fits, the second does not.
	if res := call(t, alice, "costly", map[string]any{}); res.IsError {
		t.Fatalf("first costly call: %s", text(res))
	}
	res = call(t, alice, "costly", map[string]any{})
	if c := class(res); c != "budget_exceeded" {
		t.Errorf("second costly call: %s", c)
	}
	// A backend that fails after starting: the call is uncertain, an error
	// result with the call id of its journal entry.
	res = call(t, alice, "broken", map[string]any{})
	sc := structured(t, res)
	if class(res) != "unknown_outcome" || sc["call_id"] == nil || res.Meta[server.MetaCallID] != sc["call_id"] {
		t.Errorf("broken: %v, _meta %v", sc, res.Meta)
	}
}

func TestCallUnknownToolIsProtocolError(t *testing.T) {
	f := newFixture(t)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "no-such-tool", Arguments: map[string]any{}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("error %v, want a JSON-RPC invalid params error", err)
	}
	if d := decode(t, we.Data); d["class"] != "not_found" {
		t.Errorf("error data %s", we.Data)
	}
}

func TestIdempotencyKeyFromMeta(t *testing.T) {
	f := newFixture(t)
	cs := connect(t, server.New(f.g, &server.Options{StdioCaller: "alice"}), nil)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "once"}, Meta: mcp.Meta{server.MetaIdempotencyKey: "k1"}}
	first, err := cs.CallTool(context.Background(), params)
	if err != nil || first.IsError {
		t.Fatalf("first call: %v %v", err, first)
	}
	second, err := cs.CallTool(context.Background(), params)
	if err != nil || second.IsError {
		t.Fatalf("second call: %v %v", err, second)
	}
	if f.echoes.Load() != 1 {
		t.Errorf("the tool ran %d times for one idempotency key", f.echoes.Load())
	}
	if second.Meta[server.MetaReplayed] != true || second.Meta[server.MetaCallID] != first.Meta[server.MetaCallID] {
		t.Errorf("second call's _meta %v, first's %v", second.Meta, first.Meta)
	}
}

func TestNoStdioCaller(t *testing.T) {
	f := newFixture(t)
	_, st := mcp.NewInMemoryTransports()
	if _, err := server.New(f.g, nil).Connect(context.Background(), st); !errors.Is(err, server.ErrNoStdioCaller) {
		t.Errorf("Connect without a stdio caller: %v", err)
	}
}

// ServeStdio over pipes: it serves until the client closes its end, and
// Shutdown gives the calls in flight the grace period, then cancels them
// and ends ServeStdio.
func TestServeStdioPipes(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{StdioCaller: "alice", ApprovalWait: time.Minute})
	clientR, serverW := io.Pipe()
	serverR, clientW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- s.ServeStdio(serverR, serverW) }()

	c := mcp.NewClient(&mcp.Implementation{Name: "pipe-client", Version: "v0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: clientR, Writer: clientW}, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "echo", map[string]any{"text": "over a pipe"}); res.IsError {
		t.Fatalf("echo: %s", text(res))
	}
	callDone := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcpCallDanger)
		callDone <- res
	}()
	for deadline := time.Now().Add(10 * time.Second); len(approvalsOf(t, f.st, "danger")) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call never asked for an approval")
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("Shutdown returned %v, want the cancelled call reported", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("returned after %s, before the grace period", d)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdio ended by Shutdown returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return")
	}
	if err := s.ServeStdio(io.NopCloser(strings.NewReader("")), nopWC{io.Discard}); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("ServeStdio after Shutdown: %v, want ErrServerClosed", err)
	}
	if f.dangers.Load() != 0 {
		t.Error("the unapproved call ran")
	}
	cs.Close()

	// A client that closes its end ends ServeStdio without error (a new
	// server: a server is done once shut down).
	s = server.New(f.g, &server.Options{StdioCaller: "alice"})
	clientR, serverW = io.Pipe()
	serverR, clientW = io.Pipe()
	go func() { served <- s.ServeStdio(serverR, serverW) }()
	cs, err = c.Connect(context.Background(), &mcp.IOTransport{Reader: clientR, Writer: clientW}, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "echo", map[string]any{"text": "bye"}); res.IsError {
		t.Fatalf("echo: %s", text(res))
	}
	cs.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdio after the client closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return after the client closed")
	}
}

type nopWC struct{ io.Writer }

func (nopWC) Close() error { return nil }
