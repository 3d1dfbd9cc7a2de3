package server_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/server"
)

// TestModernTypeScriptClient drives the server with the official
// TypeScript SDK v2 client (2.4.0) pinned to 2026-07-28: list, a call,
// and a self-approval put to it as input_required, which the SDK fulfils
// through its elicitation handler and retries.
func TestModernTypeScriptClient(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", "testdata"))
	script := filepath.Join(root, "mcp-client", "client2026.mjs")
	if _, err := os.Stat(filepath.Join(root, "mcp-peers", "node_modules", "@modelcontextprotocol", "client", "dist", "index.mjs")); err != nil {
		t.Skipf("the TypeScript SDK v2 client is not installed (npm ci in testdata/mcp-peers): %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	plan := filepath.Join(t.TempDir(), "plan.json")
	os.WriteFile(plan, []byte(`{"elicitation":{"approve":true},"calls":[
		{"name":"echo","arguments":{"text":"from ts"}},
		{"name":"danger","arguments":{"target":"ts-db"}}]}`), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, hs.URL+server.PathMCP, "tok-alice", plan)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s\n%s", err, out, stderr.String())
	}
	var rep struct {
		ProtocolVersion string   `json:"protocolVersion"`
		Tools           []string `json:"tools"`
		Calls           []struct {
			Name   string `json:"name"`
			Result *struct {
				IsError           bool           `json:"isError"`
				StructuredContent map[string]any `json:"structuredContent"`
			} `json:"result"`
			Error any `json:"error"`
		} `json:"calls"`
		Asked []string `json:"asked"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	if rep.ProtocolVersion != "2026-07-28" {
		t.Errorf("negotiated %q", rep.ProtocolVersion)
	}
	if !slices.Contains(rep.Tools, "echo") || !slices.IsSorted(rep.Tools) {
		t.Errorf("tools %v", rep.Tools)
	}
	if len(rep.Calls) != 2 || rep.Calls[0].Result == nil || rep.Calls[0].Result.IsError || rep.Calls[1].Result == nil || rep.Calls[1].Result.IsError {
		t.Fatalf("calls %s", out)
	}
	if f.dangers.Load() != 1 || len(rep.Asked) != 1 || !strings.Contains(rep.Asked[0], "ts-db") {
		t.Errorf("danger ran %d times; asked %q", f.dangers.Load(), rep.Asked)
	}
	if a := approvalsOf(t, f.st, "danger"); len(a) != 1 || a[0].Channel != "elicitation" || a[0].DecidedBy != "alice" {
		t.Errorf("approvals %+v", a)
	}
}
