package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// The tests of this file run the Go test server (testdata/mcptestserver)
// over stdio: a real process, spoken to through the SDK.

// TestCatalogRegisteredUnchanged compares every registered tool with what
// the server sends on the wire, read by hand: same names (prefixed), same
// descriptions, the same input schema bytes, even where decoding them
// would change them (1.0, a 20-digit integer, an escape).
func TestCatalogRegisteredUnchanged(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	u := e.connect(t, srv, nil)

	wire, _ := startRawPeer(t, []string{testServer}).listAll(t)
	if len(wire) < 5 {
		t.Fatalf("the wire lists %d tools", len(wire))
	}
	var names []string
	for _, w := range wire {
		names = append(names, "go."+w.Name)
		tool, _, ok := e.g.Tool("go." + w.Name)
		if !ok {
			t.Errorf("go.%s is not registered", w.Name)
			continue
		}
		if string(tool.InputSchema) != string(w.InputSchema) {
			t.Errorf("go.%s: registered schema\n%s\nthe wire's\n%s", w.Name, tool.InputSchema, w.InputSchema)
		}
		if tool.Description != w.Description {
			t.Errorf("go.%s: description %q, the wire's %q", w.Name, tool.Description, w.Description)
		}
		if !tool.Pinned {
			t.Errorf("go.%s is not pinned", w.Name)
		}
	}
	got := u.Tools()
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("registered %v, the wire lists %v", got, names)
	}
	// The schema that decoding would have changed, byte for byte.
	exact, _, _ := e.g.Tool("go.exact")
	want := `{"type":"object","x-big":12345678901234567890,"properties":{"n":{"type":"integer","minimum":1.0,"description":"caf\u00e9"}},"additionalProperties":false}`
	if string(exact.InputSchema) != want {
		t.Errorf("go.exact schema\n%s\nwant\n%s", exact.InputSchema, want)
	}
}

// TestSafetyFromAnnotations: readOnlyHint true spares the approval; no
// annotations (or readOnlyHint false) requires one.
func TestSafetyFromAnnotations(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	e.connect(t, srv, nil)
	for name, want := range map[string]tool.Safety{
		"go.greet": {ReadOnly: true, Idempotent: true},
		"go.env":   {ReadOnly: true},
		"go.fail":  {RequiresApproval: true},
		"go.slow":  {RequiresApproval: true},
	} {
		tool, _, ok := e.g.Tool(name)
		if !ok {
			t.Fatalf("%s not registered", name)
		}
		if tool.Safety != want {
			t.Errorf("%s: safety %+v, want %+v", name, tool.Safety, want)
		}
	}
	// A call of a tool without readOnlyHint asks the approver.
	res := e.mustCall(t, "go.fail", `{}`)
	if !res.IsError {
		t.Errorf("go.fail: %s, want a tool error", res.Result)
	}
	if got := e.approver.tools(); !slices.Equal(got, []string{"go.fail"}) {
		t.Errorf("approvals asked for %v, want [go.fail]", got)
	}
	e.mustCall(t, "go.greet", `{"name":"x"}`)
	if got := e.approver.tools(); len(got) != 1 {
		t.Errorf("a read-only tool asked for an approval: %v", got)
	}
}

// TestCallResults checks what a call returns and what each failure proves.
func TestCallResults(t *testing.T) {
	e := newEnv(t)
	srv, logFile := testServerSpec(t, "go")
	u := e.connect(t, srv, nil)

	// A result as the server sent it: structuredContent keeps 1.0, which
	// the SDK's decoding into float64 would have turned into 1.
	res := e.mustCall(t, "go.greet", `{"name":"ann"}`)
	want := `{"content":[{"type":"text","text":"hello, ann"}],"structuredContent":{"greeting":"hello, ann","exact":1.0},"isError":false}`
	if string(res.Result) != want || res.IsError {
		t.Errorf("greet: %s (is_error %v)\nwant %s", res.Result, res.IsError, want)
	}
	// The arguments reached the server as validated.
	if l := serverLog(t, logFile); !slices.Contains(l, `call greet {"name":"ann"}`) {
		t.Errorf("server log %q", l)
	}

	// A tool-level error is a result.
	res = e.mustCall(t, "go.fail", `{}`)
	if !res.IsError || !strings.Contains(string(res.Result), "it failed") || !strings.HasSuffix(string(res.Result), `"isError":true}`) {
		t.Errorf("fail: %s (is_error %v)", res.Result, res.IsError)
	}

	ctx := context.Background()
	invoke := func(name string) error {
		b := &toolBackend{u: u, name: name}
		_, err := b.Invoke(ctx, &tool.Call{CallID: "c", Tool: "go." + name, Arguments: json.RawMessage(`{}`)})
		return err
	}
	// -32602 proves nothing ran: not started.
	if err := invoke("refuse"); !errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("refuse: %v, want ErrNotStarted", err)
	}
	// So does an unknown tool (the SDK server answers -32602).
	if err := invoke("no_such_tool"); !errors.Is(err, tool.ErrNotStarted) || !strings.Contains(err.Error(), "no_such_tool") {
		t.Errorf("unknown tool: %v, want ErrNotStarted naming it", err)
	}
	// -32603 proves nothing: a plain error, the outcome unknown.
	if err := invoke("boom"); err == nil || errors.Is(err, tool.ErrNotStarted) || errors.Is(err, tool.ErrMalformedResult) {
		t.Errorf("boom: %v, want a plain error", err)
	}

	// Through the gateway, the journal says the same.
	_, ge := e.call(t, "go.refuse", `{}`)
	if ge == nil || ge.Class != tool.ClassExecutionFailure || ge.Details["status"] != string(store.StatusFailed) {
		t.Errorf("go.refuse: %+v, want execution_failure, failed", ge)
	}
	_, ge = e.call(t, "go.boom", `{}`)
	if ge == nil || ge.Class != tool.ClassUnknownOutcome || ge.Details["status"] != string(store.StatusUncertain) {
		t.Errorf("go.boom: %+v, want unknown_outcome, uncertain", ge)
	}
}

