package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
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
	err = g.Register(gateway.Tool{
		Name: "bash", InputSchema: json.RawMessage(shSchema),
		Backend: backend.Func(func(ctx context.Context, c *backend.Call) (*backend.Result, error) {
			close(running)
			<-release
			return &backend.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
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
	if err := call("git status && touch x"); !errors.Is(err, gateway.ErrForbidden) {
		t.Fatalf("a compound command: %v", err)
	}
	var ge *gateway.Error
	if err := call("echo $("); !errors.As(err, &ge) || ge.Class != gateway.ClassValidation {
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
	if err := call("git status"); !errors.Is(err, gateway.ErrNotFound) {
		t.Fatalf("after the reload: %v", err)
	}
	if tools := g.ToolsFor("alice"); len(tools) != 0 {
		t.Fatalf("after the reload ToolsFor lists %v", tools)
	}
}
