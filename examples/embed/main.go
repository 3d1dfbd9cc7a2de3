// Command embed is the shortest program that embeds Backplane: one tool
// written as a Go function, the durable journal in SQLite (the folder
// embed-state, in the working folder), and the gateway served to an MCP
// client over stdio, as `backplane serve --stdio` serves it. Every call
// passes the whole pipeline: its arguments validated against the schema
// inferred from greet's argument type, the policy (default deny: the caller
// "local", the one of stdio, may call greet and nothing else), the intent
// journaled before greet runs, and the result (a string: plain text)
// recorded.
//
//	go run ./examples/embed
//
// A client that starts it (the MCP Inspector, a desktop agent's mcpServers
// entry) lists greet and calls it; `backplane journal list` with `store:`
// naming the folder shows the calls. examples/embed's test does both.
package main

import (
	"context"
	"os"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

func greet(ctx context.Context, in struct {
	Name string `json:"name" jsonschema:"who to greet"`
}) (string, error) {
	return "Hello, " + in.Name + "!", nil
}

func main() {
	st := must(sqlite.Open("embed-state", nil))
	defer st.Close()
	rules := must(policy.NewRules([]policy.Rule{{Caller: "local", Allow: []string{"greet"}}}))
	g := gateway.New(&gateway.Options{Store: st, Policy: rules})
	must(0, g.Register(context.Background(), must(tool.Func("greet", "Greets someone by name.", greet, nil))))
	// Served until the client closes stdin.
	must(0, server.New(g, &server.Options{StdioCaller: "local"}).ServeStdio(os.Stdin, os.Stdout))
}

// must stops the program on an error (a panic: the deferred Close runs);
// must(0, err) for a call that returns an error only.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
