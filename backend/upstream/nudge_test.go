package upstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
)

// TestStalledServerIsNudged calls a stdio server whose answer waits until
// its stdin is read again after the call arrived, as a Go 1.26 server's
// does when its stop-the-world meets its blocked stdin read (nudge.go).
// Without the nudge nothing more is written to the server and the call
// runs out its deadline; with it the server is pinged after nudgeAfter and
// the call is answered, once.
func TestStalledServerIsNudged(t *testing.T) {
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := 4 * nudgeAfter
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules, Timeout: deadline})
	ctx, _, logFile := connectStalling(t, g)

	for i := range 3 {
		start := time.Now()
		res, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "go.stall", Arguments: []byte(`{}`)})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("call %d after %v: %v", i, took, err)
		}
		if !strings.Contains(string(res.Result), "unstalled") {
			t.Fatalf("call %d answered %s", i, res.Result)
		}
		if took < nudgeAfter/2 || took >= deadline {
			t.Errorf("call %d took %v: want about %v (the nudge), under the deadline %v", i, took, nudgeAfter, deadline)
		}
	}
	if n := countPrefix(serverLog(t, logFile), "call stall"); n != 3 {
		t.Errorf("the server ran the tool %d times, want 3 (never again for a nudge)", n)
	}
}

// TestStalledServerIsNudgedForPrompts: the same stall on a request that is
// not a tools/call (prompts/get) is ended by the nudge too.
func TestStalledServerIsNudgedForPrompts(t *testing.T) {
	ctx, u, logFile := connectStalling(t, gateway.New(&gateway.Options{Store: memstore.New()}))
	c, err := NewContent(ctx, []*Upstream{u})
	if err != nil {
		t.Fatal(err)
	}
	deadline := 4 * nudgeAfter
	for i := range 2 {
		start := time.Now()
		pctx, pcancel := context.WithTimeout(ctx, deadline)
		res, err := c.GetPrompt(pctx, "go.stall", nil, nil) // server go, default prefix
		pcancel()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("prompt %d after %v: %v", i, took, err)
		}
		if res.Description != "unstalled" {
			t.Fatalf("prompt %d answered %+v", i, res)
		}
		if took < nudgeAfter/2 {
			t.Errorf("prompt %d took %v: want about %v (the nudge)", i, took, nudgeAfter)
		}
	}
	if n := countPrefix(serverLog(t, logFile), "prompt stall"); n != 2 {
		t.Errorf("the server got the prompt %d times, want 2", n)
	}
}

// connectStalling connects the Go test server with its stalling tool and
// prompt (MCPTEST_STALL), registering into g; it returns a context of a
// minute, the upstream (closed when the test ends) and the server's log.
func connectStalling(t *testing.T, g *gateway.Gateway) (context.Context, *Upstream, string) {
	t.Helper()
	t.Setenv("MCPTEST_STALL", "1")
	srv, logFile := testServerSpec(t, "go")
	srv.Env = append(srv.Env, "MCPTEST_STALL")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	u, err := Connect(ctx, srv, &Options{Registry: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return ctx, u, logFile
}
