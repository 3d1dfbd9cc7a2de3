package server

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
)

// resultsToPass are upstream answers successResult passes through: the
// first fastPaths textResult builds itself, the others the SDK decodes.
const fastPaths = 5

var resultsToPass = []string{
	`{"content":[{"type":"text","text":"Echo: hi"}]}`,
	`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b \"quoted\" é"}],"isError":true}`,
	`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1.50,"s":"t"}}`,
	`{"content":[],"isError":false}`,
	`{"content":[{"type":"text","text":""}],"isError":null}`,
	// Left to the SDK: another member in a block, another type, _meta.
	`{"content":[{"type":"text","text":"x","annotations":{"priority":0.5}}]}`,
	`{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}]}`,
	`{"content":[{"type":"text","text":"x"}],"_meta":{"k":"v"}}`,
	`{"content":[{"type":"text","text":"x","_meta":{"k":1}}]}`,
}

// The result sent for an upstream's answer is the one the SDK's own
// decoding of that answer gives, whichever way it was built.
func TestSuccessResultMatchesSDKDecoding(t *testing.T) {
	for i, in := range resultsToPass {
		var members map[string]json.RawMessage
		if err := json.Unmarshal([]byte(in), &members); err != nil {
			t.Fatal(err)
		}
		if fast := textResult(members) != nil; fast != (i < fastPaths) {
			t.Errorf("%s: built without the SDK: %v, want %v", in, fast, i < fastPaths)
		}
		var want mcp.CallToolResult
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%s: the SDK refuses it: %v", in, err)
		}
		if sc, ok := rawMember(t, in, "structuredContent"); ok {
			want.StructuredContent = sc
		}
		want.Meta = mergeMeta(want.Meta, "call_1")
		got := successResult(&gateway.CallResult{Result: json.RawMessage(in), CallID: "call_1"}, false)
		g, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := json.Marshal(&want)
		if err != nil {
			t.Fatal(err)
		}
		if string(g) != string(w) {
			t.Errorf("%s:\n got %s\nwant %s", in, g, w)
		}
	}
}

// An answer whose members are not those of a result is not passed through,
// on either path.
func TestPassThroughRefusesOtherObjects(t *testing.T) {
	for _, in := range []string{
		`{"content":"text"}`,
		`{"content":[{"type":"text","text":"x"}],"other":1}`,
		`{"text":"x"}`,
		`[{"type":"text","text":"x"}]`,
		`{"content":[{"type":"text","text":"x"}],"isError":"yes"}`,
	} {
		if r := passThrough(json.RawMessage(in)); r != nil {
			t.Errorf("%s passed through as %+v", in, r)
		}
	}
}

func rawMember(t *testing.T, in, key string) (json.RawMessage, bool) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	v, ok := m[key]
	return v, ok
}

func mergeMeta(m mcp.Meta, callID string) mcp.Meta {
	if m == nil {
		m = mcp.Meta{}
	}
	m[MetaCallID] = callID
	return m
}

// BenchmarkSuccessResult is the server's share of passing an upstream's
// text answer on (-benchmem shows the allocations).
func BenchmarkSuccessResult(b *testing.B) {
	r := &gateway.CallResult{Result: json.RawMessage(`{"content":[{"type":"text","text":"Echo: benchmark call"}]}`), CallID: "call_1"}
	for b.Loop() {
		successResult(r, false)
	}
}
