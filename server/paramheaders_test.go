package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/tool"
)

// TestModernParamHeaders: issue 24. A 2026-07-28 tools/call of a tool
// whose schema marks properties with x-mcp-header must carry each value
// in its Mcp-Param header too, equal once decoded; any mismatch is HTTP
// 400 with -32020 and the tool does not run. A tool the caller cannot see
// answers as unknown, whatever its headers.
func TestModernParamHeaders(t *testing.T) {
	f := newFixture(t)
	var ran int
	err := f.g.Register(context.Background(), tool.Tool{Name: "routed", InputSchema: json.RawMessage(`{"type":"object","properties":{
		"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},
		"o":{"type":"object","properties":{"id":{"type":"string","x-mcp-header":"Id"}}},"q":{"type":"string"}}}`),
		Backend: tool.BackendFunc(func(context.Context, *tool.Call) (*tool.Result, error) {
			ran++
			return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}}))
	callWith := func(token string, args map[string]any, hdr map[string]string) rpc {
		return post(t, hs.URL, token, "tools/call", map[string]any{"name": "routed", "arguments": args, "_meta": modernMeta(`{}`)}, hdr)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		hdr  map[string]string
		ok   bool
	}{
		{"all match", map[string]any{"region": "us-west1", "n": 42, "o": map[string]any{"id": "x1"}, "q": "free"},
			map[string]string{"Mcp-Param-Region": "us-west1", "Mcp-Param-N": "42", "Mcp-Param-Id": "x1"}, true},
		{"header names without case, integer as a number", map[string]any{"n": 42}, map[string]string{"mcp-param-n": "42.0"}, true},
		{"Base64 form", map[string]any{"region": "Hello, 世界"}, map[string]string{"Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?="}, true},
		{"absent needs none", map[string]any{"q": "free"}, nil, true},
		{"missing", map[string]any{"region": "us-west1"}, nil, false},
		{"different", map[string]any{"region": "us-west1"}, map[string]string{"Mcp-Param-Region": "eu-west1"}, false},
		{"nested different", map[string]any{"o": map[string]any{"id": "x1"}}, map[string]string{"Mcp-Param-Id": "x2"}, false},
		{"sent for an absent parameter", map[string]any{}, map[string]string{"Mcp-Param-Region": "us-west1"}, false},
		{"integer different", map[string]any{"n": 42}, map[string]string{"Mcp-Param-N": "43"}, false},
		{"bad Base64", map[string]any{"region": "x"}, map[string]string{"Mcp-Param-Region": "=?base64?!!?="}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ran
			r := callWith("tok-alice", tc.args, tc.hdr)
			if tc.ok {
				if r.status != 200 || r.Error != nil || ran != before+1 {
					t.Errorf("HTTP %d %+v (ran %d times)", r.status, r.Error, ran-before)
				}
				return
			}
			if r.status != 400 || r.Error == nil || r.Error.Code != -32020 || ran != before {
				t.Errorf("HTTP %d %+v (ran %d times), want 400 with -32020 and no run", r.status, r.Error, ran-before)
			}
		})
	}
	// bob may not see the tool: the mismatch does not tell him it exists.
	r := callWith("tok-bob", map[string]any{"region": "us-west1"}, map[string]string{"Mcp-Param-Region": "eu-west1"})
	if r.Error == nil || r.Error.Code != -32602 {
		t.Errorf("a hidden tool: HTTP %d %+v, want it answered as unknown", r.status, r.Error)
	}
}
