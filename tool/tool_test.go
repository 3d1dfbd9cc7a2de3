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
