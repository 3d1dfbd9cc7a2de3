package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// issueExample is the servers and serve sections of the MCP issue,
// verbatim.
const issueExample = `servers:
  - name: everything
    command: [npx, -y, "@modelcontextprotocol/server-everything"]
    validator: subset            # the default; or draft2020-12
  - name: remote
    url: http://127.0.0.1:9000/mcp
    headers: {Authorization: "Bearer upstream-secret"}
    validator: draft2020-12
serve:
  http: 127.0.0.1:8787           # streamable HTTP at /mcp, /metrics, /healthz
  tokens: {"local-dev-token": alice}   # bearer token -> caller
  stdio_caller: alice            # the caller for ` + "`backplane serve --stdio`" + `
`

func TestServersAcceptedAsWritten(t *testing.T) {
	// Beside the keys of the earlier example.
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(append(append(example, '\n'), issueExample...), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exampleLines := strings.Count(string(example), "\n") + 1
	want := []ServerConfig{
		{Name: "everything", Command: []string{"npx", "-y", "@modelcontextprotocol/server-everything"}, Validator: "subset", Bridge: DefaultBridge(), Line: exampleLines + 2},
		{Name: "remote", URL: "http://127.0.0.1:9000/mcp", Headers: map[string]string{"Authorization": "Bearer upstream-secret"}, Validator: "draft2020-12", Bridge: DefaultBridge(), Line: exampleLines + 5},
	}
	if !reflect.DeepEqual(c.Servers, want) {
		t.Errorf("Servers =\n%+v\nwant\n%+v", c.Servers, want)
	}
	if len(c.Tools) != 1 || c.Tools[0].Name != "note" {
		t.Errorf("the earlier keys were not kept: tools %+v", c.Tools)
	}
	// The validator defaults to subset.
	c, err = Parse([]byte("servers:\n  - name: a\n    command: [x]\n"), "backplane.yaml")
	if err != nil || c.Servers[0].Validator != "subset" {
		t.Errorf("default validator: %+v, %v", c.Servers, err)
	}
}

// TestServersBridge: bridge keys override the default one by one.
func TestServersBridge(t *testing.T) {
	c, err := Parse([]byte("servers:\n  - name: a\n    command: [x]\n    bridge: {sampling: true, roots: false}\n  - name: b\n    command: [x]\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Servers[0].Bridge, (Bridge{Sampling: true, Elicitation: true}); got != want {
		t.Errorf("bridge %+v, want %+v", got, want)
	}
	if got := c.Servers[1].Bridge; got != DefaultBridge() || got.Sampling || !got.Elicitation || !got.Roots {
		t.Errorf("default bridge %+v", got)
	}
}

func TestServersErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		line int
		msg  string
	}{
		{"not a list", "servers: {a: 1}\n", 1, "servers must be a list"},
		{"no name", "servers:\n  - command: [x]\n", 2, "a server needs a name"},
		{"dotted name", "servers:\n  - name: a.b\n    command: [x]\n", 2, `server name "a.b"`},
		{"empty name", "servers:\n  - name: \"\"\n    command: [x]\n", 2, `server name ""`},
		{"duplicate name", "servers:\n  - name: a\n    command: [x]\n  - name: a\n    url: http://h/mcp\n", 4, "server a is already defined at line 2"},
		{"neither", "servers:\n  - name: a\n    validator: subset\n", 2, "server a needs a command"},
		{"both", "servers:\n  - name: a\n    command: [x]\n    url: http://h/mcp\n", 4, "a command or a url, not both"},
		{"empty command", "servers:\n  - name: a\n    command: []\n", 3, "command must name a program"},
		{"command a string", "servers:\n  - name: a\n    command: npx server\n", 3, "command must be a list"},
		{"env with url", "servers:\n  - name: a\n    url: http://h/mcp\n    env: [X]\n", 4, "env applies to a command"},
		{"bad env", "servers:\n  - name: a\n    command: [x]\n    env: [A-B]\n", 4, `"A-B" is not an environment variable name`},
		{"headers with command", "servers:\n  - name: a\n    command: [x]\n    headers: {A: b}\n", 4, "headers apply to a url"},
		{"bad url", "servers:\n  - name: a\n    url: ftp://h/x\n", 3, "url must be an http:// or https:// URL"},
		{"url without host", "servers:\n  - name: a\n    url: \"http:///mcp\"\n", 3, "with a host"},
		{"bad header name", "servers:\n  - name: a\n    url: http://h/mcp\n    headers:\n      \"Bad Header\": x\n", 5, `"Bad Header" is not an HTTP header name`},
		{"header not a string", "servers:\n  - name: a\n    url: http://h/mcp\n    headers:\n      X-Token: 123456789\n", 5, "the value of X-Token must be a string"},
		{"header with a newline", "servers:\n  - name: a\n    url: http://h/mcp\n    headers:\n      X-Token: \"s3cr3t\\r\\nX: y\"\n", 5, "control character"},
		{"bad validator", "servers:\n  - name: a\n    command: [x]\n    validator: draft7\n", 4, `validator "draft7": subset or draft2020-12`},
		{"bridge not a mapping", "servers:\n  - name: a\n    command: [x]\n    bridge: yes\n", 4, "bridge must be a mapping"},
		{"bridge unknown", "servers:\n  - name: a\n    command: [x]\n    bridge: {tasks: true}\n", 4, `unknown key "tasks" in bridge`},
		{"bridge not a bool", "servers:\n  - name: a\n    command: [x]\n    bridge: {sampling: 1}\n", 4, "bridge.sampling must be true or false"},
		{"unknown key", "servers:\n  - name: a\n    command: [x]\n    dir: /tmp\n", 4, `unknown key "dir" in a server`},
		{"prefix with a space", "servers:\n  - name: a\n    command: [x]\n    prefix: \"a b\"\n", 4, `prefix "a b"`},
		{"prefix with a glob", "servers:\n  - name: a\n    command: [x]\n    prefix: \"a*\"\n", 4, `prefix "a*"`},
		{"prefix not a string", "servers:\n  - name: a\n    command: [x]\n    prefix: [a]\n", 4, "prefix must be a string"},
		{"main_arg without prefix", "servers:\n  - name: a\n    command: [x]\n    prefix: \"\"\n    main_arg: {name: path}\n", 5, "main_arg needs a prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "backplane.yaml")
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want a *config.Error", err, err)
			}
			if ce.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v, want line %d saying %q", err, tc.line, tc.msg)
			}
			// Header values are secrets.
			if strings.Contains(err.Error(), "123456789") || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the message quotes a header value: %v", err)
			}
		})
	}
}

