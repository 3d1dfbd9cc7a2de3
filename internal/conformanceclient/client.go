// Package conformanceclient drives Backplane's upstream connector (package
// backend/upstream) as the client under test of the official MCP conformance
// suite's client scenarios (@modelcontextprotocol/conformance 0.2.0-alpha.12,
// pinned in testdata/conformance as conformance-next).
//
// The suite starts a test server per scenario and runs a command with the
// server's URL as its last argument, the scenario's name in
// MCP_CONFORMANCE_SCENARIO and, for some, the calls to make in
// MCP_CONFORMANCE_CONTEXT. [Run] is that command's work: it connects to the
// URL exactly as `backplane serve` connects to an upstream (upstream.Connect:
// server/discover, then tools/list), then makes the scenario's calls
// through the registered tools' backends, as the gateway would once a call
// is authorized. It checks nothing itself: the suite does.
//
// It promises what the scenarios need, nothing more: it is a test driver,
// run from this package's tests.
package conformanceclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/tool"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Scenarios are the client scenarios Run knows, in the suite's order.
var Scenarios = []string{
	"tools_call",
	"request-metadata",
	"sep-2322-client-request-state",
	"http-standard-headers",
	"http-custom-headers",
	"http-invalid-tool-headers",
	"json-schema-ref-no-deref",
	"json-schema-2020-12-preservation",
}

// ErrUnknownScenario is returned for a scenario Run does not know.
var ErrUnknownScenario = errors.New("conformanceclient: unknown scenario")

// Context is the suite's MCP_CONFORMANCE_CONTEXT: the calls to make.
type Context struct {
	ToolCalls []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"toolCalls"`
}

// connectTimeout bounds the connection, discovery and listing.
const connectTimeout = 20 * time.Second

// Run connects to the server at url and makes the calls of scenario. ctx
// (MCP_CONFORMANCE_CONTEXT's JSON, nil for none) gives the calls of the
// scenarios that name them. The first call that fails is the error, once
// every call was made (the suite judges what it received).
func Run(ctx context.Context, url, scenario string, raw []byte) error {
	if isAuth(scenario) {
		return runAuth(ctx, url, scenario, raw)
	}
	if !slices.Contains(Scenarios, scenario) {
		return fmt.Errorf("%w: %q", ErrUnknownScenario, scenario)
	}
	var sc Context
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &sc); err != nil {
			return fmt.Errorf("conformanceclient: MCP_CONFORMANCE_CONTEXT: %w", err)
		}
	}
	reg := &registry{tools: map[string]tool.Tool{}}
	bare := "" // the server's own tool names
	up, err := upstream.Connect(ctx, upstream.Server{
		Name: "suite", Prefix: &bare, URL: url,
		// The subset validator refuses the x-mcp-header keyword (it keeps
		// no annotation it does not check); draft 2020-12 keeps it.
		Validator: upstream.ValidatorDraft2020,
		Bridge:    &upstream.Bridge{Elicitation: true, Sampling: true, Roots: true},
	}, &upstream.Options{Registry: reg, ConnectTimeout: connectTimeout})
	if err != nil {
		return err
	}
	defer up.Close()
	d := &driver{reg: reg, client: answerer{}}
	switch {
	case len(sc.ToolCalls) > 0:
		for _, c := range sc.ToolCalls {
			d.call(ctx, c.Name, c.Arguments)
		}
	case scenario == "tools_call":
		for _, name := range reg.names() {
			d.call(ctx, name, json.RawMessage(`{"a":2,"b":3}`))
		}
	case scenario == "sep-2322-client-request-state":
		// The unrelated call between the first tool's rounds is where the
		// suite checks that no round's answers leak into another call.
		for _, name := range []string{"test_mrtr_echo_state", "test_mrtr_unrelated", "test_mrtr_no_state", "test_mrtr_no_result_type"} {
			d.call(ctx, name, json.RawMessage(`{}`))
		}
	case scenario == "http-standard-headers":
		for _, name := range reg.names() {
			d.call(ctx, name, json.RawMessage(`{}`))
		}
		d.content(ctx, up)
	case scenario == "http-invalid-tool-headers":
		for _, name := range reg.names() { // the offered ones only
			d.call(ctx, name, json.RawMessage(`{"region":"us-west1"}`))
		}
	case scenario == "json-schema-2020-12-preservation":
		focal, ok := reg.get("json_schema_2020_12_tool")
		if !ok {
			return errors.New("conformanceclient: the focal tool json_schema_2020_12_tool is not offered")
		}
		args, _ := json.Marshal(map[string]json.RawMessage{"schema": focal.InputSchema})
		d.call(ctx, "json_schema_echo", args)
	}
	// request-metadata, json-schema-ref-no-deref: connecting (discover,
	// list) is the whole scenario.
	return d.err
}

// driver makes calls and keeps the first failure.
type driver struct {
	reg    *registry
	client tool.Client
	n      int
	err    error
}

func (d *driver) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// call invokes the registered tool name with args, through its backend.
func (d *driver) call(ctx context.Context, name string, args json.RawMessage) {
	t, ok := d.reg.get(name)
	if !ok {
		d.fail(fmt.Errorf("conformanceclient: the tool %s is not offered", name))
		return
	}
	d.n++
	_, err := t.Backend.Invoke(ctx, &tool.Call{
		CallID: "conformance-" + strconv.Itoa(d.n), Tool: name, Caller: "conformance", Session: "conformance",
		Arguments: args, Client: d.client,
	})
	if err != nil {
		d.fail(fmt.Errorf("conformanceclient: %s: %w", name, err))
	}
}

// content lists and reads the resources and lists and gets the prompts.
func (d *driver) content(ctx context.Context, up *upstream.Upstream) {
	c, err := upstream.NewContent(ctx, []*upstream.Upstream{up})
	if err != nil {
		d.fail(err)
		return
	}
	res, err := c.ListResources(ctx)
	if err != nil {
		d.fail(err)
	}
	for _, r := range res {
		if _, err := c.ReadResource(ctx, r.URI, nil); err != nil {
			d.fail(err)
		}
	}
	prompts, err := c.ListPrompts(ctx)
	if err != nil {
		d.fail(err)
	}
	for _, p := range prompts {
		if _, err := c.GetPrompt(ctx, p.Name, nil, nil); err != nil {
			d.fail(err)
		}
	}
}

// answerer is the client behind every call: it accepts an elicitation
// with {"confirmed": true} (what the suite's request-state scenario asks
// for), answers roots with none and declines sampling.
type answerer struct{}

func (answerer) Progress(context.Context, tool.Progress) error { return nil }
func (answerer) Log(context.Context, tool.LogMessage) error    { return nil }
func (answerer) Request(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
	switch method {
	case tool.RequestElicitation:
		return json.RawMessage(`{"action":"accept","content":{"confirmed":true}}`), nil
	case tool.RequestRoots:
		return json.RawMessage(`{"roots":[]}`), nil
	}
	return nil, fmt.Errorf("%w: %s", tool.ErrNoChannel, method)
}

// registry keeps the tools the connector registers.
type registry struct {
	mu    sync.Mutex
	tools map[string]tool.Tool
}

func (r *registry) Register(_ context.Context, t tool.Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[t.Name]; ok {
		return tool.ErrAlreadyRegistered
	}
	r.tools[t.Name] = t
	return nil
}

func (r *registry) Unregister(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.tools[name]
	delete(r.tools, name)
	return ok
}

func (r *registry) get(name string) (tool.Tool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tools[name]
	return t, ok
}

// names are the registered tools' names, sorted.
func (r *registry) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.tools))
	for n := range r.tools {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
