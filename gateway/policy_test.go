package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

const shSchema = `{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`

// A call is decided by the policy in force when it is authorized: a reload
// while it runs does not stop it; the next call sees the new policy. The
// policy sees the validated arguments, and a command that does not parse
// is refused as validation before it is authorized.
func TestPolicyInForceWhenAuthorized(t *testing.T) {
	allow, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"bash(git status*)"}}})
	if err != nil {
		t.Fatal(err)
	}
	live := policy.NewLive(allow)
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: live})
	running, release := make(chan struct{}), make(chan struct{})
	err = g.Register(context.Background(), tool.Tool{
		Name: "bash", InputSchema: json.RawMessage(shSchema),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			close(running)
			<-release
			return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	call := func(cmd string) error {
		args, _ := json.Marshal(map[string]string{"command": cmd})
		_, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "bash", Arguments: args})
		return err
	}
	if err := call("git status && touch x"); !errors.Is(err, tool.ClassForbidden) {
		t.Fatalf("a compound command: %v", err)
	}
	var ge *gateway.Error
	if err := call("echo $("); !errors.As(err, &ge) || ge.Class != tool.ClassValidation {
		t.Fatalf("an unparsable command: %v", err)
	}
	if tools := g.ToolsFor("alice"); len(tools) != 1 {
		t.Fatalf("ToolsFor lists what some arguments allow: %v", tools)
	}

	done := make(chan error, 1)
	go func() { done <- call("git status") }()
	<-running
	live.Store(policy.DenyAll{})
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the call authorized before the reload: %v", err)
	}
	// The new policy names bash nowhere: for alice it is now no tool at all.
	if err := call("git status"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the reload: %v", err)
	}
	if tools := g.ToolsFor("alice"); len(tools) != 0 {
		t.Fatalf("after the reload ToolsFor lists %v", tools)
	}
}

// resolvingBackend is a backend whose path argument resolves through a
// fixed table of links (tool.PathResolver).
type resolvingBackend struct {
	links map[string]string
	got   chan *tool.Call
}

func (b *resolvingBackend) ResolvePath(args json.RawMessage) (*tool.ResolvedPath, error) {
	var a struct{ Path string }
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	if strings.HasSuffix(a.Path, "loop") {
		return nil, errors.New("a loop of links")
	}
	real := a.Path
	if r, ok := b.links[a.Path]; ok {
		real = r
	}
	return &tool.ResolvedPath{Field: "path", Real: real, ID: "id-of-" + real}, nil
}

func (b *resolvingBackend) Invoke(ctx context.Context, c *tool.Call) (*tool.Result, error) {
	b.got <- c
	return &tool.Result{Content: json.RawMessage(`{}`)}, nil
}

// The gateway decides a path on the real path its backend resolves as well
// as on the text (issue 22, finding 6), hands the resolution and the deny
// check to the backend, and, when the path cannot be resolved, decides on
// the text and tells the backend why.
func TestPathsAreDecidedOnTheirRealPath(t *testing.T) {
	rules, err := policy.Compile([]policy.Rule{{Caller: "alice", Allow: []string{"read(src/**)"}, Deny: []string{"read(**/.env)"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	b := &resolvingBackend{links: map[string]string{"src/envlink": ".env", "src/ok": "src/real.txt"}, got: make(chan *tool.Call, 4)}
	if err := g.Register(context.Background(), tool.Tool{Name: "read", Backend: b, Safety: tool.Safety{ReadOnly: true},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}); err != nil {
		t.Fatal(err)
	}
	call := func(p string) error {
		_, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "read", Arguments: json.RawMessage(`{"path":"` + p + `"}`)})
		return err
	}
	if err := call("src/envlink"); !errors.Is(err, tool.ClassForbidden) {
		t.Errorf("src/envlink (a link to .env): %v, want forbidden", err)
	}
	if err := call("src/ok"); err != nil {
		t.Fatalf("src/ok: %v", err)
	}
	c := <-b.got
	if c.Path == nil || c.Path.Real != "src/real.txt" || c.Path.ID != "id-of-src/real.txt" || c.PathDenied == nil {
		t.Fatalf("the backend got %+v", c.Path)
	}
	if !c.PathDenied("src/x/.env") || c.PathDenied("src/x/main.go") || c.PathDenied("docs/readme") {
		t.Error("PathDenied: want true for a denied path only (not for one merely not allowed)")
	}
	// Unresolvable: decided on the text, and the backend is told why (it
	// must refuse).
	if err := call("src/loop"); err != nil {
		t.Fatalf("src/loop: %v", err)
	}
	if c := <-b.got; c.Path == nil || c.Path.Err == nil || c.Path.Real != "" {
		t.Errorf("src/loop: the backend got %+v, want the resolution's error", c.Path)
	}
}
