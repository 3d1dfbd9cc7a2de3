package assemble

import (
	"context"
	"testing"

	"github.com/agentbackplane/backplane/tool"
)

// TestOpenRecordsSourceAndMainArg: every tool's source and main argument
// are recorded when it is registered (issue 23, item 2), so that the CLI,
// the console and a collision's message read them from the gateway
// instead of guessing from the configuration or the name.
func TestOpenRecordsSourceAndMainArg(t *testing.T) {
	src := `builtin:
  enable: [bash, read]
tools:
  - name: note
    command: [cat]
    input_schema: {type: object, properties: {text: {type: string}}}
    main_arg: text
  - name: plain
    command: [cat]
    input_schema: {type: object}
policy:
  - caller: alice
    allow: [read]
`
	rt, err := Open(context.Background(), writeConfig(t, src), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for _, want := range []struct{ name, source, mainArg string }{
		{"bash", tool.SourceBuiltin, "command"},
		{"read", tool.SourceBuiltin, "path"},
		{"note", tool.SourceTools, "text"},
		{"plain", tool.SourceTools, ""},
	} {
		got, _, ok := rt.Gateway.Tool(want.name)
		if !ok {
			t.Errorf("%s is not registered", want.name)
			continue
		}
		if got.Source != want.source || got.MainArg != want.mainArg {
			t.Errorf("%s: source %q, main argument %q; want %q, %q", want.name, got.Source, got.MainArg, want.source, want.mainArg)
		}
	}
	if srv, ok := tool.SourceServer(tool.ServerSource("fs")); !ok || srv != "fs" {
		t.Errorf("SourceServer(ServerSource(fs)) = %q, %v", srv, ok)
	}
	if _, ok := tool.SourceServer(tool.SourceTools); ok {
		t.Error("SourceServer(tools) says a server")
	}
}
