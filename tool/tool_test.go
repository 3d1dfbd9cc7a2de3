package tool

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestDefinitionHash(t *testing.T) {
	base := DefinitionHash("t", "d", json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`), Safety{})
	// The canonical form: member order and spacing do not count.
	if h := DefinitionHash("t", "d", json.RawMessage(`{ "properties": {"a": {"type": "string"}}, "type": "object" }`), Safety{}); h != base {
		t.Errorf("reordered schema: %s, want %s", h, base)
	}
	for name, h := range map[string]string{
		"name":        DefinitionHash("u", "d", json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`), Safety{}),
		"description": DefinitionHash("t", "e", json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`), Safety{}),
		"schema":      DefinitionHash("t", "d", json.RawMessage(`{"type":"object"}`), Safety{}),
		"read_only":   DefinitionHash("t", "d", json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`), Safety{ReadOnly: true}),
		"approval":    DefinitionHash("t", "d", json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`), Safety{RequiresApproval: true}),
	} {
		if h == base {
			t.Errorf("a change of %s leaves the hash as it was", name)
		}
	}
	// Bytes that are not JSON are hashed as they are, not refused.
	if a, b := DefinitionHash("t", "", json.RawMessage(`{`), Safety{}), DefinitionHash("t", "", json.RawMessage(`[`), Safety{}); a == "" || a == b {
		t.Errorf("non-JSON schemas: %q and %q", a, b)
	}
}

func TestSchemaErrorUnwraps(t *testing.T) {
	cause := errors.New("outside the subset")
	err := error(&SchemaError{Tool: "x", Err: cause})
	if !errors.Is(err, cause) || err.Error() != "tool x: outside the subset" {
		t.Errorf("%v", err)
	}
}

func TestHashOfDescriptor(t *testing.T) {
	schema := json.RawMessage(`{"type":"object"}`)
	base := Tool{Name: "up.t", Description: "d", InputSchema: schema, Safety: Safety{ReadOnly: true}}
	old := DefinitionHash(base.Name, base.Description, schema, base.Safety)
	if HashOf(base) != old {
		t.Errorf("a tool without a descriptor: %s, want DefinitionHash's %s", HashOf(base), old)
	}
	// A descriptor that says no more than the fields keeps the old hash:
	// pins recorded before descriptors counted still hold.
	same := base
	same.Descriptor = json.RawMessage(`{"name":"t","description":"d","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`)
	if HashOf(same) != old {
		t.Errorf("a descriptor with nothing more: %s, want %s", HashOf(same), old)
	}
	seen := map[string]string{"nothing more": old}
	for name, d := range map[string]string{
		"outputSchema":    `{"name":"t","outputSchema":{"type":"object"}}`,
		"outputSchema2":   `{"name":"t","outputSchema":{"type":"object","required":["x"]}}`,
		"destructiveHint": `{"name":"t","annotations":{"readOnlyHint":true,"destructiveHint":true}}`,
		"openWorldHint":   `{"name":"t","annotations":{"openWorldHint":false}}`,
		"title":           `{"name":"t","title":"T"}`,
		"icons":           `{"name":"t","icons":[{"src":"https://x/i.png"}]}`,
		"execution":       `{"name":"t","execution":{"taskSupport":"optional"}}`,
		"_meta":           `{"name":"t","_meta":{"k":1}}`,
		"not an object":   `[1]`,
	} {
		tt := base
		tt.Descriptor = json.RawMessage(d)
		h := HashOf(tt)
		for other, oh := range seen {
			if h == oh {
				t.Errorf("%s and %s hash alike", name, other)
			}
		}
		seen[name] = h
	}
	// Member order does not count.
	a, b := base, base
	a.Descriptor = json.RawMessage(`{"title":"T","outputSchema":{"type":"object"}}`)
	b.Descriptor = json.RawMessage(`{"outputSchema":{"type":"object"},"title":"T"}`)
	if HashOf(a) != HashOf(b) {
		t.Error("member order changes the hash")
	}
}

func TestServed(t *testing.T) {
	tt := Tool{Name: "up.echo", Descriptor: json.RawMessage(`{"title":"Echo","name":"echo","outputSchema":{"type":"object","properties":{"n":{"type":"number","minimum":1.50}}},"x-new":[1,2]}`)}
	got, ok := Served(tt)
	want := `{"title":"Echo","name":"up.echo","outputSchema":{"type":"object","properties":{"n":{"type":"number","minimum":1.50}}},"x-new":[1,2]}`
	if !ok || string(got) != want {
		t.Errorf("Served = %s, %v\nwant %s", got, ok, want)
	}
	if _, ok := Served(Tool{Name: "own"}); ok {
		t.Error("a tool without a descriptor is served from a descriptor")
	}
	if _, ok := Served(Tool{Name: "x", Descriptor: json.RawMessage(`[1]`)}); ok {
		t.Error("a descriptor that is not an object is served")
	}
	got, ok = Served(Tool{Name: "x", Descriptor: json.RawMessage(`{"a":1}`)})
	if !ok || string(got) != `{"a":1,"name":"x"}` {
		t.Errorf("a descriptor without a name: %s", got)
	}
}

// A tool's own output schema (the built-ins) counts as a descriptor
// declaring it would: a changed output schema is a changed definition, and
// moving it between the field and a descriptor changes nothing.
func TestHashOfOutputSchema(t *testing.T) {
	schema := json.RawMessage(`{"type":"object"}`)
	base := Tool{Name: "read", Description: "d", InputSchema: schema, Safety: Safety{ReadOnly: true}}
	withOut := base
	withOut.OutputSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
	if HashOf(withOut) == HashOf(base) {
		t.Error("an output schema does not change the hash")
	}
	other := withOut
	other.OutputSchema = json.RawMessage(`{"type":"object","properties":{"n":{"type":"string"}}}`)
	if HashOf(other) == HashOf(withOut) {
		t.Error("a changed output schema keeps the hash")
	}
	spaced := withOut
	spaced.OutputSchema = json.RawMessage(`{ "properties": {"n": {"type": "integer"}}, "type": "object" }`)
	if HashOf(spaced) != HashOf(withOut) {
		t.Error("the output schema's layout changes the hash")
	}
	viaDescriptor := base
	viaDescriptor.Descriptor = json.RawMessage(`{"name":"read","description":"d","inputSchema":{"type":"object"},` +
		`"outputSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}`)
	if HashOf(viaDescriptor) != HashOf(withOut) {
		t.Error("the same output schema in a descriptor hashes otherwise")
	}
	// A descriptor wins: the field is ignored beside one.
	both := viaDescriptor
	both.OutputSchema = other.OutputSchema
	if HashOf(both) != HashOf(viaDescriptor) {
		t.Error("OutputSchema counts beside a Descriptor")
	}
}

func TestOutputSchemaOf(t *testing.T) {
	for _, c := range []struct {
		t    Tool
		want string
	}{
		{Tool{}, ""},
		{Tool{OutputSchema: json.RawMessage(`{"type":"object"}`)}, `{"type":"object"}`},
		{Tool{Descriptor: json.RawMessage(`{"name":"x","outputSchema":{"type":"object","title":"T"}}`)}, `{"type":"object","title":"T"}`},
		{Tool{Descriptor: json.RawMessage(`{"name":"x"}`), OutputSchema: json.RawMessage(`{"type":"object"}`)}, ""},
		{Tool{Descriptor: json.RawMessage(`{"name":"x","outputSchema":null}`)}, ""},
		{Tool{Descriptor: json.RawMessage(`[1]`)}, ""},
	} {
		if got := OutputSchemaOf(c.t); string(got) != c.want {
			t.Errorf("OutputSchemaOf(%s / %s) = %s, want %s", c.t.Descriptor, c.t.OutputSchema, got, c.want)
		}
	}
}
