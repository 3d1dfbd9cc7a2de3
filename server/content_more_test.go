package server_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// everythingBare serves server-everything with prefix "" (its tools under
// their own names) and its content: alice (stdio) may call every tool,
// read the static documents and the dynamic text resources, and get
// completable-prompt; bob (HTTP, token tok-b) is granted nothing.
func everythingBare(t *testing.T) (*server.Server, *lockedBuffer) {
	t.Helper()
	everything(t, nil) // skips when node or the package is absent
	bin, err := filepath.Abs(filepath.Join("..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-everything"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"},
		Resources: []string{"demo://resource/static/document/*", "demo://resource/dynamic/text/*"},
		Prompts:   []string{"completable-prompt"}}})
	if err != nil {
		t.Fatal(err)
	}
	audit := &lockedBuffer{}
	log := slog.New(slog.NewJSONHandler(audit, nil))
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules, Logger: log,
		Approvals: gateway.ApprovalOptions{Approver: approveAll{}}, Timeout: 60 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bare := ""
	u, err := upstream.Connect(ctx, upstream.Server{Name: "everything", Prefix: &bare, Command: []string{bin},
		Validator: upstream.ValidatorDraft2020}, &upstream.Options{Registry: g, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	content, err := upstream.NewContent(ctx, []*upstream.Upstream{u})
	if err != nil {
		t.Fatal(err)
	}
	return server.New(g, &server.Options{StdioCaller: "alice", Tokens: map[string]string{"tok-b": "bob"},
		Content: content, ContentPolicy: rules, ApprovalWait: 30 * time.Second}), audit
}

// TestUpstreamToolByBareName: with prefix "", server-everything's echo is
// listed and called as echo.
func TestUpstreamToolByBareName(t *testing.T) {
	s, _ := everythingBare(t)
	alice := connect(t, s, nil)
	names := listNames(t, alice)
	if !names["echo"] || names["everything.echo"] {
		t.Fatalf("tools: %v, want echo and no everything.echo", names)
	}
	res := call(t, alice, "echo", map[string]any{"message": "bare 8841"})
	if res.IsError || !strings.Contains(text(res), "bare 8841") {
		t.Errorf("echo: %+v", res)
	}
}

// TestUpstreamTemplatesAndCompletions: resource templates are listed as
// the policy grants them, a URI is read through its template, and
// completions of a prompt or template come from server-everything; none
// for a caller not granted them.
func TestUpstreamTemplatesAndCompletions(t *testing.T) {
	s, audit := everythingBare(t)
	ctx := context.Background()
	alice := connect(t, s, nil)
	caps := alice.InitializeResult().Capabilities
	if caps.Completions == nil || caps.Resources == nil || !caps.Resources.Subscribe {
		t.Errorf("capabilities %+v: want completions and resources.subscribe, as the upstream declares them", caps)
	}
	tl, err := alice.ListResourceTemplates(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var templates []string
	for _, tm := range tl.ResourceTemplates {
		templates = append(templates, tm.URITemplate)
	}
	if !slices.Equal(templates, []string{"demo://resource/dynamic/text/{resourceId}"}) {
		t.Errorf("alice's templates %q, want the text one only", templates)
	}
	read, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/text/37"})
	if err != nil || len(read.Contents) != 1 || !strings.HasPrefix(read.Contents[0].Text, "Resource 37: ") {
		t.Fatalf("read through the template: %+v %v", read, err)
	}
	if !auditHas(audit.String(), `"caller":"alice"`, "dynamic/text/37", `"outcome":"ok"`) {
		t.Errorf("the read is not audited:\n%s", audit)
	}
	_, err = alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/dynamic/blob/37"})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != -32002 {
		t.Errorf("a template's URI not granted: %v", err)
	}

	comp, err := alice.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "completable-prompt"},
		Argument: mcp.CompleteParamsArgument{Name: "department", Value: "Sa"}})
	if err != nil || !slices.Equal(comp.Completion.Values, []string{"Sales"}) {
		t.Errorf("prompt completion: %+v %v", comp, err)
	}
	comp, err = alice.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "demo://resource/dynamic/text/{resourceId}"},
		Argument: mcp.CompleteParamsArgument{Name: "resourceId", Value: "52"}})
	if err != nil || !slices.Equal(comp.Completion.Values, []string{"52"}) {
		t.Errorf("template completion: %+v %v", comp, err)
	}
	if !auditHas(audit.String(), `"step":"complete"`, "completable-prompt", `"outcome":"ok"`) {
		t.Errorf("the completion is not audited:\n%s", audit)
	}
	// Not granted: as unknown.
	if _, err := alice.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "demo://resource/dynamic/blob/{resourceId}"},
		Argument: mcp.CompleteParamsArgument{Name: "resourceId", Value: "52"}}); !errors.As(err, &je) || je.Code != -32002 {
		t.Errorf("completion of a template not granted: %v", err)
	}

	bob, err := connectHTTP(t, httpServer(t, s), "tok-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tl, err := bob.ListResourceTemplates(ctx, nil); err != nil || len(tl.ResourceTemplates) != 0 {
		t.Errorf("bob's templates: %+v %v", tl, err)
	}
	if _, err := bob.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "completable-prompt"},
		Argument: mcp.CompleteParamsArgument{Name: "department", Value: "Sa"}}); err == nil {
		t.Error("bob got a completion of a prompt not granted")
	}
	if !auditHas(audit.String(), `"step":"complete"`, `"caller":"bob"`, `"outcome":"deny"`) {
		t.Errorf("bob's completion is not audited:\n%s", audit)
	}
}

