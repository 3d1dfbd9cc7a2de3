package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeDeepUpstreamAnswerFailsOnlyItsCall: through the real binary,
// a stdio upstream answers alice's call with a result nested 2000 levels
// (its id after the nesting) while bob's call on the same upstream is in
// flight (the test server holds bob's answer until the deep one is
// written, and the deep one until bob's call has arrived: no timing).
// alice's call fails as malformed_result; bob's succeeds; the connection
// stays up for the next call (issue 22, item 8: the deep line ended the
// connection and bob's call came back unknown_outcome).
func TestServeDeepUpstreamAnswerFailsOnlyItsCall(t *testing.T) {
	g := newGWDir(t, `policy:
  - caller: alice
    allow: ["up.*"]
  - caller: bob
    allow: ["up.*"]
servers:
  - name: up
    command: [`+jsonString(mcpTestServer(t))+`]
    env: [MCPTEST_DEEP]
serve:
  tokens: {"alice-token": alice, "bob-token": bob}
`)
	g.setEnv("MCPTEST_DEEP", "2000")
	p := startServe(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(token string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   p.base + "/mcp",
			HTTPClient: &http.Client{Transport: tokenTransport(token)},
		}, sessionEra)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, p.log())
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	alice, bob := connect("alice-token"), connect("bob-token")

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	held := make(chan answer, 1)
	go func() {
		res, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "up.held"})
		held <- answer{res, err}
	}()
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "up.deep"})
	if err != nil {
		t.Fatalf("alice's deep call: %v\n%s", err, p.log())
	}
	if class := classOf(res); !res.IsError || class != "malformed_result" {
		t.Errorf("alice's deep call: isError %v class %q, want malformed_result: %s", res.IsError, class, textOf(res))
	}
	b := <-held
	if b.err != nil {
		t.Fatalf("bob's call in flight: %v\n%s", b.err, p.log())
	}
	if b.res.IsError || textOf(b.res) != "held" {
		t.Errorf("bob's call in flight: isError %v class %q %s, want the tool's answer", b.res.IsError, classOf(b.res), textOf(b.res))
	}
	// The connection went on: the next call is answered, and the
	// upstream was never seen down.
	res, err = bob.CallTool(ctx, &mcp.CallToolParams{Name: "up.held"})
	if err != nil || res.IsError || textOf(res) != "held" {
		t.Errorf("the next call: %v %+v", err, res)
	}
	if log := p.log(); strings.Contains(log, "upstream down") {
		t.Errorf("the upstream connection ended:\n%s", log)
	}
}

func classOf(res *mcp.CallToolResult) string {
	c, _ := structuredMap(res)["class"].(string)
	return c
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
