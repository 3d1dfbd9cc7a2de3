package server_test

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// A gateway served to an MCP client. Over stdio (ServeStdio) and over a
// transport given to Connect, as here the SDK's in-memory one, every call
// is StdioCaller's; over HTTP (Handler, ServeHTTP) the caller is the one
// its bearer token maps to (Options.Tokens). The client sees only the
// tools the caller's policy lets near it, and every call goes through the
// whole pipeline.
func Example() {
	ctx := context.Background()
	rules, _ := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"greet"}}})
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	greet, _ := tool.Func("greet", "Greets someone.", func(ctx context.Context, in struct {
		Name string `json:"name"`
	}) (string, error) {
		return "Hello, " + in.Name + "!", nil
	}, nil)
	hidden, _ := tool.Func("shutdown", "Not for alice.", func(context.Context, struct{}) (string, error) { return "", nil }, nil)
	g.Register(context.Background(), greet)
	g.Register(context.Background(), hidden)

	srv := server.New(g, &server.Options{StdioCaller: "alice"})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.Connect(ctx, st); err != nil {
		panic(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()

	list, _ := cs.ListTools(ctx, nil)
	for _, t := range list.Tools {
		fmt.Println(t.Name, "-", t.Description)
	}
	res, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Ada"}})
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	res, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": 7}})
	fmt.Println(res.IsError, res.StructuredContent.(map[string]any)["class"])
	// Output:
	// greet - Greets someone.
	// Hello, Ada!
	// true validation
}
