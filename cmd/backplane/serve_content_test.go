package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tsSteps is the capabilities and steps part of client.mjs's report.
type tsSteps struct {
	Capabilities struct {
		Completions json.RawMessage `json:"completions"`
		Resources   *struct {
			Subscribe bool `json:"subscribe"`
		} `json:"resources"`
	} `json:"capabilities"`
	Steps []struct {
		Op     string          `json:"op"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    float64 `json:"code"`
			Message string  `json:"message"`
		} `json:"error"`
	} `json:"steps"`
}

// An upstream with prefix "", through the built serve, to the TypeScript
// SDK client: its tools called by their bare names; its resource templates
// listed and read through, completions and subscriptions passed on, as the
// policy grants them.
func TestServeUpstreamContentToTypeScriptClient(t *testing.T) {
	_, script := tsClient(t)
	everything := filepath.Join(filepath.Dir(filepath.Dir(script)), "mcp-peers", "node_modules", ".bin", "mcp-server-everything")
	if _, err := os.Stat(everything); err != nil {
		t.Skip("server-everything is not installed (npm ci in testdata/mcp-peers): " + err.Error())
	}
	g := newGWDir(t, `policy:
  - caller: alice
    allow: [echo]
    resources: ["demo://resource/dynamic/text/*", "demo://resource/static/document/*"]
    prompts: [completable-prompt]
builtin: {enable: []}
servers:
  - name: everything
    command: [`+jsonString(everything)+`]
    validator: draft2020-12
    prefix: ""
serve:
  stdio_caller: alice
`)
	plan := `{"calls":[{"name":"echo","arguments":{"message":"bare 5521"}}],
"steps":[
  {"op":"templates"},
  {"op":"read","uri":"demo://resource/dynamic/text/64"},
  {"op":"read","uri":"demo://resource/dynamic/blob/64"},
  {"op":"complete","ref":{"type":"ref/prompt","name":"completable-prompt"},"argument":{"name":"department","value":"Mar"}},
  {"op":"subscribe","uri":"demo://resource/static/document/architecture.md"},
  {"op":"subscribe","uri":"demo://resource/dynamic/blob/1"},
  {"op":"unsubscribe","uri":"demo://resource/static/document/architecture.md"}
]}`
	rep, stderr := runTSClient(t, g, plan, "--stdio", "--", binary, "serve", "--stdio")
	if rep.ConnectError != nil {
		t.Fatalf("connect: %+v\n%s", rep.ConnectError, stderr)
	}
	if len(rep.Calls) != 1 || rep.Calls[0].Result == nil || rep.Calls[0].Result.IsError ||
		len(rep.Calls[0].Result.Content) != 1 || rep.Calls[0].Result.Content[0].Text != "Echo: bare 5521" {
		t.Errorf("echo by its bare name: %+v", rep.Calls)
	}
	steps := rep.tsSteps
	if steps.Capabilities.Completions == nil || steps.Capabilities.Resources == nil || !steps.Capabilities.Resources.Subscribe {
		t.Errorf("capabilities %+v: want completions and resources.subscribe", steps.Capabilities)
	}
	if len(steps.Steps) != 7 {
		t.Fatalf("%d steps reported: %+v", len(steps.Steps), steps.Steps)
	}
	var tl struct {
		ResourceTemplates []struct{ URITemplate string } `json:"resourceTemplates"`
	}
	json.Unmarshal(steps.Steps[0].Result, &tl)
	if len(tl.ResourceTemplates) != 1 || tl.ResourceTemplates[0].URITemplate != "demo://resource/dynamic/text/{resourceId}" {
		t.Errorf("templates: %s %+v", steps.Steps[0].Result, steps.Steps[0].Error)
	}
	var read struct {
		Contents []struct{ Text string } `json:"contents"`
	}
	json.Unmarshal(steps.Steps[1].Result, &read)
	if len(read.Contents) != 1 || !strings.HasPrefix(read.Contents[0].Text, "Resource 64: ") {
		t.Errorf("read through the template: %s %+v", steps.Steps[1].Result, steps.Steps[1].Error)
	}
	if e := steps.Steps[2].Error; e == nil || e.Code != -32002 {
		t.Errorf("read of a template's URI not granted: %+v", steps.Steps[2])
	}
	var comp struct {
		Completion struct{ Values []string } `json:"completion"`
	}
	json.Unmarshal(steps.Steps[3].Result, &comp)
	if !slices.Equal(comp.Completion.Values, []string{"Marketing"}) {
		t.Errorf("completion: %s %+v", steps.Steps[3].Result, steps.Steps[3].Error)
	}
	if steps.Steps[4].Error != nil {
		t.Errorf("subscribe: %+v", steps.Steps[4].Error)
	}
	if e := steps.Steps[5].Error; e == nil || e.Code != -32002 {
		t.Errorf("subscribe to a resource not granted: %+v", steps.Steps[5])
	}
	if steps.Steps[6].Error != nil {
		t.Errorf("unsubscribe: %+v", steps.Steps[6].Error)
	}
}