// TestEnvironmentAllowlist: the program gets PATH, HOME and the allowed
// names, nothing else.
func TestEnvironmentAllowlist(t *testing.T) {
	t.Setenv("BACKPLANE_TEST_SECRET", "do-not-pass")
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	e.connect(t, srv, nil)
	res := e.mustCall(t, "go.env", `{}`)
	var out struct {
		StructuredContent struct{ Names []string } `json:"structuredContent"`
	}
	if err := json.Unmarshal(res.Result, &out); err != nil {
		t.Fatal(err)
	}
	for _, n := range out.StructuredContent.Names {
		if !slices.Contains(append([]string{"PATH", "HOME"}, srv.Env...), n) {
			t.Errorf("the server got %s, which is not allowed", n)
		}
	}
	if !slices.Contains(out.StructuredContent.Names, "PATH") || !slices.Contains(out.StructuredContent.Names, "MCPTEST_LOG") {
		t.Errorf("the server's environment %v lacks PATH or MCPTEST_LOG", out.StructuredContent.Names)
	}
}

// TestPaging: a catalog served over several pages is registered whole.
func TestPaging(t *testing.T) {
	t.Setenv("MCPTEST_PAGE_SIZE", "3")
	t.Setenv("MCPTEST_FILLERS", "10")
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	u := e.connect(t, srv, nil)
	wire, pages := startRawPeer(t, []string{testServer}).listAll(t)
	if pages < 4 {
		t.Fatalf("the server answered in %d pages; the test needs several", pages)
	}
	if got := len(u.Tools()); got != len(wire) {
		t.Errorf("%d tools registered, the server lists %d over %d pages", got, len(wire), pages)
	}
	for i := range 10 {
		if _, _, ok := e.g.Tool("go.filler_0" + string(rune('0'+i))); !ok {
			t.Errorf("filler %d not registered", i)
		}
	}
}

// TestListChanged: a tool the server adds at run time is registered, one it
// removes is unregistered, both on notifications/tools/list_changed. The
// added tool is held until an operator accepts it (finding 11 of issue
// 22: its own readOnlyHint spared it the approval); once accepted, it is
// not held again when it comes back.
func TestListChanged(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	e.connect(t, srv, nil)
	if _, _, ok := e.g.Tool("go.extra"); ok {
		t.Fatal("go.extra registered before it exists")
	}
	e.mustCall(t, "go.add_extra", `{}`)
	eventually(t, 5*time.Second, "go.extra registered", func() bool { _, _, ok := e.g.Tool("go.extra"); return ok })
	if _, ge := e.call(t, "go.extra", `{}`); ge == nil || ge.Class != tool.ClassForbidden || !strings.Contains(ge.Message, "tools accept go.extra") {
		t.Fatalf("go.extra, added at run time: %v, want forbidden until accepted", ge)
	}
	if !strings.Contains(e.logs.String(), "upstream tool added while running: held") {
		t.Errorf("the hold is not logged:\n%s", e.logs)
	}
	if _, err := e.g.AcceptDefinition(context.Background(), "go.extra", "ops", ""); err != nil {
		t.Fatal(err)
	}
	if res := e.mustCall(t, "go.extra", `{}`); !strings.Contains(string(res.Result), "extra") {
		t.Errorf("go.extra: %s", res.Result)
	}
	e.mustCall(t, "go.remove_extra", `{}`)
	eventually(t, 5*time.Second, "go.extra unregistered", func() bool { _, _, ok := e.g.Tool("go.extra"); return !ok })
	if _, ge := e.call(t, "go.extra", `{}`); ge == nil || ge.Class != tool.ClassNotFound {
		t.Errorf("go.extra after removal: %v, want not_found", ge)
	}
	// Back with the definition accepted before: callable at once.
	e.mustCall(t, "go.add_extra", `{}`)
	eventually(t, 5*time.Second, "go.extra registered again", func() bool { _, _, ok := e.g.Tool("go.extra"); return ok })
	e.mustCall(t, "go.extra", `{}`)
}

