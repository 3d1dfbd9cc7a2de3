package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// The program as a user runs it: built by the go command, started by an
// MCP client (the Go SDK's) over stdio, its tool listed and called, and
// the call found afterwards in the SQLite journal it kept.
func TestEmbedServesItsToolOverStdio(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, and the test builds the program with it:", err)
	}
	bin := filepath.Join(t.TempDir(), "embed")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	work := t.TempDir()
	cmd := exec.Command(bin)
	cmd.Dir = work
	// Generous: a loaded machine; nothing here waits on time otherwise.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "embed-test", Version: "v0"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 || list.Tools[0].Name != "greet" || list.Tools[0].Description != "Greets someone by name." {
		t.Fatalf("tools: %+v", list.Tools)
	}
	schema, _ := json.Marshal(list.Tools[0].InputSchema)
	want := `{"additionalProperties":false,"properties":{"name":{"description":"who to greet","type":"string"}},"required":["name"],"type":"object"}`
	if string(schema) != want {
		t.Fatalf("input schema\n got %s\nwant %s", schema, want)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Ada"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("result: %+v", res)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); !ok || text.Text != "Hello, Ada!" {
		t.Fatalf("content %#v, want the text Hello, Ada! (no JSON quotes)", res.Content[0])
	}
	// Refused by the schema, before anything is journaled (D19).
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": 7}})
	if err != nil {
		t.Fatal(err)
	}
	if sc, _ := res.StructuredContent.(map[string]any); !res.IsError || sc["class"] != "validation" {
		t.Fatalf("a number for name: %+v", res)
	}

	// Closing stdin ends the program (CommandTransport waits for it).
	if err := cs.Close(); err != nil {
		t.Fatalf("the program did not end cleanly: %v", err)
	}
	st, err := sqlite.Open(filepath.Join(work, "embed-state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	intents, err := st.ListIntents(ctx, store.IntentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 1 || intents[0].Caller != "local" || intents[0].Tool != "greet" ||
		intents[0].Status != store.StatusSucceeded || string(intents[0].Arguments) != `{"name":"Ada"}` {
		t.Fatalf("journal: %+v", intents)
	}
}
