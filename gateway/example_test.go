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

// A tool, a policy, a call: the whole pipeline in a few lines. The example
// keeps its journal in memory (store/memstore); hosts pass store/sqlite or
// store/postgres for durability.
func Example() {
	rules, _ := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"echo"}}})
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	err := g.Register(context.Background(), tool.Tool{
		Name:        "echo",
		Description: "Echo the text back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: c.Arguments}, nil
		}),
	})
	if err != nil {
		panic(err)
	}

	res, err := g.Call(context.Background(), gateway.CallRequest{
		Caller: "alice", Tool: "echo", Arguments: json.RawMessage(`{"text":"hi"}`),
	})
	fmt.Println(string(res.Result), err)

	_, err = g.Call(context.Background(), gateway.CallRequest{
		Caller: "alice", Tool: "echo", Arguments: json.RawMessage(`{"text":7}`),
	})
	var ge *gateway.Error
	if errors.As(err, &ge) {
		fmt.Println(ge.Class, ge.Path, ge.Keyword)
	}

	_, err = g.Call(context.Background(), gateway.CallRequest{
		Caller: "mallory", Tool: "echo", Arguments: json.RawMessage(`{"text":"hi"}`),
	})
	// To a caller no rule lets near it, the tool does not exist.
	fmt.Println(errors.Is(err, store.ErrNotFound))
	// Output:
	// {"text":"hi"} <nil>
	// validation $arguments.text type
	// true
}
