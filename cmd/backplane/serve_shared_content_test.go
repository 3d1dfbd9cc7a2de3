package main

import (
	"context"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Two servers listing the same resource URI and the same prompt name (two
// copies of a server, two servers that both have a prompt "help") refused
// the whole start (issue 22, finding 23). Through the built serve now: it
// starts, the prompts are one.help and two.help, each got from its own
// server, and the shared URI is refused when read, naming both servers.
func TestServeTwoServersShareContent(t *testing.T) {
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program to set the test servers' content")
	}
	srv := mcpTestServer(t)
	g := newGWDir(t, `policy:
  - caller: alice
    allow: ["*"]
    resources: ["test://shared/*"]
    prompts: ["*.help"]
builtin: {enable: []}
servers:
  - name: one
    command: [`+jsonString(envBin)+`, MCPTEST_CONTENT=one, `+jsonString(srv)+`]
  - name: two
    command: [`+jsonString(envBin)+`, MCPTEST_CONTENT=two, `+jsonString(srv)+`]
serve:
  tokens: {"alice-token": alice}
`)
	p := startServe(t, g)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.base + "/mcp",
		HTTPClient: &http.Client{Transport: tokenTransport("alice-token")}}, sessionEra)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.log())
	}
	defer cs.Close()

	pl, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pr := range pl.Prompts {
		names = append(names, pr.Name)
	}
	if !slices.Equal(names, []string{"one.help", "two.help"}) {
		t.Errorf("prompts %q, want one.help and two.help", names)
	}
	for _, who := range []string{"one", "two"} {
		res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: who + ".help"})
		if err != nil || res.Description != "help of "+who {
			t.Errorf("%s.help: %+v %v", who, res, err)
		}
	}
	rl, err := cs.ListResources(ctx, nil)
	if err != nil || len(rl.Resources) != 1 || rl.Resources[0].URI != "test://shared/doc" {
		t.Errorf("resources %+v %v, want test://shared/doc once", rl, err)
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://shared/doc"})
	if err == nil || !strings.Contains(err.Error(), "one and two") {
		t.Errorf("read of the shared URI: %v, want a refusal naming one and two", err)
	}
}
