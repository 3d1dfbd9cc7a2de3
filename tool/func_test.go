package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type greetIn struct {
	Name  string   `json:"name" jsonschema:"who to greet"`
	Times int      `json:"times,omitempty"`
	Tags  []string `json:"tags,omitempty"`
	Loud  *bool    `json:"loud,omitempty"`
}

// gatewayOf is a gateway with t (made with err) registered, which the
// caller "c" may call.
func gatewayOf(tb testing.TB, t tool.Tool, err error) *gateway.Gateway {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	rules, _ := policy.NewRules([]policy.Rule{{Caller: "c", Allow: []string{t.Name}}})
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	if err := g.Register(context.Background(), t); err != nil {
		tb.Fatal(err)
	}
	return g
}

func invoke(t *testing.T, tl tool.Tool, args string) (*tool.Result, error) {
	t.Helper()
	if err := tl.Backend.(tool.Checker).Check(json.RawMessage(args)); err != nil {
		return nil, err
	}
	return tl.Backend.Invoke(context.Background(), &tool.Call{Tool: tl.Name, Arguments: json.RawMessage(args)})
}

func TestFuncInfersTheSchemaWithinTheSubset(t *testing.T) {
	tl, err := tool.Func("greet", "Greets.", func(ctx context.Context, in greetIn) (string, error) { return "", nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The slice and the pointer lose their null: the subset has none.
	want := `{"type":"object","properties":{"name":{"type":"string","description":"who to greet"},"times":{"type":"integer"},` +
		`"tags":{"type":"array","items":{"type":"string"}},"loud":{"type":"boolean"}},"required":["name"],"additionalProperties":false}`
	if string(tl.InputSchema) != want {
		t.Fatalf("schema\n got %s\nwant %s", tl.InputSchema, want)
	}
	if tl.Descriptor != nil {
		t.Fatalf("a string result has no output schema, so no descriptor: %s", tl.Descriptor)
	}
}

func TestFuncRefusesTypesOutsideTheSubset(t *testing.T) {
	type bounded struct {
		N int32 `json:"n"` // inferred with maximum
	}
	type withMap struct {
		M map[string]int `json:"m"` // additionalProperties as a schema
	}
	for name, make := range map[string]func(*tool.FuncOptions) error{
		"int32": func(o *tool.FuncOptions) error {
			_, err := tool.Func("t", "", func(context.Context, bounded) (string, error) { return "", nil }, o)
			return err
		},
		"map field": func(o *tool.FuncOptions) error {
			_, err := tool.Func("t", "", func(context.Context, withMap) (string, error) { return "", nil }, o)
			return err
		},
		"not a struct": func(o *tool.FuncOptions) error {
			_, err := tool.Func("t", "", func(context.Context, map[string]any) (string, error) { return "", nil }, o)
			return err
		},
	} {
		if err := make(nil); !errors.Is(err, tool.ErrFuncSchema) {
			t.Errorf("%s: %v, want ErrFuncSchema", name, err)
		}
		if err := make(&tool.FuncOptions{InputSchema: json.RawMessage(`{"type":"object"}`)}); err != nil {
			t.Errorf("%s with the schema given: %v", name, err)
		}
	}
}

func TestFuncStringResultIsTextWithoutQuotes(t *testing.T) {
	tl, _ := tool.Func("greet", "", func(ctx context.Context, in greetIn) (string, error) {
		return "Hello, <" + in.Name + ">!", nil
	}, nil)
	res, err := invoke(t, tl, `{"name":"Ada"}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"content":[{"type":"text","text":"Hello, <Ada>!"}]}`; string(res.Content) != want || res.IsError {
		t.Fatalf("got %s (isError %v), want %s", res.Content, res.IsError, want)
	}
}

type sum struct {
	Total int   `json:"total"`
	Terms []int `json:"terms"`
}

func TestFuncStructuredResult(t *testing.T) {
	tl, err := tool.Func("add", "Adds.", func(ctx context.Context, in struct {
		A int `json:"a"`
		B int `json:"b"`
	}) (*sum, error) {
		if in.A < 0 {
			return nil, nil // the zero sum
		}
		return &sum{Total: in.A + in.B, Terms: []int{in.A, in.B}}, nil
	}, &tool.FuncOptions{Safety: tool.Safety{ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := invoke(t, tl, `{"a":1,"b":2}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content":[{"type":"text","text":"{\"total\":3,\"terms\":[1,2]}"}],"structuredContent":{"total":3,"terms":[1,2]}}`
	if string(res.Content) != want {
		t.Fatalf("got  %s\nwant %s", res.Content, want)
	}
	res, _ = invoke(t, tl, `{"a":-1,"b":2}`)
	if !strings.Contains(string(res.Content), `"structuredContent":{"total":0,"terms":null}`) {
		t.Fatalf("a nil *sum is the zero sum: %s", res.Content)
	}
	var d map[string]json.RawMessage
	if err := json.Unmarshal(tl.Descriptor, &d); err != nil {
		t.Fatal(err)
	}
	// The output schema is jsonschema.For's, unchanged (terms may be null).
	if got, want := string(d["outputSchema"]), `{"type":"object","properties":{"total":{"type":"integer"},"terms":{"type":["null","array"],"items":{"type":"integer"}}},"required":["total","terms"],"additionalProperties":false}`; got != want {
		t.Fatalf("output schema\n got %s\nwant %s", got, want)
	}
	if string(d["annotations"]) != `{"readOnlyHint":true}` || string(d["inputSchema"]) != string(tl.InputSchema) {
		t.Fatalf("descriptor %s", tl.Descriptor)
	}
}

func TestFuncNilMapIsAnEmptyObject(t *testing.T) {
	tl, _ := tool.Func("m", "", func(context.Context, struct{}) (map[string]int, error) { return nil, nil }, nil)
	res, err := invoke(t, tl, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"content":[{"type":"text","text":"{}"}],"structuredContent":{}}`; string(res.Content) != want {
		t.Fatalf("got %s", res.Content)
	}
}

func TestFuncOtherResultsAreJSONText(t *testing.T) {
	tl, _ := tool.Func("n", "", func(context.Context, struct{}) ([]int, error) { return []int{1, 2}, nil }, nil)
	res, _ := invoke(t, tl, `{}`)
	if want := `{"content":[{"type":"text","text":"[1,2]"}]}`; string(res.Content) != want || tl.Descriptor != nil {
		t.Fatalf("got %s, descriptor %s", res.Content, tl.Descriptor)
	}
	if _, err := tool.Func("n", "", func(context.Context, struct{}) ([]int, error) { return nil, nil },
		&tool.FuncOptions{OutputSchema: json.RawMessage(`{"type":"object"}`)}); err == nil {
		t.Fatal("an output schema for a non-object result was accepted")
	}
}

func TestFuncDecodesMemberNamesExactly(t *testing.T) {
	var got string
	tl, _ := tool.Func("echo", "", func(ctx context.Context, in greetIn) (string, error) {
		got = in.Name
		return in.Name, nil
	}, &tool.FuncOptions{InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
	// The schema allows other members and validated "name": encoding/json
	// would read the last of NAME and name, case folded, into Name.
	if _, err := invoke(t, tl, `{"name":"a","NAME":"b"}`); err != nil {
		t.Fatal(err)
	}
	if got != "a" {
		t.Fatalf("Name = %q, want the member the schema validated", got)
	}
	if _, err := invoke(t, tl, `{"name":"a","name":"b"}`); err == nil {
		t.Fatal("a repeated member was decoded")
	}
}

func TestFuncErrors(t *testing.T) {
	boom := errors.New("no such person")
	var ret error
	tl, _ := tool.Func("greet", "", func(ctx context.Context, in greetIn) (string, error) { return "", ret }, nil)

	ret = boom
	res, err := invoke(t, tl, `{"name":"x"}`)
	if err != nil || !res.IsError || string(res.Content) != `{"content":[{"type":"text","text":"no such person"}],"isError":true}` {
		t.Fatalf("a tool's error: %v %+v", err, res)
	}
	ret = fmt.Errorf("the database is down: %w", tool.ErrNotStarted)
	if _, err := invoke(t, tl, `{"name":"x"}`); !errors.Is(err, tool.ErrNotStarted) {
		t.Fatalf("not started: %v", err)
	}
	p, _ := tool.Func("p", "", func(ctx context.Context, in greetIn) (string, error) { panic("bug") }, nil)
	if _, err := invoke(t, p, `{"name":"x"}`); !errors.Is(err, tool.ErrFuncPanic) || !strings.Contains(err.Error(), "bug") {
		t.Fatalf("a panic: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ret = boom
	if _, err := tl.Backend.Invoke(ctx, &tool.Call{Arguments: json.RawMessage(`{"name":"x"}`)}); !errors.Is(err, boom) {
		t.Fatalf("once ctx is done the error is the gateway's to read: %v", err)
	}
}

// Through the gateway: a value the schema accepts and In cannot hold is a
// validation error, and the function never runs.
func TestFuncThroughTheGateway(t *testing.T) {
	ran := 0
	tl, err := tool.Func("count", "", func(ctx context.Context, in struct {
		N int `json:"n"`
	}) (string, error) {
		ran++
		return strings.Repeat("x", in.N), nil
	}, nil)
	g := gatewayOf(t, tl, err)
	res, err := g.Call(context.Background(), gateway.CallRequest{Caller: "c", Tool: "count", Arguments: json.RawMessage(`{"n":3}`)})
	if err != nil || string(res.Result) != `{"content":[{"type":"text","text":"xxx"}]}` {
		t.Fatalf("%v %+v", err, res)
	}
	for _, n := range []string{"1.0", "1.5e1"} {
		_, err = g.Call(context.Background(), gateway.CallRequest{Caller: "c", Tool: "count", Arguments: json.RawMessage(`{"n":` + n + `}`)})
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Class != tool.ClassValidation || ge.Step != "validate" {
			t.Fatalf("%s is an integer to the schema (D12) and not to an int: %v", n, err)
		}
	}
	if ran != 1 {
		t.Fatalf("ran %d times, want 1", ran)
	}
}

// Served over MCP: the output schema is in tools/list, the structured
// result reaches the client as structuredContent and the string result as
// text.
func TestFuncServed(t *testing.T) {
	ctx := context.Background()
	add, err := tool.Func("add", "Adds.", func(ctx context.Context, in struct {
		A int `json:"a"`
		B int `json:"b"`
	}) (sum, error) {
		return sum{Total: in.A + in.B, Terms: []int{in.A, in.B}}, nil
	}, nil)
	g := gatewayOf(t, add, err)
	ct, st := mcp.NewInMemoryTransports()
	if _, err := server.New(g, &server.Options{StdioCaller: "c"}).Connect(ctx, st); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 {
		t.Fatalf("%v %+v", err, list)
	}
	if out, _ := json.Marshal(list.Tools[0].OutputSchema); !strings.Contains(string(out), `"total":{"type":"integer"}`) {
		t.Fatalf("output schema %s", out)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}})
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	if sc, _ := json.Marshal(res.StructuredContent); string(sc) != `{"terms":[1,2],"total":3}` {
		t.Fatalf("structured content %s", sc)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != `{"total":3,"terms":[1,2]}` {
		t.Fatalf("text %s", text)
	}
}
