package server

import (
	"encoding/json"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/tool"
)

// An error result Backplane writes for a tool that declares an output
// schema carries its object in _meta["backplane/error"], not in
// structuredContent (which the TypeScript SDK 1.x client validates against
// the output schema even when isError is set); a success keeps its
// structuredContent, an upstream's own error result passes as it came, and
// a tool without an output schema keeps the error in structuredContent.
func TestErrorResultsOfToolsWithOutputSchemas(t *testing.T) {
	refusal := &gateway.Error{Class: tool.ClassForbidden, Message: "no", Step: "authorize", Details: map[string]any{}}
	for _, c := range []struct {
		name       string
		hasOutput  bool
		structured bool // structuredContent set
		meta       bool // _meta[MetaError] set
	}{
		{"refusal, output schema", true, false, true},
		{"refusal, no output schema", false, true, false},
	} {
		out := errorResult(refusal, c.hasOutput)
		if (out.StructuredContent != nil) != c.structured || (out.Meta[MetaError] != nil) != c.meta || !out.IsError {
			t.Errorf("%s: structuredContent %v, _meta %v", c.name, out.StructuredContent, out.Meta)
		}
		if c.meta {
			b, _ := json.Marshal(out.Meta[MetaError])
			var back gateway.Error
			if err := json.Unmarshal(b, &back); err != nil || back.Class != tool.ClassForbidden {
				t.Errorf("%s: _meta error %s: %v", c.name, b, err)
			}
		}
	}
	builtinErr := &gateway.CallResult{Result: json.RawMessage(`{"error":{"class":"not_found","message":"m","step":"invoke","details":{}}}`), IsError: true, CallID: "c1"}
	out := successResult(builtinErr, true)
	if out.StructuredContent != nil || out.Meta[MetaError] == nil || out.Meta[MetaCallID] != "c1" || !out.IsError {
		t.Errorf("a built-in's error result: structuredContent %v, _meta %v", out.StructuredContent, out.Meta)
	}
	if out = successResult(builtinErr, false); out.StructuredContent == nil || out.Meta[MetaError] != nil {
		t.Errorf("without an output schema: structuredContent %v, _meta %v", out.StructuredContent, out.Meta)
	}
	ok := &gateway.CallResult{Result: json.RawMessage(`{"path":"a","bytes":1,"created":true}`), CallID: "c2"}
	if out = successResult(ok, true); out.StructuredContent == nil || out.Meta[MetaError] != nil {
		t.Errorf("a success: structuredContent %v, _meta %v", out.StructuredContent, out.Meta)
	}
	upstream := &gateway.CallResult{Result: json.RawMessage(`{"content":[{"type":"text","text":"x"}],"structuredContent":{"e":1},"isError":true}`), IsError: true}
	if out = successResult(upstream, true); string(out.StructuredContent.(json.RawMessage)) != `{"e":1}` || out.Meta[MetaError] != nil {
		t.Errorf("an upstream's error result was changed: structuredContent %v, _meta %v", out.StructuredContent, out.Meta)
	}
}
