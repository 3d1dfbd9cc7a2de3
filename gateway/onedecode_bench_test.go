package gateway_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// BenchmarkCallArguments is one call through the pipeline on memstore (no
// disk), of an in-process tool with a schema of four properties, with
// arguments of about 200 bytes: what moves when the arguments' parsing,
// validation and digest change (issue 27, one parse per call).
//
//	go test ./gateway -run '^$' -bench CallArguments -benchmem
func BenchmarkCallArguments(b *testing.B) {
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"note"}}})
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: policy.NewLive(rules)})
	schema := `{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer","minimum":1},` +
		`"tags":{"type":"array","items":{"type":"string"}},"opts":{"type":"object","properties":{"dry":{"type":"boolean"}}}},"required":["text"]}`
	err = g.Register(context.Background(), tool.Tool{Name: "note", InputSchema: json.RawMessage(schema),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{"ok":true}`)}, nil
		})})
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"text":"write the quarterly summary for the team, in plain words","n":3,` +
		`"tags":["report","q3","draft","internal"],"opts":{"dry":false},"note":"caf\u00e9 \"quoted\""}`)
	req := gateway.CallRequest{Caller: "alice", Tool: "note", Arguments: args}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Call(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
