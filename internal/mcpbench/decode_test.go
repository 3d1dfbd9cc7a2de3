package mcpbench

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agentbackplane/backplane/internal/mcpstream"
)

// A tools/call answer as the echo upstream sends it (about 120 bytes).
var echoAnswer = []byte(`{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"Echo: benchmark call 42"}],"isError":false}}`)

// BenchmarkSDKDecodeMessage measures what the official SDK spends decoding
// one small JSON-RPC message (jsonrpc.DecodeMessage, which every SDK
// transport calls per message read), beside encoding/json decoding the same
// envelope (the floor) and mcpstream.DecodeMessage (what backplane's own
// stdio transport does instead). Run with -benchmem: B/op is the point (the SDK's
// decoder starts from a 32 KiB buffer whatever the message's size).
func BenchmarkSDKDecodeMessage(b *testing.B) {
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonrpc.DecodeMessage(echoAnswer); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mcpstream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := mcpstream.DecodeMessage(echoAnswer); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		var env struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params"`
			Result  json.RawMessage `json:"result"`
			Error   json.RawMessage `json:"error"`
		}
		for b.Loop() {
			env.Result = nil
			if err := json.Unmarshal(echoAnswer, &env); err != nil {
				b.Fatal(err)
			}
		}
	})
}
