package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// The embedded store: a gateway's journal, approvals, budgets and pins in
// one SQLite database in a folder, on stable storage before a call's tool
// runs. Here a call is made, the store closed, and the journal read back by
// another Open of the folder (a restart, or `backplane journal list`
// beside a running gateway).
func Example() {
	dir, _ := os.MkdirTemp("", "backplane-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	st, err := sqlite.Open(dir, nil)
	if err != nil {
		panic(err)
	}
	rules, _ := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"greet"}}})
	g := gateway.New(&gateway.Options{Store: st, Policy: rules})
	greet, _ := tool.Func("greet", "Greets someone.", func(ctx context.Context, in struct {
		Name string `json:"name"`
	}) (string, error) {
		return "Hello, " + in.Name + "!", nil
	}, nil)
	if err := g.Register(context.Background(), greet); err != nil {
		panic(err)
	}
	if _, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "greet", Arguments: json.RawMessage(`{"name":"Ada"}`)}); err != nil {
		panic(err)
	}
	st.Close()

	st, err = sqlite.Open(dir, nil)
	if err != nil {
		panic(err)
	}
	defer st.Close()
	intents, _ := st.ListIntents(ctx, store.IntentFilter{})
	for _, in := range intents {
		fmt.Println(in.Caller, in.Tool, in.Status, string(in.Arguments))
	}
	// Output:
	// alice greet succeeded {"name":"Ada"}
}