// TestUpstreamSubscriptions: a session subscribed to a resource gets
// server-everything's notifications/resources/updated of it; another
// session of the same caller, not subscribed, gets none; a caller not
// granted the resource cannot subscribe. Subscribing is audited.
func TestUpstreamSubscriptions(t *testing.T) {
	s, audit := everythingBare(t)
	ctx := context.Background()
	const uri = "demo://resource/static/document/architecture.md"
	type got struct {
		mu   sync.Mutex
		uris []string
	}
	listen := func(g *got) *mcp.ClientOptions {
		return &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			g.mu.Lock()
			g.uris = append(g.uris, r.Params.URI)
			g.mu.Unlock()
		}}
	}
	var subscribed, other got
	alice := connect(t, s, listen(&subscribed))
	alice2 := connect(t, s, listen(&other))
	if err := alice.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if !auditHas(audit.String(), `"step":"subscribe"`, `"caller":"alice"`, "architecture.md", `"outcome":"ok"`) {
		t.Errorf("the subscription is not audited:\n%s", audit)
	}
	// server-everything sends an update of every subscribed URI at once,
	// then every 5 s, once this tool is called (by its bare name).
	if res := call(t, alice, "toggle-subscriber-updates", map[string]any{}); res.IsError {
		t.Fatalf("toggle-subscriber-updates: %+v", res)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		subscribed.mu.Lock()
		n := len(subscribed.uris)
		subscribed.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no notifications/resources/updated reached the subscribed session")
		}
		time.Sleep(20 * time.Millisecond)
	}
	subscribed.mu.Lock()
	if subscribed.uris[0] != uri {
		t.Errorf("updated %q, want %q", subscribed.uris, uri)
	}
	subscribed.mu.Unlock()
	// A round trip of the other session, then: it was sent nothing.
	if _, err := alice2.ListResources(ctx, nil); err != nil {
		t.Fatal(err)
	}
	other.mu.Lock()
	if len(other.uris) != 0 {
		t.Errorf("a session not subscribed got %q", other.uris)
	}
	other.mu.Unlock()
	if res := call(t, alice, "toggle-subscriber-updates", map[string]any{}); res.IsError { // stop them
		t.Errorf("toggle-subscriber-updates: %+v", res)
	}

	bob, err := connectHTTP(t, httpServer(t, s), "tok-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	var je *jsonrpc.Error
	if err := bob.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); !errors.As(err, &je) || je.Code != -32002 {
		t.Errorf("bob subscribed to a resource not granted: %v", err)
	}
	if !auditHas(audit.String(), `"step":"subscribe"`, `"caller":"bob"`, `"outcome":"deny"`) {
		t.Errorf("bob's subscription is not audited:\n%s", audit)
	}
	if err := alice.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Errorf("unsubscribe: %v", err)
	}
}