// TestServersPrefix: prefix replaces NAME. before the tools' names; ""
// leaves them bare, and then any name may be one of the server's tools.
func TestServersPrefix(t *testing.T) {
	c, err := Parse([]byte(`servers:
  - name: a
    command: [x]
  - name: b
    command: [x]
    prefix: ""
  - name: c
    command: [x]
    prefix: c_
    main_arg: {name: path}
`), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"a.", "", "c_"} {
		if got := c.Servers[i].ToolPrefix(); got != want {
			t.Errorf("server %s: prefix %q, want %q", c.Servers[i].Name, got, want)
		}
	}
	if c.Servers[0].Prefix != nil {
		t.Errorf("server a: Prefix %q, want unset", *c.Servers[0].Prefix)
	}
	if _, ok := c.PolicyOptions().MainArgs["c_*"]; !ok {
		t.Errorf("main_arg of c is not under c_*: %v", c.PolicyOptions().MainArgs)
	}
	for _, name := range []string{"a.x", "c_x", "anything"} {
		if !c.KnownTool(name) {
			t.Errorf("KnownTool(%q) = false", name)
		}
	}
	// Without a server lacking a prefix, an unprefixed name is unknown.
	c, err = Parse([]byte("servers:\n  - name: a\n    command: [x]\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.KnownTool("x") || c.KnownTool("a.") || !c.KnownTool("a.x") {
		t.Errorf("KnownTool: x %v, a. %v, a.x %v", c.KnownTool("x"), c.KnownTool("a."), c.KnownTool("a.x"))
	}
}

// TestPolicyContentKeys: a rule's resources and prompts are read as
// patterns; a bad one names its line.
func TestPolicyContentKeys(t *testing.T) {
	c, err := Parse([]byte("policy:\n  - caller: alice\n    allow: [\"*\"]\n    resources: [\"demo://docs/*\"]\n    prompts: [simple]\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Policy[0]; len(r.Resources) != 1 || r.Resources[0] != "demo://docs/*" || len(r.Prompts) != 1 || r.Prompts[0] != "simple" {
		t.Errorf("rule %+v", r)
	}
	_, err = Parse([]byte("policy:\n  - caller: alice\n    resources: [\"[\"]\n"), "backplane.yaml")
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 3 || !strings.Contains(err.Error(), "bad pattern") {
		t.Errorf("bad resource pattern: %v", err)
	}
}
