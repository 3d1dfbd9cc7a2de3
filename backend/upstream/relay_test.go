package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// TestClientCancelReachesUpstream: a client cancels its tools/call
// (notifications/cancelled to Backplane); the upstream server sees the
// cancellation of the call it was running (notifications/cancelled from
// Backplane: its handler's context ends), and the intent settles
// uncertain, since the server had the call and never answered.
func TestClientCancelReachesUpstream(t *testing.T) {
	e := newEnv(t)
	srv, logFile := testServerSpec(t, "go")
	e.connect(t, srv, nil)
	s := server.New(e.g, &server.Options{StdioCaller: "alice"})
	ct, st := sdk.NewInMemoryTransports()
	if _, err := s.Connect(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "canceller", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "go.slow", Arguments: map[string]any{}})
		errc <- err
	}()
	eventually(t, 20*time.Second, "the upstream received the call", func() bool {
		return countPrefix(serverLog(t, logFile), "call slow") == 1
	})
	if n := countPrefix(serverLog(t, logFile), "slow cancelled"); n != 0 {
		t.Fatalf("cancelled before the client cancelled: %d", n)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the client's call ended with %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	eventually(t, 20*time.Second, "the upstream saw the cancellation", func() bool {
		return countPrefix(serverLog(t, logFile), "slow cancelled") == 1
	})
	eventually(t, 20*time.Second, "the intent settled", func() bool {
		for _, in := range e.intents(t) {
			if in.Tool == "go.slow" && in.Status != store.StatusStarted {
				if in.Status != store.StatusUncertain {
					t.Errorf("intent %s, want uncertain", in.Status)
				}
				return true
			}
		}
		return false
	})
}

// TestListChangedReachesConcernedSessions: the upstream adds a tool and
// announces it; Backplane re-lists, and the session whose visible catalog
// changed (alice's, which had listed) gets notifications/tools/list_changed
// and then lists the new tool. A session that never listed and a caller
// who may see none of the tools (bob) get nothing.
func TestListChangedReachesConcernedSessions(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	e.connect(t, srv, nil)
	type counted struct {
		cs *sdk.ClientSession
		n  atomic.Int64
	}
	// A 2026-07-28 client (the SDK's default) with a list_changed handler
	// opens subscriptions/listen, asking to be told: "never listed" means
	// something only for a 2025-11-25 session, which quiet is.
	client := func(caller string, opts *sdk.ClientSessionOptions) *counted {
		c := &counted{}
		s := server.New(e.g, &server.Options{StdioCaller: caller})
		ct, st := sdk.NewInMemoryTransports()
		if _, err := s.Connect(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: caller, Version: "1"}, &sdk.ClientOptions{
			ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c.n.Add(1) },
		}).Connect(context.Background(), ct, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		c.cs = cs
		return c
	}
	names := func(c *counted) map[string]bool {
		res, err := c.cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, tl := range res.Tools {
			out[tl.Name] = true
		}
		return out
	}
	alice, quiet, bob := client("alice", nil), client("alice", &sdk.ClientSessionOptions{ProtocolVersion: Protocol20251125}), client("bob", nil)
	if names(alice)["go.extra"] {
		t.Fatal("go.extra is listed before it is added")
	}
	if len(names(bob)) != 0 {
		t.Fatal("bob sees tools")
	}
	if _, err := alice.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "go.add_extra", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "alice told of the change", func() bool { return alice.n.Load() == 1 })
	if !names(alice)["go.extra"] {
		t.Error("go.extra is not listed after the change")
	}
	// A second change: alice, having listed again, is told again.
	if _, err := alice.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "go.remove_extra", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "alice told of the second change", func() bool { return alice.n.Load() == 2 })
	if n, m := quiet.n.Load(), bob.n.Load(); n != 0 || m != 0 {
		t.Errorf("told of the changes: a session that never listed %d times, bob %d times; want 0", n, m)
	}
}

