package assemble

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// openExample writes the example, verbatim, into a fresh folder and
// opens it: its store is that folder's .backplane.
func openExample(t *testing.T, opts *Options) (*Runtime, string) {
	t.Helper()
	example, err := os.ReadFile("../config/testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, config.DefaultFile)
	if err := os.WriteFile(path, example, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, dir
}

func call(rt *Runtime, caller, tool, args string) (*gateway.CallResult, error) {
	return rt.Gateway.Call(context.Background(), gateway.CallRequest{Caller: caller, Tool: tool, Arguments: json.RawMessage(args)})
}

func TestOpenRunsTheExampleEndToEnd(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "notes.log")
	t.Setenv("NOTE_LOG", logPath)
	var audit bytes.Buffer
	rt, dir := openExample(t, &Options{Logger: slog.New(slog.NewJSONHandler(&audit, nil))})

	// The store is SQLite, in the config file's folder.
	if _, ok := rt.Store.(*sqlite.Store); !ok {
		t.Errorf("store is %T, want *sqlite.Store", rt.Store)
	}
	if _, err := os.Stat(filepath.Join(dir, ".backplane", sqlite.DBFile)); err != nil {
		t.Errorf("no database in the config's folder: %v", err)
	}

	res, err := call(rt, "alice", "note", `{"text":"first note"}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Result) != `{"ok":true}` || res.IsError {
		t.Errorf("result %s (is_error %v), want {\"ok\":true}", res.Result, res.IsError)
	}
	got, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "{\"text\":\"first note\"}\n" {
		t.Errorf("the log holds %q", got)
	}
	in, err := rt.Store.GetIntent(context.Background(), res.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != store.StatusSucceeded || in.Caller != "alice" || in.Tool != "note" {
		t.Errorf("journal entry %+v", in)
	}

	// bob is named by no rule: default deny, the tool does not run, and
	// does not even exist for him.
	_, err = call(rt, "bob", "note", `{"text":"from bob"}`)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bob: %v, want not_found", err)
	}
	// The schema is enforced.
	_, err = call(rt, "alice", "note", `{"text":"x","n":0}`)
	if !errors.Is(err, tool.ClassValidation) {
		t.Errorf("n = 0: %v, want validation", err)
	}
	// danger is allowed by the policy but no tool has that name.
	_, err = call(rt, "alice", "danger", `{}`)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("danger: %v, want not_found", err)
	}

	// The caller quota is 3 at cost 1: two more calls, then the budget is spent.
	for _, text := range []string{"second", "third"} {
		if _, err := call(rt, "alice", "note", `{"text":"`+text+`"}`); err != nil {
			t.Fatalf("%s note: %v", text, err)
		}
	}
	_, err = call(rt, "alice", "note", `{"text":"fourth"}`)
	if !errors.Is(err, tool.ClassBudgetExceeded) {
		t.Errorf("fourth call: %v, want budget_exceeded", err)
	}
	got, _ = os.ReadFile(logPath)
	if want := "{\"text\":\"first note\"}\n{\"text\":\"second\"}\n{\"text\":\"third\"}\n"; string(got) != want {
		t.Errorf("the log holds %q, want %q", got, want)
	}

	// The audit log went to the given logger, without argument values.
	if !strings.Contains(audit.String(), res.CallID) {
		t.Error("the audit log does not mention the call")
	}
	if strings.Contains(audit.String(), "first note") {
		t.Error("the audit log holds an argument value")
	}
}

func TestOpenToolFailureIsAToolLevelResult(t *testing.T) {
	dir := t.TempDir()
	src := "policy:\n  - caller: a\n    allow: [fail]\n" +
		"tools:\n  - name: fail\n    command: [sh, -c, 'cat > /dev/null; echo bad >&2; exit 4']\n    input_schema: {type: object}\n"
	path := filepath.Join(dir, "bp.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	res, err := call(rt, "a", "fail", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || string(res.Result) != `{"exit_code":4,"stderr":"bad\n","stdout":""}` {
		t.Errorf("result %s is_error %v", res.Result, res.IsError)
	}
	in, err := rt.Store.GetIntent(context.Background(), res.CallID)
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != store.StatusSucceeded { // it ran and answered
		t.Errorf("journal status %s, want succeeded", in.Status)
	}
}

func TestOpenWritesTheConfiguredAuditLog(t *testing.T) {
	dir := t.TempDir()
	src := "log: {file: audit.log, level: info}\npolicy:\n  - caller: a\n    allow: [echo]\n" +
		"tools:\n  - name: echo\n    command: [cat]\n    input_schema: {type: object}\n"
	path := filepath.Join(dir, "bp.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := call(rt, "a", "echo", `{"secret":"s3cret-value"}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Result) != `{"secret":"s3cret-value"}` {
		t.Errorf("result %s", res.Result)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
	found := false
	for _, l := range lines {
		var ev map[string]any
		if err := json.Unmarshal(l, &ev); err != nil {
			t.Fatalf("audit line %q is not JSON: %v", l, err)
		}
		if ev["call_id"] == res.CallID {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit event for %s in %s", res.CallID, log)
	}
	if bytes.Contains(log, []byte("s3cret-value")) {
		t.Error("the audit log holds an argument value")
	}
}

func TestOpenHonoursACancelledContext(t *testing.T) {
	c, err := config.Parse(nil, filepath.Join(t.TempDir(), "bp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, c, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Open under a cancelled context: %v", err)
	}
	if _, err := os.Stat(c.Store); !os.IsNotExist(err) {
		t.Errorf("the store was created anyway (stat: %v)", err)
	}
}
