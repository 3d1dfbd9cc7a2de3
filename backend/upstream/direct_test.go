package upstream

import (
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestAppendParamsAsMarshal: a direct call's params are the bytes
// encoding/json writes for them (names of maps sorted, strings escaped
// as it escapes them), whatever the _meta holds.
func TestAppendParamsAsMarshal(t *testing.T) {
	type params struct {
		Meta      map[string]any  `json:"_meta,omitempty"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	caps := map[string]any{"roots": map[string]any{}, "elicitation": map[string]any{"url": map[string]any{}, "form": map[string]any{}}}
	for _, tc := range []struct {
		meta map[string]any
		name string
	}{
		{nil, "echo"},
		{map[string]any{}, "echo"},
		{map[string]any{sdk.MetaKeyProtocolVersion: "2026-07-28", sdk.MetaKeyClientCapabilities: caps, "progressToken": "backplane-7"}, "echo"},
		{map[string]any{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=<b>&c\"d\\e\u00e9\n"}, "na\"me<&>"},
		{map[string]any{"n": 1.5, "b": true, "l": []any{"x", nil}, "m": sdk.Meta{"z": "y"}}, "ünï"},
	} {
		args := json.RawMessage(`{"message":"hi"}`)
		want, err := json.Marshal(params{Meta: tc.meta, Name: tc.name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendParams(nil, tc.meta, tc.name, args)
		if err != nil || string(got) != string(want) {
			t.Errorf("appendParams = %s, %v\nencoding/json  %s", got, err, want)
		}
	}
}
