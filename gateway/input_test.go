package gateway_test

// Bad input at the boundary: arguments that are not one JSON object, too
// large or too deep, and tools that cannot be registered.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

func TestBadArgumentsAreValidationErrors(t *testing.T) {
	cases := map[string]string{
		"array":            `[1,2]`,
		"string":           `"text"`,
		"number":           `42`,
		"null":             `null`,
		"empty":            ``,
		"truncated":        `{"text":"x"`,
		"trailing data":    `{"text":"x"} {}`,
		"duplicate member": `{"text":"x","text":"y"}`,
		"invalid UTF-8":    "{\"text\":\"\xff\"}",
	}
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		for name, args := range cases {
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, mk, config{})
				note := f.tool("note", nil)
				_, err := f.call("alice", "note", args)
				ge := gwErr(t, err, tool.ClassValidation)
				if ge.Step != "validate" || len(ge.Errors) == 0 {
					t.Errorf("%+v", ge)
				}
				if len(f.pol.Decisions()) != 0 || len(f.st.Methods()) != 0 || note.Count() != 0 {
					t.Error("a later step ran")
				}
			})
		}
	})
}

func TestOversizedArguments(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		f := newFixture(t, mk, config{Limits: inputschema.Limits{MaxArgumentBytes: 64}})
		note := f.tool("note", nil)
		fits := `{"text":"` + strings.Repeat("a", 40) + `"}`
		if _, err := f.call("alice", "note", fits); err != nil {
			t.Fatalf("%d bytes under a 64-byte limit: %v", len(fits), err)
		}
		big := `{"text":"` + strings.Repeat("a", 100) + `"}`
		_, err := f.call("alice", "note", big)
		ge := gwErr(t, err, tool.ClassValidation)
		if ge.Details["reason"] != "too_large" && (len(ge.Errors) == 0 || ge.Errors[0].Details["reason"] != "too_large") {
			t.Errorf("the error does not say too large: %+v %v", ge, ge.Errors)
		}
		if note.Count() != 1 || len(f.pol.Decisions()) != 1 || len(f.intents()) != 1 {
			t.Error("the oversized call went past validation")
		}
	})
}

// Limits raised above the defaults apply to the whole call, not only to the
// validator: arguments the validator accepts must not then be refused by the
// digest step that follows.
func TestRaisedLimitsAreHonoured(t *testing.T) {
	forEachStore(t, func(t *testing.T, mk func(t *testing.T) store.Store) {
		t.Run("depth", func(t *testing.T) {
			const depth = 150 // over the default 128, under the configured 200
			f := newFixture(t, mk, config{Limits: inputschema.Limits{MaxDepth: 200}})
			b := &recBackend{}
			if err := f.g.Register(context.Background(), tool.Tool{Name: "note", InputSchema: json.RawMessage(`{"type":"object"}`), Backend: b.Backend()}); err != nil {
				t.Fatal(err)
			}
			args := strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1)
			if _, err := f.call("alice", "note", args); err != nil {
				t.Errorf("arguments %d deep under MaxDepth 200: %v", depth, err)
			}
		})
		t.Run("size", func(t *testing.T) {
			// 5 MiB: over the default 4 MiB, under the configured 8 MiB.
			f := newFixture(t, mk, config{Limits: inputschema.Limits{MaxArgumentBytes: 8 << 20}})
			note := f.tool("note", nil)
			args := `{"text":"` + strings.Repeat("a", 5<<20) + `"}`
			if _, err := f.call("alice", "note", args); err != nil {
				t.Errorf("%d bytes under MaxArgumentBytes 8 MiB: %.200v", len(args), err)
			}
			if note.Count() != 1 {
				t.Errorf("backend invoked %d times", note.Count())
			}
		})
	})
}

func TestRegisterRefusals(t *testing.T) {
	ok := tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
		return &tool.Result{Content: json.RawMessage(`1`)}, nil
	})
	g := gateway.New(&gateway.Options{Store: memstore.New()})
	if err := g.Register(context.Background(), tool.Tool{Name: "", InputSchema: json.RawMessage(noteSchema), Backend: ok}); err == nil {
		t.Error("a tool without a name was registered")
	}
	if err := g.Register(context.Background(), tool.Tool{Name: "nobackend", InputSchema: json.RawMessage(noteSchema)}); err == nil {
		t.Error("a tool without a backend was registered")
	}
	if _, _, found := g.Tool("nobackend"); found {
		t.Error("the refused tool is listed")
	}
	if err := g.Register(context.Background(), tool.Tool{Name: "note", Description: "first", InputSchema: json.RawMessage(noteSchema), Backend: ok}); err != nil {
		t.Fatal(err)
	}
	_, hash1, _ := g.Tool("note")
	if err := g.Register(context.Background(), tool.Tool{Name: "note", Description: "second", InputSchema: json.RawMessage(`{"type":"object"}`), Backend: ok}); err == nil {
		t.Error("a duplicate name was registered")
	}
	tl, hash2, _ := g.Tool("note")
	if tl.Description != "first" || hash1 != hash2 {
		t.Errorf("the duplicate replaced the first tool: %q", tl.Description)
	}
	if n := len(g.Tools()); n != 1 {
		t.Errorf("%d tools listed, want 1", n)
	}
}

// The definition hash changes with anything the model sees of the tool and
// with its safety flags, and with nothing else (member order and spacing of
// the schema).
func TestDefinitionHash(t *testing.T) {
	base := tool.DefinitionHash("note", "d", json.RawMessage(`{"type":"object","required":["a"]}`), tool.Safety{})
	if same := tool.DefinitionHash("note", "d", json.RawMessage(` { "required" : ["a"], "type":"object" } `), tool.Safety{}); same != base {
		t.Error("reformatting the schema changed the hash")
	}
	for name, h := range map[string]string{
		"name":        tool.DefinitionHash("note2", "d", json.RawMessage(`{"type":"object","required":["a"]}`), tool.Safety{}),
		"description": tool.DefinitionHash("note", "e", json.RawMessage(`{"type":"object","required":["a"]}`), tool.Safety{}),
		"schema":      tool.DefinitionHash("note", "d", json.RawMessage(`{"type":"object","required":["b"]}`), tool.Safety{}),
		"read_only":   tool.DefinitionHash("note", "d", json.RawMessage(`{"type":"object","required":["a"]}`), tool.Safety{ReadOnly: true}),
		"requires_approval": tool.DefinitionHash("note", "d", json.RawMessage(`{"type":"object","required":["a"]}`),
			tool.Safety{RequiresApproval: true}),
	} {
		if h == base {
			t.Errorf("changing the %s left the hash unchanged", name)
		}
	}
}
