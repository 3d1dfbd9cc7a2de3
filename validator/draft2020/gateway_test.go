package draft2020_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
	"github.com/agentbackplane/backplane/validator/draft2020"
)

var _ tool.Validator = (*draft2020.Validator)(nil)

// An MCP-style tool (it declares $schema, so the subset refuses it) behind
// the gateway with this boundary chosen explicitly: valid calls reach the
// backend, invalid ones are refused before it with every violation.
func TestThroughTheGateway(t *testing.T) {
	schema := json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
		"properties":{"path":{"type":"string","minLength":1},"mode":{"enum":["r","w"]}},
		"required":["path"],"additionalProperties":false}`)
	v, err := draft2020.Compile(schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	var reached atomic.Int32
	be := tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
		reached.Add(1)
		return &tool.Result{Content: c.Arguments}, nil
	})
	if err := g.Register(context.Background(), tool.Tool{Name: "full", InputSchema: schema, Backend: be, Validator: v}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	// Under the default boundary the descriptor is registered unchanged
	// and the refusal reported (D20).
	if err := g.Register(context.Background(), tool.Tool{Name: "subset", InputSchema: schema, Backend: be}); err == nil {
		t.Fatal("Register under the subset: no error reported")
	}
	call := func(tool, args string) (*gateway.CallResult, error) {
		return g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: tool, Arguments: json.RawMessage(args)})
	}

	res, err := call("full", `{"path":"a.txt","mode":"r"}`)
	if err != nil || string(res.Result) != `{"path":"a.txt","mode":"r"}` || reached.Load() != 1 {
		t.Fatalf("valid call: %v %v, backend reached %d times", res, err, reached.Load())
	}

	_, err = call("full", `{"path":"","mode":"x","extra":1}`)
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Class != tool.ClassValidation || len(ge.Errors) != 3 {
		t.Fatalf("invalid call: %v, want validation with 3 violations", err)
	}
	var kws []string
	for _, e := range ge.Errors {
		kws = append(kws, e.Keyword)
	}
	if want := []string{"additionalProperties", "enum", "minLength"}; !equal(kws, want) {
		t.Errorf("keywords %v, want %v", kws, want)
	}

	// The same descriptor under the default boundary: refused, naming
	// $schema, before the backend (D20).
	_, err = call("subset", `{"path":"a.txt"}`)
	if !errors.As(err, &ge) || ge.Class != tool.ClassUnsupported || ge.Keyword != "$schema" {
		t.Errorf("subset call: %v, want unsupported_capability naming $schema", err)
	}
	if reached.Load() != 1 {
		t.Errorf("backend reached %d times, want 1", reached.Load())
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
