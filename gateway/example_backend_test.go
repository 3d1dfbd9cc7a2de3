package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// prices is a custom backend: any type with Invoke. What it returns tells
// the gateway what is known of the outcome, and the journal records it.
type prices struct{ up bool }

func (p *prices) Invoke(ctx context.Context, c *tool.Call) (*tool.Result, error) {
	if !p.up {
		// Provably not run: the call settles failed and its budget is
		// given back. Any other error leaves the outcome unknown.
		return nil, fmt.Errorf("price service unreachable: %w", tool.ErrNotStarted)
	}
	var in struct {
		Item string `json:"item"`
	}
	if err := json.Unmarshal(c.Arguments, &in); err != nil {
		return nil, fmt.Errorf("%w: %w", tool.ErrNotStarted, err)
	}
	if in.Item != "tea" {
		// The tool ran and reports a failure of its own: a result.
		return &tool.Result{Content: json.RawMessage(`{"error":"unknown item"}`), IsError: true}, nil
	}
	return &tool.Result{Content: json.RawMessage(`{"item":"tea","price":3}`)}, nil
}

func Example_customBackend() {
	ctx := context.Background()
	st := memstore.New()
	rules, _ := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"price"}}})
	g := gateway.New(&gateway.Options{Store: st, Policy: rules})
	p := &prices{up: true}
	err := g.Register(context.Background(), tool.Tool{
		Name:        "price",
		Description: "The price of an item.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"item":{"type":"string"}},"required":["item"]}`),
		Backend:     p,
	})
	if err != nil {
		panic(err)
	}
	call := func(item string) {
		res, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "price", Arguments: json.RawMessage(`{"item":"` + item + `"}`)})
		var ge *gateway.Error
		switch {
		case errors.As(err, &ge):
			fmt.Println(item, "->", ge.Class)
		case err != nil:
			panic(err)
		default:
			fmt.Println(item, "->", string(res.Result), "isError:", res.IsError)
		}
	}
	call("tea")
	call("gold")
	p.up = false
	call("tea")

	// The journal: the tool's own failure is a call that ran.
	intents, _ := st.ListIntents(ctx, store.IntentFilter{})
	for _, in := range intents {
		status := string(in.Status)
		if in.ErrorClass != "" {
			status += " (" + in.ErrorClass + ")"
		}
		fmt.Println(string(in.Arguments), status)
	}
	// Unordered output:
	// tea -> {"item":"tea","price":3} isError: false
	// gold -> {"error":"unknown item"} isError: true
	// tea -> execution_failure
	// {"item":"tea"} succeeded
	// {"item":"gold"} succeeded
	// {"item":"tea"} failed (execution_failure)
}
