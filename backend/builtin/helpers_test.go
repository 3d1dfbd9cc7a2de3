package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

// subreaper is set when this test process adopts the orphans of its
// descendants. Without it an orphan is adopted by PID 1, and where PID 1
// does not reap (as in many containers) a killed orphan stays a zombie,
// which kill(pid, 0) still finds: the bash tests reap their orphans
// themselves to assert ESRCH.
var subreaper bool

func TestMain(m *testing.M) {
	subreaper = setSubreaper()
	os.Exit(m.Run())
}

// fixture is a workspace and, beside it, an outside folder holding a secret
// that no path-taking tool may reach.
type fixture struct {
	ws, outside string
	secret      string // absolute path of outside/secret.txt
	set         *Set
}

const secretText = "TOPSECRET-outside-the-workspace\n"

func newFixture(t *testing.T, opts *Options) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	mkdir(t, f.ws)
	mkdir(t, filepath.Join(f.outside, "dir"))
	f.secret = filepath.Join(f.outside, "secret.txt")
	writeFile(t, f.secret, secretText)
	writeFile(t, filepath.Join(f.outside, "dir", "deep.txt"), secretText)
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Workspace = f.ws
	s, err := New(&o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	f.set = s
	return f
}

// path returns an absolute path inside the workspace.
func (f *fixture) path(rel string) string { return filepath.Join(f.ws, rel) }

// assertOutsideUntouched checks that the outside folder holds exactly what
// newFixture put there.
func (f *fixture) assertOutsideUntouched(t *testing.T) {
	t.Helper()
	var got []string
	filepath.Walk(f.outside, func(p string, info os.FileInfo, err error) error {
		if err == nil && p != f.outside {
			r, _ := filepath.Rel(f.outside, p)
			got = append(got, r)
		}
		return nil
	})
	want := []string{"dir", "dir/deep.txt", "secret.txt"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the outside folder now holds %v, want %v", got, want)
	}
	if b, _ := os.ReadFile(f.secret); string(b) != secretText {
		t.Errorf("the outside secret now reads %q", b)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// args encodes a tool's arguments.
func args(kv ...any) json.RawMessage {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func invoke(ctx context.Context, s *Set, name string, a json.RawMessage) (*tool.Result, error) {
	t, ok := s.Tool(name)
	if !ok {
		return nil, fmt.Errorf("no tool %s", name)
	}
	return t.Backend.Invoke(ctx, &tool.Call{CallID: "call_test", Tool: name, Caller: "tester", Arguments: a})
}

func call(t *testing.T, s *Set, name string, a json.RawMessage) (*tool.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return invoke(ctx, s, name, a)
}

// mustOK calls a tool that must succeed and decodes its result into v.
func mustOK(t *testing.T, s *Set, tool string, a json.RawMessage, v any) {
	t.Helper()
	res, err := call(t, s, tool, a)
	if err != nil {
		t.Fatalf("%s %s: Go error %v", tool, a, err)
	}
	if res.IsError {
		t.Fatalf("%s %s: error result %s", tool, a, res.Content)
	}
	if !json.Valid(res.Content) || !bytes.HasPrefix(res.Content, []byte("{")) {
		t.Fatalf("%s: result %s is not a JSON object", tool, res.Content)
	}
	if v != nil {
		// Fields absent from this result must not keep an earlier one's.
		reflect.ValueOf(v).Elem().SetZero()
		if err := json.Unmarshal(res.Content, v); err != nil {
			t.Fatalf("%s: decoding %s: %v", tool, res.Content, err)
		}
	}
}

type errBody struct {
	Class   string         `json:"class"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// errorOf returns the error body of an IsError result.
func errorOf(t *testing.T, tool string, a json.RawMessage, res *tool.Result, err error) errBody {
	t.Helper()
	if err != nil {
		t.Fatalf("%s %s: Go error %v, want an error result", tool, a, err)
	}
	if !res.IsError {
		t.Fatalf("%s %s: result %s is not an error", tool, a, res.Content)
	}
	var r struct {
		Error *errBody `json:"error"`
	}
	if err := json.Unmarshal(res.Content, &r); err != nil || r.Error == nil {
		t.Fatalf("%s: error result %s has no error object (%v)", tool, res.Content, err)
	}
	return *r.Error
}

// mustFail calls a tool that must fail with an error result of class.
func mustFail(t *testing.T, s *Set, tool string, a json.RawMessage, class tool.Class) errBody {
	t.Helper()
	res, err := call(t, s, tool, a)
	e := errorOf(t, tool, a, res, err)
	if e.Class != string(class) {
		t.Fatalf("%s %s: class %q (%s), want %q", tool, a, e.Class, e.Message, class)
	}
	if e.Message == "" {
		t.Errorf("%s: empty error message", tool)
	}
	return e
}

// gone reports whether pid is no longer a process: kill(pid, 0) fails with
// ESRCH. An orphan of ours (see subreaper) is reaped here first.
func gone(pid int) bool {
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // ECHILD unless it is ours
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// assertGone polls, bounded, until kill(pid, 0) reports ESRCH.
func assertGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) // do not leave it behind
			t.Fatalf("%s (pid %d) still exists 5s after the call returned (%s)", what, pid, procState(pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertGroupEmpty polls, bounded, until kill(-pgid, 0) reports ESRCH: no
// process of the group is left, zombies included.
func assertGroupEmpty(t *testing.T, pgid int, members ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, pid := range members {
			gone(pid)
		}
		if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			t.Fatalf("process group %d is not empty 5s after the call returned", pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err.Error()
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return "state " + string(b[i+2])
	}
	return string(b)
}
