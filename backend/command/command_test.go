package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

// helperArg makes the test binary act as a backend program (see TestMain).
// It is passed in argv, not in the environment, because the backend passes
// no environment unless told to.
const helperArg = "backplane-command-helper"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		switch os.Args[2] {
		case "env":
			env := os.Environ()
			slices.Sort(env)
			b, _ := json.Marshal(env)
			os.Stdout.Write(b)
			os.Exit(0)
		}
		os.Exit(99)
	}
	os.Exit(m.Run())
}

func mustNew(t *testing.T, spec Spec) *Backend {
	t.Helper()
	b, err := New(spec)
	if err != nil {
		t.Fatalf("New(%+v): %v", spec, err)
	}
	return b
}

func sh(script string) []string { return []string{"sh", "-c", script} }

func invoke(ctx context.Context, b *Backend, args string) (*tool.Result, error) {
	return b.Invoke(ctx, &tool.Call{CallID: "call_test", Tool: "t", Caller: "alice", Arguments: json.RawMessage(args)})
}

func invokeWithin(t *testing.T, b *Backend, d time.Duration, args string) (*tool.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return invoke(ctx, b, args)
}

// gone reports whether pid no longer runs. A killed process that was
// orphaned stays a zombie until whoever adopted it reaps it, and kill(pid, 0)
// still succeeds on a zombie, so state Z counts as gone.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// assertGone polls (bounded) until pid is gone.
func assertGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) // do not leave it behind
			t.Fatalf("%s (pid %d) is still running after Invoke returned", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the program did not record its pid before it was stopped: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %s: %v", path, err)
	}
	return pid
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestJSONResultIsTrimmedStdout(t *testing.T) {
	b := mustNew(t, Spec{Argv: sh(`printf '  {"a": [1, 2.50], "s": "x y"}\n\n'`)})
	res, err := invokeWithin(t, b, 10*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Error("IsError set for exit status 0")
	}
	if want := `{"a": [1, 2.50], "s": "x y"}`; string(res.Content) != want {
		t.Errorf("Content = %q, want %q", res.Content, want)
	}
}

func TestArgumentsArriveByteForByte(t *testing.T) {
	dir := t.TempDir()
	// Larger than a pipe buffer, with escapes, non-ASCII and odd spacing: the
	// program must see exactly these bytes.
	args := " {\"text\":\"h\\u00e9llo \\\"q\\\" é\" , \"n\" : 1.0e2,\n\"pad\":\"" + strings.Repeat("x", 300<<10) + "\"}\t"
	b := mustNew(t, Spec{Argv: sh(`cat > in.json; echo true`), Dir: dir})
	res, err := invokeWithin(t, b, 20*time.Second, args)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != "true" {
		t.Errorf("Content = %q, want true", res.Content)
	}
	got, err := os.ReadFile(filepath.Join(dir, "in.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte(args)) {
		t.Errorf("stdin held %d bytes, want the %d argument bytes exactly", len(got), len(args))
	}

	// cat echoes them: stdout is the arguments, trimmed.
	res, err = invokeWithin(t, mustNew(t, Spec{Argv: []string{"cat"}}), 20*time.Second, args)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(args); string(res.Content) != want {
		t.Errorf("cat returned %d bytes, want %d", len(res.Content), len(want))
	}
}

func TestRelativeProgramIsRelativeToDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool.sh"), []byte("#!/bin/sh\necho '{\"where\":\"dir\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := invokeWithin(t, mustNew(t, Spec{Argv: []string{"./tool.sh"}, Dir: dir}), 10*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != `{"where":"dir"}` {
		t.Errorf("Content = %s", res.Content)
	}
}

