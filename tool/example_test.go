package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

type wordsIn struct {
	Text string `json:"text" jsonschema:"the text to count"`
	Min  int    `json:"min,omitempty" jsonschema:"count only words this long"`
}

type wordsOut struct {
	Words int `json:"words"`
}

// A tool written as a Go function: its input schema inferred from the
// argument type, its arguments decoded into it, its result the function's.
func ExampleFunc() {
	words, err := tool.Func("words", "Counts the words of a text.", func(ctx context.Context, in wordsIn) (wordsOut, error) {
		n := 0
		for _, w := range strings.Fields(in.Text) {
			if len(w) >= in.Min {
				n++
			}
		}
		return wordsOut{Words: n}, nil
	}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(words.InputSchema))

	rules, _ := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"words"}}})
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	if err := g.Register(context.Background(), words); err != nil {
		panic(err)
	}
	res, err := g.Call(context.Background(), gateway.CallRequest{
		Caller: "alice", Tool: "words", Arguments: json.RawMessage(`{"text":"to be or not to be","min":3}`),
	})
	fmt.Println(string(res.Result), err)
	// Output:
	// {"type":"object","properties":{"text":{"type":"string","description":"the text to count"},"min":{"type":"integer","description":"count only words this long"}},"required":["text"],"additionalProperties":false}
	// {"content":[{"type":"text","text":"{\"words\":1}"}],"structuredContent":{"words":1}} <nil>
}
