package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// TestRegistryErrorsTellRegisteredFromRefused: an upstream registers
// through tool.Registry alone, so the errors must say whether the tool was
// registered (a schema outside the subset) or not (a taken name).
func TestRegistryErrorsTellRegisteredFromRefused(t *testing.T) {
	var reg tool.Registry = gateway.New(&gateway.Options{Store: memstore.New()})
	b := tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
		return &tool.Result{Content: json.RawMessage(`{}`)}, nil
	})
	if err := reg.Register(context.Background(), tool.Tool{Name: "a", InputSchema: json.RawMessage(`{"type":"object"}`), Backend: b}); err != nil {
		t.Fatal(err)
	}
	err := reg.Register(context.Background(), tool.Tool{Name: "a", InputSchema: json.RawMessage(`{"type":"object"}`), Backend: b})
	var se *tool.SchemaError
	if !errors.Is(err, tool.ErrAlreadyRegistered) || errors.As(err, &se) {
		t.Errorf("second registration of a: %v, want ErrAlreadyRegistered and no SchemaError", err)
	}
	// $dynamicRef is outside the subset: registered, and reported.
	err = reg.Register(context.Background(), tool.Tool{Name: "odd", InputSchema: json.RawMessage(`{"$dynamicRef":"#x"}`), Backend: b})
	if !errors.As(err, &se) || se.Tool != "odd" || errors.Is(err, tool.ErrAlreadyRegistered) {
		t.Fatalf("odd schema: %v, want a *tool.SchemaError", err)
	}
	if !reg.Unregister("odd") {
		t.Error("the tool with the odd schema was not registered")
	}
	if reg.Unregister("odd") {
		t.Error("Unregister reported a tool that is gone")
	}
}

// namedAsker answers every question with its own name.
type namedAsker string

func (n namedAsker) Ask(ctx context.Context, q tool.Question) (tool.Answer, error) {
	return tool.Answer{Value: string(n)}, nil
}

// TestCallHandsItsAskerToTheBackend: the interaction channel travels in the
// call, from CallRequest to tool.Call, not in the context.
func TestCallHandsItsAskerToTheBackend(t *testing.T) {
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"ask"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	err = g.Register(context.Background(), tool.Tool{
		Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`), Safety: tool.Safety{ReadOnly: true},
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			if c.Asker == nil {
				return &tool.Result{Content: json.RawMessage(`"none"`)}, nil
			}
			a, err := c.Asker.Ask(ctx, tool.Question{Question: "who?"})
			if err != nil {
				return nil, err
			}
			out, _ := json.Marshal(a.Value)
			return &tool.Result{Content: out}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		asker tool.Asker
		want  string
	}{{namedAsker("first"), `"first"`}, {namedAsker("second"), `"second"`}, {nil, `"none"`}} {
		res, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "ask", Arguments: json.RawMessage(`{}`), Asker: tc.asker})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Result) != tc.want {
			t.Errorf("asker %v: the backend answered %s, want %s", tc.asker, res.Result, tc.want)
		}
	}
}
