package server_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/memstore"
)

// everythingContent connects server-everything (and, when twice is set, a
// second copy, whose resources collide) and returns its content.
func everythingContent(t *testing.T, twice bool) (*upstream.Content, error) {
	t.Helper()
	everything(t, nil) // skips when node or the package is absent
	bin, _ := filepath.Abs(filepath.Join("..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-everything"))
	g := gateway.New(&gateway.Options{Store: memstore.New()})
	var ups []*upstream.Upstream
	names := []string{"one"}
	if twice {
		names = append(names, "two")
	}
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		u, err := upstream.Connect(ctx, upstream.Server{Name: name, Command: []string{bin}, Validator: upstream.ValidatorDraft2020}, &upstream.Options{Registry: g})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		ups = append(ups, u)
	}
	return upstream.NewContent(context.Background(), ups)
}

// TestUpstreamResourcesAndPrompts: an upstream's resources and prompts are
// listed, read and got through Backplane, only as far as the policy grants
// them (default deny), and every read is audited.
func TestUpstreamResourcesAndPrompts(t *testing.T) {
	content, err := everythingContent(t, false)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Resources: []string{"demo://resource/static/document/architecture.md"}, Prompts: []string{"one.simple-prompt"}}})
	if err != nil {
		t.Fatal(err)
	}
	audit := &lockedBuffer{}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Logger: slog.New(slog.NewJSONHandler(audit, nil))})
	serve := func(caller string) *mcp.ClientSession {
		return connect(t, server.New(g, &server.Options{StdioCaller: caller, Content: content, ContentPolicy: rules}), nil)
	}
	ctx := context.Background()
	alice := serve("alice")
	res, err := alice.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Resources) != 1 || res.Resources[0].URI != "demo://resource/static/document/architecture.md" {
		t.Fatalf("alice's resources: %+v", res.Resources)
	}
	read, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/static/document/architecture.md"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "testdata", "mcp-peers", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Contents) != 1 || read.Contents[0].Text != string(want) {
		t.Errorf("read: %+v", read.Contents)
	}
	if !auditHas(audit.String(), `"caller":"alice"`, "architecture.md", `"outcome":"ok"`) {
		t.Errorf("the read is not audited:\n%s", audit)
	}
	// Another listed resource, not granted: as unknown, and audited.
	_, err = alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/static/document/features.md"})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != -32002 {
		t.Errorf("a resource not granted: %v", err)
	}
	if !auditHas(audit.String(), "features.md", `"outcome":"deny"`) {
		t.Errorf("the refusal is not audited:\n%s", audit)
	}
	prompts, err := alice.ListPrompts(ctx, nil)
	// Named after the server's prefix, like its tools (issue 22, finding 23).
	if err != nil || len(prompts.Prompts) != 1 || prompts.Prompts[0].Name != "one.simple-prompt" {
		t.Fatalf("alice's prompts: %+v %v", prompts, err)
	}
	got, err := alice.GetPrompt(ctx, &mcp.GetPromptParams{Name: "one.simple-prompt"})
	if err != nil || len(got.Messages) == 0 {
		t.Errorf("get prompt: %+v %v", got, err)
	}
	if _, err := alice.GetPrompt(ctx, &mcp.GetPromptParams{Name: "one.args-prompt", Arguments: map[string]string{"city": "x"}}); err == nil {
		t.Error("a prompt not granted was got")
	}

	// bob has no rule: nothing (default deny).
	bob := serve("bob")
	if res, err := bob.ListResources(ctx, nil); err != nil || len(res.Resources) != 0 {
		t.Errorf("bob's resources: %+v %v", res, err)
	}
	if _, err := bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/static/document/architecture.md"}); err == nil {
		t.Error("bob read a resource")
	}
}

// TestUpstreamResourceCollisionRefusedWhenRead: two copies of a server
// listing the same resource URIs and prompt names start (issue 22, finding
// 23: the start was refused); each prompt carries its server's prefix, and
// a shared URI is refused when read, naming both servers.
func TestUpstreamResourceCollisionRefusedWhenRead(t *testing.T) {
	content, err := everythingContent(t, true)
	if err != nil {
		t.Fatalf("NewContent of two copies: %v", err)
	}
	ctx := context.Background()
	const uri = "demo://resource/static/document/architecture.md"
	_, err = content.ReadResource(ctx, uri, nil)
	if !errors.Is(err, upstream.ErrAmbiguousContent) || !strings.Contains(err.Error(), "one and two") {
		t.Errorf("read of a URI both list: %v, want ErrAmbiguousContent naming one and two", err)
	}
	for _, name := range []string{"one.simple-prompt", "two.simple-prompt"} {
		if res, err := content.GetPrompt(ctx, name, nil, nil); err != nil || len(res.Messages) == 0 {
			t.Errorf("%s: %+v %v", name, res, err)
		}
	}
}