// TestOwnerNeverGuesses: a message that names no call goes to the calling
// session only when every call in flight is of that one session.
func TestOwnerNeverGuesses(t *testing.T) {
	cl := tool.Client(nil)
	var c calls
	if _, _, err := c.owner(); !errors.Is(err, errNoCall) {
		t.Errorf("no call: %v", err)
	}
	a1 := c.begin(context.Background(), &tool.Call{CallID: "a1", Session: "sa", Client: nopClient{}})
	a2 := c.begin(context.Background(), &tool.Call{CallID: "a2", Session: "sa", Client: nopClient{}})
	if in, ids, err := c.owner(); err != nil || in.session != "sa" || len(ids) != 2 {
		t.Errorf("one session: %v %v %v", in, ids, err)
	}
	b := c.begin(context.Background(), &tool.Call{CallID: "b", Session: "sb", Client: nopClient{}})
	if _, _, err := c.owner(); !errors.Is(err, errAmbiguous) {
		t.Errorf("two sessions: %v", err)
	}
	c.end(b)
	n := c.begin(context.Background(), &tool.Call{CallID: "n", Session: "sa", Client: cl})
	if _, _, err := c.owner(); !errors.Is(err, errAmbiguous) {
		t.Errorf("a call without a client beside: %v", err)
	}
	c.end(a1)
	c.end(a2)
	if _, _, err := c.owner(); !errors.Is(err, errNoClient) {
		t.Errorf("only a call without a client: %v", err)
	}
	c.end(n)
}

type nopClient struct{}

func (nopClient) Progress(context.Context, tool.Progress) error { return nil }
func (nopClient) Log(context.Context, tool.LogMessage) error    { return nil }
func (nopClient) Request(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return nil, tool.ErrNoChannel
}

// recordingClient answers every request with answer and keeps what it was
// sent.
type recordingClient struct {
	nopClient
	mu     sync.Mutex
	asked  []json.RawMessage
	answer string
}

func (c *recordingClient) Request(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if method != tool.RequestElicitation {
		return nil, tool.ErrNoChannel
	}
	c.asked = append(c.asked, params)
	return json.RawMessage(c.answer), nil
}

// TestRelayedElicitationNamesItsServer: finding 11 of issue 22. An
// upstream's form that calls itself a Backplane approval reaches the
// client with its message and title marked with the server's name, so it
// cannot pass for the gateway's own request; its _meta names the server
// too. At 2025-11-25 the server asks during the call (elicitation/create);
// at 2026-07-28 it answers input_required, and the retry carries the
// client's answer and the server's request state.
func TestRelayedElicitationNamesItsServer(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		legacy   bool
	}{{Protocol20260728, false}, {Protocol20251125, true}} {
		t.Run(tc.protocol, func(t *testing.T) {
			e := newEnv(t)
			srv, logFile := testServerSpec(t, "go")
			srv.Env = append(srv.Env, "MCPTEST_ELICIT", "MCPTEST_LEGACY")
			t.Setenv("MCPTEST_ELICIT", "1")
			if tc.legacy {
				t.Setenv("MCPTEST_LEGACY", "1")
			}
			u := e.connect(t, srv, nil)
			if got := u.Protocol(); got != tc.protocol {
				t.Fatalf("the upstream speaks %q, want %q", got, tc.protocol)
			}
			cl := &recordingClient{answer: `{"action":"decline"}`}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := e.g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "go.elicit", Arguments: json.RawMessage(`{}`), Client: cl})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(res.Result), "decline") {
				t.Errorf("the client's answer is not the tool's: %s", res.Result)
			}
			if !tc.legacy {
				if n := countPrefix(serverLog(t, logFile), "elicit answered state=elicit-state-1"); n != 1 {
					t.Errorf("the retry did not echo the request state: %q", serverLog(t, logFile))
				}
			}
			cl.mu.Lock()
			defer cl.mu.Unlock()
			if len(cl.asked) != 1 {
				t.Fatalf("the client was asked %d times, want once", len(cl.asked))
			}
			var p struct {
				Message         string `json:"message"`
				RequestedSchema struct {
					Title string `json:"title"`
				} `json:"requestedSchema"`
				Meta map[string]any `json:"_meta"`
			}
			if err := json.Unmarshal(cl.asked[0], &p); err != nil {
				t.Fatal(err)
			}
			mark := ElicitationMark("go")
			if !strings.HasPrefix(p.Message, mark) || !strings.Contains(p.Message, "operator token") {
				t.Errorf("message %q, want it to begin with %q", p.Message, mark)
			}
			if !strings.HasPrefix(p.RequestedSchema.Title, mark) {
				t.Errorf("title %q, want it to begin with %q", p.RequestedSchema.Title, mark)
			}
			if p.Meta[MetaServer] != "go" {
				t.Errorf("_meta %v, want %s: go", p.Meta, MetaServer)
			}
		})
	}
}