func TestUnreadInputIsNotAnError(t *testing.T) {
	// The program never reads its stdin; writing 1 MiB to it must neither
	// block the call nor fail it.
	b := mustNew(t, Spec{Argv: sh(`echo '{"ignored":true}'`)})
	res, err := invokeWithin(t, b, 20*time.Second, `"`+strings.Repeat("a", 1<<20)+`"`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != `{"ignored":true}` {
		t.Errorf("Content = %q", res.Content)
	}
}

func TestEnvironmentIsAnAllowlist(t *testing.T) {
	t.Setenv("SECRET", "s3cret")
	t.Setenv("BACKPLANE_TEST_VISIBLE", "v i=s")

	b := mustNew(t, Spec{Argv: sh(`echo "{\"x\":\"$SECRET\"}"`), Env: []string{"BACKPLANE_TEST_VISIBLE"}})
	res, err := invokeWithin(t, b, 10*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != `{"x":""}` {
		t.Errorf("an unlisted variable reached the program: %s", res.Content)
	}

	// The exact environment the program gets, seen by a program that is not
	// a shell (a shell adds variables of its own): the listed variable that
	// is set, nothing else, not even PATH.
	b = mustNew(t, Spec{
		Argv: []string{os.Args[0], helperArg, "env"},
		Env:  []string{"BACKPLANE_TEST_VISIBLE", "BACKPLANE_TEST_UNSET_VARIABLE"},
	})
	res, err = invokeWithin(t, b, 20*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `["BACKPLANE_TEST_VISIBLE=v i=s"]`; string(res.Content) != want {
		t.Errorf("environment = %s, want %s", res.Content, want)
	}

	// With no list, the environment is empty.
	b = mustNew(t, Spec{Argv: []string{os.Args[0], helperArg, "env"}})
	res, err = invokeWithin(t, b, 20*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != `[]` {
		t.Errorf("environment = %s, want []", res.Content)
	}
}

func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	// The leader and a grandchild both hold stdout and sleep; a timeout
	// must end both, and promptly.
	b := mustNew(t, Spec{Argv: sh(`echo $$ > leader.pid; sleep 100 & echo $! > child.pid; sleep 100`), Dir: dir})
	start := time.Now()
	res, err := invokeWithin(t, b, time.Second, `{}`)
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("got a result %s, want a timeout", res.Content)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
	if errors.Is(err, tool.ErrNotStarted) || errors.Is(err, tool.ErrMalformedResult) {
		t.Errorf("error %v claims to know the outcome", err)
	}
	if elapsed > 5*time.Second {
		t.Errorf("Invoke took %v after a 1s deadline", elapsed)
	}
	assertGone(t, "the leader", readPID(t, filepath.Join(dir, "leader.pid")))
	assertGone(t, "the grandchild", readPID(t, filepath.Join(dir, "child.pid")))
}

func TestCancellationKillsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	b := mustNew(t, Spec{Argv: sh(`sleep 100 & echo $! > child.pid; sleep 100`), Dir: dir})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		waitFile(t, filepath.Join(dir, "child.pid"))
		cancel()
	}()
	start := time.Now()
	_, err := invoke(ctx, b, `{}`)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v does not wrap context.Canceled", err)
	}
	if errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("error %v claims nothing ran", err)
	}
	if elapsed := time.Since(start); elapsed > 12*time.Second {
		t.Errorf("Invoke took %v", elapsed)
	}
	assertGone(t, "the grandchild", readPID(t, filepath.Join(dir, "child.pid")))
}

func TestNeverAnswersNeverClosesStdout(t *testing.T) {
	// No output, stdout held open, SIGTERM and SIGINT ignored: only SIGKILL
	// of the group ends it.
	b := mustNew(t, Spec{Argv: sh(`trap '' TERM INT HUP; while :; do sleep 1; done`)})
	start := time.Now()
	_, err := invokeWithin(t, b, 300*time.Millisecond, `{}`)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v does not wrap context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 4*time.Second {
		t.Errorf("Invoke took %v after a 300ms deadline", elapsed)
	}
}

