package server

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// FuzzStdioFilter: whatever the input, the filter never panics, passes on
// only lines the SDK can decode, and answers the others with one JSON-RPC
// error object per line.
func FuzzStdioFilter(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n",
		"garbage\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n",
		"[]\n[1,2]\n5\n\"s\"\nnull\n",
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]` + "\n",
		"{\"id\":{\"a\":1}}\n\n\r\n   \n",
		"no newline at the end",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		fr := newStdioFilter(io.NopCloser(bytes.NewReader(in)), &out, nil)
		passed, err := io.ReadAll(fr)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(passed), "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			var msgs []json.RawMessage
			if line[0] == '[' {
				if err := json.Unmarshal([]byte(line), &msgs); err != nil {
					t.Fatalf("passed a bad batch %q", line)
				}
			} else {
				msgs = []json.RawMessage{json.RawMessage(line)}
			}
			for _, m := range msgs {
				if _, err := jsonrpc.DecodeMessage(m); err != nil {
					t.Fatalf("passed %q: %v", line, err)
				}
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if line == "" {
				continue
			}
			var a struct {
				Error struct{ Code int64 } `json:"error"`
			}
			if err := json.Unmarshal([]byte(line), &a); err != nil || (a.Error.Code != jsonrpc.CodeParseError && a.Error.Code != jsonrpc.CodeInvalidRequest) {
				t.Fatalf("answer %q", line)
			}
		}
	})
}