// gatedClient answers an elicitation with its own name, once gate is
// closed: the test holds every call's request until all have been asked.
type gatedClient struct {
	nopClient
	name  string
	asked chan<- string
	gate  <-chan struct{}
}

func (c *gatedClient) Request(ctx context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
	if method != tool.RequestElicitation {
		return nil, tool.ErrNoChannel
	}
	c.asked <- c.name
	select {
	case <-c.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return json.RawMessage(`{"action":"accept","content":{"token":"` + c.name + `"}}`), nil
}

// TestInputRequestsOfManyCallsInFlight: issue 24. Calls of several
// sessions in flight at once on one stdio upstream that speaks 2026-07-28
// each get their elicitation relayed to their own client, and each result
// carries its own client's answer. (At 2025-11-25 such requests name no
// call, and are refused while calls of several sessions are in flight:
// TestOwnerNeverGuesses.)
func TestInputRequestsOfManyCallsInFlight(t *testing.T) {
	e := newEnv(t)
	srv, logFile := testServerSpec(t, "go")
	srv.Env = append(srv.Env, "MCPTEST_ELICIT")
	t.Setenv("MCPTEST_ELICIT", "1")
	u := e.connect(t, srv, nil)
	if u.Protocol() != Protocol20260728 {
		t.Fatalf("the upstream speaks %q", u.Protocol())
	}
	const n = 4
	asked := make(chan string, n)
	gate := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type outcome struct {
		name, result string
		err          error
	}
	done := make(chan outcome, n)
	for i := range n {
		name := "client" + string(rune('a'+i))
		go func() {
			res, err := e.g.Call(ctx, gateway.CallRequest{Caller: "alice", Session: "session-" + name, Tool: "go.elicit",
				Arguments: json.RawMessage(`{}`), Client: &gatedClient{name: name, asked: asked, gate: gate}})
			if err != nil {
				done <- outcome{name: name, err: err}
				return
			}
			done <- outcome{name: name, result: string(res.Result)}
		}()
	}
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case name := <-asked:
			seen[name] = true
		case o := <-done:
			t.Fatalf("%s ended before every client was asked: %v %s", o.name, o.err, o.result)
		case <-ctx.Done():
			t.Fatalf("asked only %v", seen)
		}
	}
	close(gate)
	for range n {
		o := <-done
		if o.err != nil {
			t.Errorf("%s: %v", o.name, o.err)
			continue
		}
		if !strings.Contains(o.result, `\"token\":\"`+o.name+`\"`) {
			t.Errorf("%s got %s, want its own answer", o.name, o.result)
		}
	}
	if got := countPrefix(serverLog(t, logFile), "elicit answered"); got != n {
		t.Errorf("%d retries answered, want %d", got, n)
	}
}

// logClient keeps the log messages relayed to it.
type logClient struct {
	nopClient
	mu   sync.Mutex
	logs []tool.LogMessage
}

func (c *logClient) Log(_ context.Context, m tool.LogMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = append(c.logs, m)
	return nil
}

// TestUpstreamLogReachesCaller: a log message the server sends during a
// call reaches the call's client, at 2026-07-28 (the call's _meta asks for
// every level: there is no session to set one on) as at 2025-11-25
// (logging/setLevel).
// connectSaying connects e to the Go test server with its say and meta
// tools (MCPTEST_SAY), speaking 2025-11-25 only when legacy, and checks
// that the revision agreed is protocol.
func connectSaying(t *testing.T, e *env, protocol string, legacy bool) {
	t.Helper()
	srv, _ := testServerSpec(t, "go")
	srv.Env = append(srv.Env, "MCPTEST_SAY", "MCPTEST_LEGACY")
	t.Setenv("MCPTEST_SAY", "1")
	if legacy {
		t.Setenv("MCPTEST_LEGACY", "1")
	}
	u := e.connect(t, srv, nil)
	if u.Protocol() != protocol {
		t.Fatalf("protocol %q, want %q", u.Protocol(), protocol)
	}
}