func TestGrandchildHoldingStdoutDoesNotHangTheCall(t *testing.T) {
	dir := t.TempDir()
	// The program answers and exits, leaving a background process that
	// holds its stdout: the call ends with the answer, and the straggler is
	// killed with the group.
	b := mustNew(t, Spec{Argv: sh(`sleep 100 & echo $! > child.pid; echo '{"done":true}'`), Dir: dir})
	start := time.Now()
	res, err := invokeWithin(t, b, 60*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != `{"done":true}` {
		t.Errorf("Content = %q", res.Content)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Invoke took %v: it waited for the grandchild", elapsed)
	}
	assertGone(t, "the grandchild", readPID(t, filepath.Join(dir, "child.pid")))
}

func TestGarbageOutputIsMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, script, quote string
	}{
		{"text", `echo 'hello, world'`, `"hello, world\n"`},
		{"empty", `true`, "empty"},
		{"two values", `echo '{} {}'`, `"{} {}\n"`},
		{"truncated", `printf '{"a":'`, `"{\"a\":"`},
		{"duplicate names", `printf '{"a":1,"a":2}'`, `"{\"a\":1,\"a\":2}"`},
		{"long", `printf '%0200d' 7`, `"` + strings.Repeat("0", 64) + `" (first 64 of 200 bytes)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustNew(t, Spec{Argv: sh(tc.script)})
			res, err := invokeWithin(t, b, 10*time.Second, `{}`)
			if !errors.Is(err, tool.ErrMalformedResult) {
				t.Fatalf("got %v, %v; want ErrMalformedResult", res, err)
			}
			if !strings.Contains(err.Error(), tc.quote) {
				t.Errorf("error %q does not quote the output as %s", err, tc.quote)
			}
		})
	}
}

func TestOutputCap(t *testing.T) {
	const limit = 1000
	// Exactly at the limit: a JSON string of 998 characters and its quotes.
	b := mustNew(t, Spec{Argv: sh(`printf '"'; head -c 998 /dev/zero | tr '\0' a; printf '"'`), MaxOutputBytes: limit})
	res, err := invokeWithin(t, b, 10*time.Second, `{}`)
	if err != nil {
		t.Fatalf("output of exactly the limit refused: %v", err)
	}
	if len(res.Content) != limit {
		t.Errorf("Content has %d bytes, want %d", len(res.Content), limit)
	}

	// One byte over.
	b = mustNew(t, Spec{Argv: sh(`printf '"'; head -c 999 /dev/zero | tr '\0' a; printf '"'`), MaxOutputBytes: limit})
	_, err = invokeWithin(t, b, 10*time.Second, `{}`)
	if !errors.Is(err, tool.ErrMalformedResult) {
		t.Fatalf("error %v does not wrap ErrMalformedResult", err)
	}
	if !strings.Contains(err.Error(), "1000 bytes") {
		t.Errorf("error %q does not name the limit", err)
	}

	// Endless output: refused at once, not at the deadline.
	b = mustNew(t, Spec{Argv: []string{"yes"}, MaxOutputBytes: limit})
	start := time.Now()
	_, err = invokeWithin(t, b, 30*time.Second, `{}`)
	if !errors.Is(err, tool.ErrMalformedResult) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v: want ErrMalformedResult, not a timeout", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("endless output took %v to refuse", elapsed)
	}

	// The default cap is 1 MiB.
	b = mustNew(t, Spec{Argv: sh(`printf '"'; head -c 1048576 /dev/zero | tr '\0' a; printf '"'`)})
	if _, err = invokeWithin(t, b, 20*time.Second, `{}`); !errors.Is(err, tool.ErrMalformedResult) {
		t.Fatalf("1 MiB + 2 bytes under the default cap: error %v, want ErrMalformedResult", err)
	}
}

func TestNonZeroExitIsAToolError(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"json stdout", `echo '{"partial": 1}'; echo oops >&2; exit 3`,
			`{"exit_code":3,"stderr":"oops\n","stdout":{"partial":1}}`},
		{"text stdout", `printf 'not json <&>'; exit 1`,
			`{"exit_code":1,"stderr":"","stdout":"not json <&>"}`},
		{"no output", `exit 255`,
			`{"exit_code":255,"stderr":"","stdout":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustNew(t, Spec{Argv: sh(tc.script)})
			res, err := invokeWithin(t, b, 10*time.Second, `{}`)
			if err != nil {
				t.Fatalf("a non-zero exit is a result, not an error: %v", err)
			}
			if !res.IsError {
				t.Error("IsError not set")
			}
			if string(res.Content) != tc.want {
				t.Errorf("Content = %s\nwant      %s", res.Content, tc.want)
			}
		})
	}
}

func TestStderrTailIsBounded(t *testing.T) {
	b := mustNew(t, Spec{Argv: sh(`head -c 10000 /dev/zero | tr '\0' x >&2; printf END >&2; exit 2`)})
	res, err := invokeWithin(t, b, 10*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		ExitCode int    `json:"exit_code"`
		Stderr   string `json:"stderr"`
	}
	if err := json.Unmarshal(res.Content, &r); err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 2 {
		t.Errorf("exit_code = %d", r.ExitCode)
	}
	if len(r.Stderr) != 4096 || !strings.HasSuffix(r.Stderr, "xxxEND") {
		t.Errorf("stderr tail has %d bytes ending %q; want the last 4096", len(r.Stderr), r.Stderr[max(0, len(r.Stderr)-10):])
	}
}

func TestKilledBySignalIsUncertain(t *testing.T) {
	b := mustNew(t, Spec{Argv: sh(`echo '{}'; kill -9 $$`)})
	res, err := invokeWithin(t, b, 10*time.Second, `{}`)
	if err == nil {
		t.Fatalf("got result %s; a crash must not look like an answer", res.Content)
	}
	if errors.Is(err, tool.ErrNotStarted) || errors.Is(err, tool.ErrMalformedResult) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v: a crash is an unknown outcome", err)
	}
	if !strings.Contains(err.Error(), "killed") {
		t.Errorf("error %q does not say it was killed", err)
	}
}

