package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
)

// TestConcurrentCallsOverStdio makes many concurrent calls to one stdio
// upstream (the Go SDK test server) and requires each to get its own answer
// well before its deadline: a lost or mismatched answer shows as a call that
// times out or gets another call's greeting.
func TestConcurrentCallsOverStdio(t *testing.T) {
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules, Timeout: 10 * time.Second})
	srv, _ := testServerSpec(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := Connect(ctx, srv, &Options{Registry: g})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()

	const workers, each = 16, 150
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				res, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "go.greet", Arguments: json.RawMessage(`{"name":"` + name + `"}`)})
				if err != nil {
					errs <- fmt.Errorf("call %s: %v", name, err)
					return
				}
				if !strings.Contains(string(res.Result), `"hello, `+name+`"`) {
					errs <- fmt.Errorf("call %s answered %s", name, res.Result)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