func TestUpstreamLogReachesCaller(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		legacy   bool
	}{{Protocol20260728, false}, {Protocol20251125, true}} {
		t.Run(tc.protocol, func(t *testing.T) {
			e := newEnv(t)
			connectSaying(t, e, tc.protocol, tc.legacy)
			cl := &logClient{}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := e.g.Call(ctx, gateway.CallRequest{Caller: "alice", Session: "s", Tool: "go.say", Arguments: json.RawMessage(`{}`), Client: cl}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, "the log message reaches the client", func() bool {
				cl.mu.Lock()
				defer cl.mu.Unlock()
				for _, m := range cl.logs {
					if m.Logger == "mcptest" && strings.Contains(string(m.Data), "said during the call") {
						return true
					}
				}
				return false
			})
		})
	}
}

// TestInputRequestsThroughServeToTwoSessions: issue 24, end to end at the
// callers' 2025-11-25. Two sessions of Backplane's MCP server (Go SDK
// clients declaring elicitation) each call the elicit tool of one stdio
// upstream that speaks 2026-07-28, both calls in flight at once: each
// session gets its own elicitation/create, marked with the server's name,
// and each result carries its own session's answer.
func TestInputRequestsThroughServeToTwoSessions(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	srv.Env = append(srv.Env, "MCPTEST_ELICIT")
	t.Setenv("MCPTEST_ELICIT", "1")
	if u := e.connect(t, srv, nil); u.Protocol() != Protocol20260728 {
		t.Fatalf("the upstream speaks %q", u.Protocol())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	asked := make(chan string, 2)
	gate := make(chan struct{})
	session := func(name string) *sdk.ClientSession {
		s := server.New(e.g, &server.Options{StdioCaller: "alice"})
		ct, st := sdk.NewInMemoryTransports()
		if _, err := s.Connect(ctx, st); err != nil {
			t.Fatal(err)
		}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, &sdk.ClientOptions{
			ElicitationHandler: func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				if !strings.HasPrefix(req.Params.Message, ElicitationMark("go")) {
					t.Errorf("%s was asked %q, not marked with the server's name", name, req.Params.Message)
				}
				asked <- name
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"token": name}}, nil
			},
		}).Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: Protocol20251125})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	type outcome struct {
		name string
		res  *sdk.CallToolResult
		err  error
	}
	done := make(chan outcome, 2)
	for _, name := range []string{"first", "second"} {
		cs := session(name)
		go func() {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "go.elicit", Arguments: map[string]any{}})
			done <- outcome{name, res, err}
		}()
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case name := <-asked:
			seen[name] = true
		case o := <-done:
			t.Fatalf("%s ended before both sessions were asked: %v %+v", o.name, o.err, o.res)
		case <-ctx.Done():
			t.Fatalf("asked only %v", seen)
		}
	}
	close(gate)
	for range 2 {
		o := <-done
		if o.err != nil {
			t.Errorf("%s: %v", o.name, o.err)
			continue
		}
		data, _ := json.Marshal(o.res.Content)
		if o.res.IsError || !strings.Contains(string(data), `\"token\":\"`+o.name+`\"`) {
			t.Errorf("%s got %s, want its own answer", o.name, data)
		}
	}
}

// deferClient answers a server's requests by calling again
// (tool.InputDeferrer), as a 2026-07-28 caller does.
type deferClient struct{ nopClient }

func (deferClient) DefersInput() bool { return true }