func TestNotStarted(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho '{}'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"not found", Spec{Argv: []string{"backplane-no-such-program"}}},
		{"no such path", Spec{Argv: []string{filepath.Join(dir, "missing")}}},
		{"not executable", Spec{Argv: []string{notExec}}},
		{"no such dir", Spec{Argv: []string{"true"}, Dir: filepath.Join(dir, "missing")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := invokeWithin(t, mustNew(t, tc.spec), 10*time.Second, `{}`)
			if !errors.Is(err, tool.ErrNotStarted) {
				t.Fatalf("error %v does not wrap ErrNotStarted", err)
			}
		})
	}

	// A context done before the start: nothing runs.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := mustNew(t, Spec{Argv: sh(`touch ran; echo '{}'`), Dir: dir})
	if _, err := invoke(ctx, b, `{}`); !errors.Is(err, tool.ErrNotStarted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v: want ErrNotStarted wrapping context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); !os.IsNotExist(err) {
		t.Errorf("the program ran under a cancelled context (stat: %v)", err)
	}
}

func TestNewRefusesBadSpecs(t *testing.T) {
	for _, spec := range []Spec{
		{},
		{Argv: []string{""}},
		{Argv: []string{"true"}, Env: []string{""}},
		{Argv: []string{"true"}, Env: []string{"A=B"}},
		{Argv: []string{"true"}, MaxOutputBytes: -1},
	} {
		if _, err := New(spec); err == nil {
			t.Errorf("New(%+v) accepted", spec)
		}
	}
}

func TestSpecIsCopied(t *testing.T) {
	argv := []string{"sh", "-c", `echo '{"v":1}'`}
	b := mustNew(t, Spec{Argv: argv})
	argv[2] = `echo '{"v":2}'`
	res, err := invokeWithin(t, b, 10*time.Second, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != `{"v":1}` {
		t.Errorf("changing the caller's slice changed the backend: %s", res.Content)
	}
}

func TestConcurrentCalls(t *testing.T) {
	b := mustNew(t, Spec{Argv: []string{"cat"}})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			args := fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("p", i*1000))
			res, err := invokeWithin(t, b, 30*time.Second, args)
			if err != nil {
				errs <- err
				return
			}
			if string(res.Content) != args {
				errs <- fmt.Errorf("call %d got another call's output (%d bytes)", i, len(res.Content))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

func TestNoFileDescriptorLeaks(t *testing.T) {
	run := func() {
		for _, tc := range []struct {
			spec Spec
			d    time.Duration
		}{
			{Spec{Argv: []string{"cat"}}, 10 * time.Second},                       // result
			{Spec{Argv: sh(`exit 3`)}, 10 * time.Second},                          // tool error
			{Spec{Argv: []string{"yes"}, MaxOutputBytes: 100}, 10 * time.Second},  // overflow
			{Spec{Argv: sh(`sleep 100`)}, 100 * time.Millisecond},                 // timeout
			{Spec{Argv: []string{"backplane-no-such-program"}}, 10 * time.Second}, // not started
			{Spec{Argv: sh(`sleep 100 & echo '{}'`)}, 10 * time.Second},           // straggler
		} {
			invokeWithin(t, mustNew(t, tc.spec), tc.d, `{"a":1}`)
		}
	}
	run() // warm up whatever the runtime opens once
	before := openFDs(t)
	for range 3 {
		run()
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d open files before, %d after", before, after)
	}
}

// A traced call adds its own TRACEPARENT and TRACESTATE, and nothing else;
// the gateway's own values of those names are not passed.
func TestTraceContextEnvironment(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	b := mustNew(t, Spec{Argv: []string{os.Args[0], helperArg, "env"}, Env: []string{"BACKPLANE_TEST_UNSET_VARIABLE"}})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := b.Invoke(ctx, &tool.Call{Arguments: json.RawMessage(`{}`), Trace: tool.TraceContext{Parent: tp, State: "v=x"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `["TRACEPARENT=` + tp + `","TRACESTATE=v=x"]`; string(res.Content) != want {
		t.Errorf("environment = %s, want %s", res.Content, want)
	}
	// Untraced: none.
	res, err = b.Invoke(ctx, &tool.Call{Arguments: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Content) != `[]` {
		t.Errorf("untraced environment = %s, want []", res.Content)
	}
}
