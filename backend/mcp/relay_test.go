package mcp

import (
	"context"
	"errors"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
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
