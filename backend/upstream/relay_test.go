package upstream

import (
	"context"
	"encoding/json"
	"errors"
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
	client := func(caller string) *counted {
		c := &counted{}
		s := server.New(e.g, &server.Options{StdioCaller: caller})
		ct, st := sdk.NewInMemoryTransports()
		if _, err := s.Connect(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: caller, Version: "1"}, &sdk.ClientOptions{
			ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c.n.Add(1) },
		}).Connect(context.Background(), ct, nil)
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
	alice, quiet, bob := client("alice"), client("alice"), client("bob")
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
// cannot pass for the gateway's own request.
func TestRelayedElicitationNamesItsServer(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	srv.Env = append(srv.Env, "MCPTEST_ELICIT")
	t.Setenv("MCPTEST_ELICIT", "1")
	e.connect(t, srv, nil)
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
}
