package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

func TestToolDescriptors(t *testing.T) {
	f := newFixture(t, &Options{Bash: BashOptions{MaxTimeout: 20 * time.Second, Timeout: 5 * time.Second}})
	want := map[string]tool.Safety{
		"read":              {ReadOnly: true, Idempotent: true},
		"ls":                {ReadOnly: true, Idempotent: true},
		"glob":              {ReadOnly: true, Idempotent: true},
		"grep":              {ReadOnly: true, Idempotent: true},
		"url_fetch":         {ReadOnly: true},
		"ask_user_question": {ReadOnly: true},
		"write":             {RequiresApproval: true},
		"edit":              {RequiresApproval: true},
		"bash":              {RequiresApproval: true},
	}
	tools := f.set.Tools()
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
		if tool.Safety != want[tool.Name] {
			t.Errorf("%s: safety %+v, want %+v", tool.Name, tool.Safety, want[tool.Name])
		}
		st, ok := schemas.Lookup(tool.Name)
		if !ok || st.Description != tool.Description || !bytes.Equal(st.InputSchema, tool.InputSchema) {
			t.Errorf("%s: descriptor differs from the schemas package", tool.Name)
		}
		if tool.Backend == nil {
			t.Errorf("%s: no backend", tool.Name)
		}
		if got, ok := f.set.Tool(tool.Name); !ok || got.Name != tool.Name {
			t.Errorf("Tool(%s) = %v, %v", tool.Name, got.Name, ok)
		}
	}
	if got := strings.Join(names, ","); got != "read,bash,grep,glob,write,url_fetch,edit,ls,ask_user_question" {
		t.Errorf("tools %s", got)
	}
	if _, ok := f.set.Tool("nope"); ok {
		t.Errorf("Tool(nope) found")
	}
	// The gateway's deadline for bash lies beyond its own longest timeout,
	// so that bash's timeout (a known outcome) fires first.
	bash, _ := f.set.Tool("bash")
	if bash.Timeout <= 20*time.Second {
		t.Errorf("bash's gateway timeout %v is not above its max_timeout", bash.Timeout)
	}
	fetch, _ := f.set.Tool("url_fetch")
	if fetch.Timeout <= DefaultURLFetchTimeout {
		t.Errorf("url_fetch's gateway timeout %v is not above its own", fetch.Timeout)
	}
	ask, _ := f.set.Tool("ask_user_question")
	if ask.Timeout <= MaxAskTimeout {
		t.Errorf("ask_user_question's gateway timeout %v is not above MaxAskTimeout", ask.Timeout)
	}
	// Tools returns a copy.
	tools[0].Name = "changed"
	if f.set.Tools()[0].Name != "read" {
		t.Errorf("Tools shares its slice")
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for name, o := range map[string]*Options{
		"nil":                nil,
		"no workspace":       {},
		"missing workspace":  {Workspace: filepath.Join(dir, "missing")},
		"file workspace":     {Workspace: file},
		"bad env name":       {Workspace: dir, Bash: BashOptions{Env: []string{"A=B"}}},
		"timeout over max":   {Workspace: dir, Bash: BashOptions{Timeout: time.Hour, MaxTimeout: time.Minute}},
		"negative timeout":   {Workspace: dir, Bash: BashOptions{Timeout: -1}},
		"allow without port": {Workspace: dir, URLFetch: URLFetchOptions{Allow: []string{"example.com"}}},
		"negative read cap":  {Workspace: dir, Read: ReadOptions{MaxBytes: -1}},
	} {
		if s, err := New(o); err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestArgumentsThatDoNotFitAreValidationResults(t *testing.T) {
	f := newFixture(t, nil)
	for name, a := range map[string]string{
		"read":  `{"path":1}`,
		"write": `{"path":"x","content":"y","extra":true}`,
		"ls":    `[]`,
		"bash":  `{"command":"true"} {}`,
	} {
		mustFail(t, f.set, name, []byte(a), tool.ClassValidation)
	}
	if _, err := os.Stat(f.path("x")); !os.IsNotExist(err) {
		t.Errorf("write ran with unreadable arguments")
	}
}

func TestClosedSetFails(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("a.txt"), "a\n")
	f.set.Close()
	res, err := call(t, f.set, "read", args("path", "a.txt"))
	if err == nil && !res.IsError {
		t.Errorf("read after Close: %s", res.Content)
	}
}

// Through the gateway: the tools register (their schemas compile), calls go
// through the pipeline, a tool-level failure comes back as an error result
// with its class, and the tools needing approval ask for it.
func TestThroughTheGateway(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("hello.txt"), "hello\n")
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(&gateway.Options{Store: memstore.New(), Policy: rules})
	for _, tool := range f.set.Tools() {
		if err := g.Register(context.Background(), tool); err != nil {
			t.Fatalf("Register(%s): %v", tool.Name, err)
		}
	}
	ctx := context.Background()
	callG := func(tool, a string) (*gateway.CallResult, error) {
		return g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: tool, Arguments: json.RawMessage(a)})
	}

	res, err := callG("read", `{"path":"hello.txt"}`)
	if err != nil || res.IsError || !strings.Contains(string(res.Result), `"content":"     1\thello\n"`) {
		t.Fatalf("read: %v %+v", err, res)
	}
	in, err := g.GetIntent(ctx, res.CallID)
	if err != nil || in.Tool != "read" || in.Status != "succeeded" {
		t.Errorf("journal: %+v %v", in, err)
	}

	res, err = callG("read", `{"path":"../../etc/passwd"}`)
	if err != nil || !res.IsError || !strings.Contains(string(res.Result), `"class":"forbidden"`) {
		t.Errorf("escape through the gateway: %v %+v", err, res)
	}

	// The schema refuses before the backend runs.
	_, err = callG("read", `{"path":"hello.txt","offset":0}`)
	if !errors.Is(err, tool.ClassValidation) {
		t.Errorf("offset 0: %v", err)
	}

	for _, c := range []struct{ tool, a string }{
		{"write", `{"path":"new.txt","content":"x"}`},
		{"edit", `{"path":"hello.txt","content":"x"}`},
		{"bash", `{"command":"touch ran"}`},
	} {
		_, err := callG(c.tool, c.a)
		if !errors.Is(err, tool.ClassApprovalRequired) {
			t.Errorf("%s: %v, want approval_required", c.tool, err)
		}
	}
	for _, p := range []string{"new.txt", "ran"} {
		if _, err := os.Stat(f.path(p)); !os.IsNotExist(err) {
			t.Errorf("%s exists: a call that needs approval ran", p)
		}
	}
	if got := readString(t, f.path("hello.txt")); got != "hello\n" {
		t.Errorf("hello.txt changed to %q", got)
	}

	res, err = callG("ask_user_question", `{"question":"ok?"}`)
	if err != nil || !res.IsError || !strings.Contains(string(res.Result), `"class":"unsupported_capability"`) {
		t.Errorf("ask without a channel: %v %+v", err, res)
	}
}