// TestInputRequiredDeferredToTheCaller: a client that answers by calling
// again gets the upstream's input requests as a *tool.InputRequiredError
// (marked with the server's name, the server's state with them), and its
// retry carrying the answers and that state completes the call.
func TestInputRequiredDeferredToTheCaller(t *testing.T) {
	e := newEnv(t)
	srv, logFile := testServerSpec(t, "go")
	srv.Env = append(srv.Env, "MCPTEST_ELICIT")
	t.Setenv("MCPTEST_ELICIT", "1")
	u := e.connect(t, srv, nil)
	u.mu.Lock()
	b := u.tools["elicit"].backend
	u.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := &tool.Call{CallID: "c1", Tool: "go.elicit", Caller: "alice", Arguments: json.RawMessage(`{}`), Client: deferClient{}}
	_, err := b.Invoke(ctx, call)
	var ir *tool.InputRequiredError
	if !errors.As(err, &ir) {
		t.Fatalf("Invoke: %v, want *tool.InputRequiredError", err)
	}
	req, ok := ir.Requests["token"]
	if ir.Server != "go" || ir.State != "elicit-state-1" || !ok || req.Method != tool.RequestElicitation {
		t.Fatalf("input required %+v", ir)
	}
	var p struct {
		Message string         `json:"message"`
		Meta    map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil || !strings.HasPrefix(p.Message, ElicitationMark("go")) || p.Meta[MetaServer] != "go" {
		t.Errorf("the request is not marked with its server: %s (%v)", req.Params, err)
	}
	retry := *call
	retry.Input = &tool.InputAnswers{
		Responses: map[string]json.RawMessage{"token": json.RawMessage(`{"action":"accept","content":{"token":"t-42"}}`)},
		State:     ir.State,
	}
	res, err := b.Invoke(ctx, &retry)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Content), `t-42`) {
		t.Errorf("the retry's result %s lacks the client's answer", res.Content)
	}
	if n := countPrefix(serverLog(t, logFile), "elicit answered state=elicit-state-1"); n != 1 {
		t.Errorf("the server saw the answered retry %d times", n)
	}
}

// quietClient is a client whose caller takes no progress and no log
// messages (tool.ListeningClient), as a 2026-07-28 request of serve's fast
// path.
type quietClient struct{ nopClient }

func (quietClient) Listens() (progress, logs bool) { return false, false }

// capableQuietClient is a quietClient that declares roots
// (tool.CapableClient), as serve's clients do: its 2026-07-28 calls are
// written by the gateway itself (direct.go).
type capableQuietClient struct{ quietClient }

func (capableQuietClient) Capabilities() tool.Capabilities { return tool.Capabilities{Roots: true} }

// TestCallAsksOnlyWhatItsClientTakes: the server is sent a progress token
// and (at 2026-07-28, to a server that logs) a log level only for a client
// that can take progress and log messages; the 2026-07-28 call carries its
// protocol version, capabilities and clientInfo either way, whether the
// SDK writes the call (a client that does not say what it declares) or
// the gateway does (direct.go).
func TestCallAsksOnlyWhatItsClientTakes(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		legacy   bool
		client   tool.Client
		want     string
	}{
		{Protocol20260728, false, nopClient{}, "io.modelcontextprotocol/clientCapabilities io.modelcontextprotocol/clientInfo io.modelcontextprotocol/logLevel io.modelcontextprotocol/protocolVersion progressToken"},
		{Protocol20260728, false, quietClient{}, "io.modelcontextprotocol/clientCapabilities io.modelcontextprotocol/clientInfo io.modelcontextprotocol/protocolVersion"},
		{Protocol20260728, false, nil, "io.modelcontextprotocol/clientCapabilities io.modelcontextprotocol/clientInfo io.modelcontextprotocol/logLevel io.modelcontextprotocol/protocolVersion"},
		{Protocol20260728, false, capableQuietClient{}, "io.modelcontextprotocol/clientCapabilities io.modelcontextprotocol/clientInfo io.modelcontextprotocol/protocolVersion"},
		{Protocol20251125, true, nopClient{}, "progressToken"},
		{Protocol20251125, true, quietClient{}, ""},
	} {
		t.Run(fmt.Sprintf("%s/%T", tc.protocol, tc.client), func(t *testing.T) {
			e := newEnv(t)
			connectSaying(t, e, tc.protocol, tc.legacy)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := e.g.Call(ctx, gateway.CallRequest{Caller: "alice", Session: "s", Tool: "go.meta", Arguments: json.RawMessage(`{}`), Client: tc.client})
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Content []struct{ Text string } `json:"content"`
			}
			if err := json.Unmarshal(res.Result, &got); err != nil || len(got.Content) != 1 {
				t.Fatalf("result %s: %v", res.Result, err)
			}
			if got.Content[0].Text != tc.want {
				t.Errorf("the server's _meta holds\n%q, want\n%q", got.Content[0].Text, tc.want)
			}
		})
	}
}