// TestAcceptAddedTools: with AcceptAddedTools (accept_added_tools: true),
// a tool the server adds at run time is accepted at first sight.
func TestAcceptAddedTools(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	srv.AcceptAddedTools = true
	e.connect(t, srv, nil)
	e.mustCall(t, "go.add_extra", `{}`)
	eventually(t, 5*time.Second, "go.extra registered", func() bool { _, _, ok := e.g.Tool("go.extra"); return ok })
	if res := e.mustCall(t, "go.extra", `{}`); !strings.Contains(string(res.Result), "extra") {
		t.Errorf("go.extra: %s", res.Result)
	}
}

// TestCollisionsRefusedAtStart: a NAME.TOOL already registered (here by a
// first server of the same name) fails the second Connect, which leaves
// nothing registered and nothing running.
func TestCollisionsRefusedAtStart(t *testing.T) {
	e := newEnv(t)
	srv, logFile := testServerSpec(t, "go")
	first := e.connect(t, srv, nil)
	before := len(e.g.Tools())
	_, err := e.tryConnect(srv, nil)
	if err == nil || !strings.Contains(err.Error(), "collides") {
		t.Fatalf("second Connect: %v, want a collision", err)
	}
	if got := len(e.g.Tools()); got != before {
		t.Errorf("%d tools after the refused Connect, %d before", got, before)
	}
	if starts := countPrefix(serverLog(t, logFile), "start"); starts != 2 {
		t.Errorf("%d starts, want 2", starts)
	}
	// The first server's tools still work.
	e.mustCall(t, "go.greet", `{"name":"a"}`)
	first.Close()
	if got := len(e.g.Tools()); got != 0 {
		t.Errorf("%d tools left after Close", got)
	}
}

// TestValidatorChoice: the same schema with a remote $ref under each
// validator. The subset refuses $ref; draft2020-12 cannot fetch it and
// fails closed. Either way the tool is registered unchanged and its calls
// are refused with unsupported_capability before the server.
func TestValidatorChoice(t *testing.T) {
	for _, v := range []string{ValidatorSubset, ValidatorDraft2020} {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t)
			srv, logFile := testServerSpec(t, "go")
			srv.Validator = v
			e.connect(t, srv, nil)
			tl, _, ok := e.g.Tool("go.remote_ref")
			if !ok || !strings.Contains(string(tl.InputSchema), "https://example.com/x.json") {
				t.Fatalf("go.remote_ref: %v %s", ok, tl.InputSchema)
			}
			_, ge := e.call(t, "go.remote_ref", `{"x":1}`)
			if ge == nil || ge.Class != tool.ClassUnsupported || ge.Keyword != "$ref" {
				t.Errorf("go.remote_ref: %v (keyword %q), want unsupported_capability naming $ref", ge, ge.Keyword)
			}
			if n := countPrefix(serverLog(t, logFile), "call remote_ref"); n != 0 {
				t.Errorf("the server got %d calls", n)
			}
			// The same server's other tools are unaffected.
			if _, ge := e.call(t, "go.greet", `{"name":1}`); ge == nil || ge.Class != tool.ClassValidation {
				t.Errorf("greet with a number: %v, want validation", ge)
			}
			e.mustCall(t, "go.greet", `{"name":"x"}`)
			if strings.Contains(e.logs.String(), `"tool":"go.remote_ref"`) != true {
				t.Errorf("the refused schema was not logged")
			}
		})
	}
}

// TestBadNamesRefused: finding 3 of issue 22. Tools and prompts named
// outside [A-Za-z0-9_.-]{1,128}, and resources whose name holds a control,
// are not registered or listed, each with a log line naming the server;
// a resource named with spaces is kept (names are display names there).
func TestBadNamesRefused(t *testing.T) {
	e := newEnv(t)
	srv, _ := testServerSpec(t, "go")
	srv.Env = append(srv.Env, "MCPTEST_BAD_NAMES")
	t.Setenv("MCPTEST_BAD_NAMES", "1")
	u := e.connect(t, srv, nil)
	for _, tl := range e.g.Tools() {
		if tool.CheckName(tl.Name) != nil {
			t.Errorf("registered %q", tl.Name)
		}
	}
	if _, _, ok := e.g.Tool("go.greet"); !ok {
		t.Error("the server's well-named tools are gone")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prompts, err := u.Prompts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(prompts) != 0 {
		t.Errorf("prompts %v, want none", prompts)
	}
	res, err := u.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Name != "Good Resource 1" {
		t.Errorf("resources %+v, want Good Resource 1 alone", res)
	}
	logs := e.logs.String()
	for _, want := range []string{`"tool":"go.evil\\x1b[2K\\x0dgreet"`, `"tool":"go.two\\x0alines"`, `"prompt":"bad\\x1b[4Aprompt"`, `"resource":"bad\\x1b]0;owned\\x07res"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no log line with %s:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, `refused: its name`); n < 5 {
		t.Errorf("%d refusals logged, want 5 (3 tools, 1 prompt, 1 resource):\n%s", n, logs)
	}
}
