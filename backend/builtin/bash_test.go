package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

func bashResultOf(t *testing.T, res *tool.Result, err error) bashResult {
	t.Helper()
	if err != nil {
		t.Fatalf("bash: Go error %v", err)
	}
	var r bashResult
	if err := json.Unmarshal(res.Content, &r); err != nil {
		t.Fatalf("bash result %s: %v", res.Content, err)
	}
	if res.IsError != (r.Error != nil) {
		t.Errorf("IsError %v but error %+v", res.IsError, r.Error)
	}
	return r
}

func readPID(t *testing.T, p string) int {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the command did not record its pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %s: %v", p, err)
	}
	return pid
}

func requireSubreaper(t *testing.T) {
	t.Helper()
	if !subreaper {
		t.Skip("prctl(PR_SET_CHILD_SUBREAPER) failed: killed orphans would stay zombies of a PID 1 that may not reap them, so kill(pid, 0) could not report ESRCH")
	}
}

func TestBashRunsInTheWorkspace(t *testing.T) {
	f := newFixture(t, nil)
	res, err := call(t, f.set, "bash", args("command", `pwd; echo out; echo err >&2; printf 'x%.0s' 1 2 3`))
	r := bashResultOf(t, res, err)
	real, _ := filepath.EvalSymlinks(f.ws)
	if r.ExitCode != 0 || res.IsError || r.Stdout != real+"\nout\nxxx" || r.Stderr != "err\n" || r.Truncated || r.TimedOut {
		t.Errorf("result %+v (workspace %s)", r, real)
	}
	// stdin is empty, not the gateway's.
	res, err = call(t, f.set, "bash", args("command", `cat; echo done`))
	if r := bashResultOf(t, res, err); r.Stdout != "done\n" {
		t.Errorf("stdin: %q", r.Stdout)
	}
}

func TestBashNonZeroExitIsAnErrorResult(t *testing.T) {
	f := newFixture(t, nil)
	res, err := call(t, f.set, "bash", args("command", `echo partial; echo oops >&2; exit 3`))
	r := bashResultOf(t, res, err)
	if !res.IsError || r.ExitCode != 3 || r.Stdout != "partial\n" || r.Stderr != "oops\n" ||
		r.Error.Class != tool.ClassExecutionFailure || r.Error.Message != "exit status 3" {
		t.Errorf("result %+v error %+v", r, r.Error)
	}
	// Killed by a signal it sent itself: 128+9, as a shell reports it.
	res, err = call(t, f.set, "bash", args("command", `kill -9 $$`))
	r = bashResultOf(t, res, err)
	if !res.IsError || r.ExitCode != 137 || !strings.Contains(r.Error.Message, "killed") {
		t.Errorf("self-kill: %+v %+v", r, r.Error)
	}
}

func TestBashEnvironmentIsAnAllowlist(t *testing.T) {
	t.Setenv("BP_TEST_ALLOWED", "yes")
	t.Setenv("BP_TEST_SECRET", "hunter2")
	// An allowlisted GIT_CONFIG_COUNT would unpin core.fsmonitor: dropped.
	t.Setenv("GIT_CONFIG_COUNT", "2")
	f := newFixture(t, &Options{Bash: BashOptions{Env: []string{"PATH", "BP_TEST_ALLOWED", "BP_TEST_UNSET", "GIT_CONFIG_COUNT"}}})
	res, err := call(t, f.set, "bash", args("command", `env -0 | sort -z | tr '\0' '\n' | grep -v '^_=\|^PWD=\|^SHLVL=\|^OLDPWD='`))
	r := bashResultOf(t, res, err)
	want := "BP_TEST_ALLOWED=yes\nGIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=core.fsmonitor\nGIT_CONFIG_NOSYSTEM=1\nGIT_CONFIG_VALUE_0=\nPATH=" + os.Getenv("PATH") + "\n"
	if r.Stdout != want {
		t.Errorf("environment:\n%s\nwant:\n%s", r.Stdout, want)
	}
	if strings.Contains(r.Stdout, "hunter2") {
		t.Errorf("a variable outside the allowlist reached the command")
	}
	// The default allowlist: PATH and HOME.
	f = newFixture(t, nil)
	res, err = call(t, f.set, "bash", args("command", `echo "$PATH|$HOME|$BP_TEST_SECRET|$BP_TEST_ALLOWED"`))
	r = bashResultOf(t, res, err)
	if want := os.Getenv("PATH") + "|" + os.Getenv("HOME") + "||\n"; r.Stdout != want {
		t.Errorf("default allowlist: %q, want %q", r.Stdout, want)
	}
}

// "git status" runs core.fsmonitor from the workspace's .git/config as a
// command (issue 22, item 14); the shell's environment turns it off. The
// same git, run without the pins, does run it: the test can fail.
func TestBashGitStatusDoesNotRunFSMonitor(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed: nothing to run core.fsmonitor")
	}
	f := newFixture(t, nil)
	marker := filepath.Join(f.outside, "fsmonitor-ran")
	initRepo := func(dir string) {
		t.Helper()
		cmd := exec.Command(git, "init", "-q", dir)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + f.outside, "GIT_CONFIG_NOSYSTEM=1"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git init: %v: %s", err, out)
		}
		cfg := filepath.Join(dir, ".git", "config")
		old, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		hook := "[core]\n\tfsmonitor = \"touch '" + marker + "'; false\"\n"
		writeFile(t, cfg, string(old)+hook)
		writeFile(t, filepath.Join(dir, "a.txt"), "a")
	}
	// Without the pins: this git runs the hook on "git status".
	plain := filepath.Join(f.outside, "plain")
	initRepo(plain)
	cmd := exec.Command(git, "status", "--short")
	cmd.Dir, cmd.Env = plain, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + f.outside}
	_, _ = cmd.CombinedOutput()
	if _, err := os.Stat(marker); err != nil {
		t.Skipf("this git (%s) did not run core.fsmonitor even without the pins: nothing to show", git)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	initRepo(f.ws)
	res, err := call(t, f.set, "bash", args("command", "git status --short"))
	r := bashResultOf(t, res, err)
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("git status in the bash tool ran core.fsmonitor (stdout %q, stderr %q)", r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "a.txt") {
		t.Errorf("git status did not run: %+v", r)
	}
}

// The timeout kills the whole process group: the shell and what it
// started in the background are gone, and the group is empty.
func TestBashTimeoutLeavesNoProcess(t *testing.T) {
	requireSubreaper(t)
	f := newFixture(t, nil)
	start := time.Now()
	res, err := call(t, f.set, "bash", args("command", `echo $$ > leader.pid; sleep 100 & echo $! > pidfile; wait`, "timeout", 1))
	elapsed := time.Since(start)
	r := bashResultOf(t, res, err)
	if !r.TimedOut || !res.IsError || r.Error.Class != tool.ClassTimeout || r.ExitCode != 137 {
		t.Errorf("result %+v error %+v, want timed_out with class timeout", r, r.Error)
	}
	if elapsed < time.Second || elapsed > 5*time.Second {
		t.Errorf("the call took %v with a 1s timeout", elapsed)
	}
	leader, child := readPID(t, f.path("leader.pid")), readPID(t, f.path("pidfile"))
	assertGone(t, "the background sleep", child)
	assertGone(t, "the shell", leader)
	assertGroupEmpty(t, leader, child)
}

func TestBashTimeoutIsCappedByMaxTimeout(t *testing.T) {
	f := newFixture(t, &Options{Bash: BashOptions{Timeout: 500 * time.Millisecond, MaxTimeout: time.Second}})
	start := time.Now()
	res, err := call(t, f.set, "bash", args("command", `sleep 30`, "timeout", 3600))
	r := bashResultOf(t, res, err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v with max_timeout 1s", d)
	}
	if !r.TimedOut || !strings.Contains(r.Error.Message, "capped") {
		t.Errorf("%+v %+v", r, r.Error)
	}
	// The default applies without a timeout argument.
	start = time.Now()
	res, err = call(t, f.set, "bash", args("command", `sleep 30`))
	if r := bashResultOf(t, res, err); !r.TimedOut || time.Since(start) > 4*time.Second {
		t.Errorf("default timeout: %+v after %v", r, time.Since(start))
	}
	mustFail(t, f.set, "bash", args("command", "true", "timeout", 0), tool.ClassValidation)
}

// Cancellation (the gateway's deadline, the caller going away) kills the
// group too, and is a Go error: the outcome of a half-run command is unknown.
func TestBashCancellationKillsTheGroup(t *testing.T) {
	requireSubreaper(t)
	f := newFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(f.path("pidfile")); err == nil && strings.HasSuffix(string(b), "\n") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	_, err := invoke(ctx, f.set, "bash", args("command", `echo $$ > leader.pid; sleep 100 & echo $! > pidfile; wait`))
	if !errors.Is(err, context.Canceled) || errors.Is(err, tool.ErrNotStarted) {
		t.Fatalf("error %v: want one wrapping context.Canceled and not ErrNotStarted", err)
	}
	leader, child := readPID(t, f.path("leader.pid")), readPID(t, f.path("pidfile"))
	assertGone(t, "the background sleep", child)
	assertGroupEmpty(t, leader, child)
}

// A command that exits leaving a background process: the call returns at
// once, and the straggler is killed with the group.
func TestBashBackgroundProcessDoesNotOutliveTheCall(t *testing.T) {
	requireSubreaper(t)
	f := newFixture(t, nil)
	start := time.Now()
	res, err := call(t, f.set, "bash", args("command", `sleep 100 & echo $! > pidfile; echo started`))
	r := bashResultOf(t, res, err)
	if r.Stdout != "started\n" || r.ExitCode != 0 {
		t.Errorf("%+v", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call waited %v for the background process", d)
	}
	assertGone(t, "the background sleep", readPID(t, f.path("pidfile")))
}

func TestBashOutputCap(t *testing.T) {
	f := newFixture(t, &Options{Bash: BashOptions{MaxOutputBytes: 1000}})
	// 100,000 numbered lines of 7 bytes: the start and the end are kept.
	res, err := call(t, f.set, "bash", args("command", `for i in $(seq 100000); do printf '%06d\n' $i; done; echo tail >&2`))
	r := bashResultOf(t, res, err)
	if !r.Truncated || res.IsError {
		t.Errorf("truncated %v, IsError %v", r.Truncated, res.IsError)
	}
	if !strings.HasPrefix(r.Stdout, "000001\n000002\n") || !strings.HasSuffix(r.Stdout, "099999\n100000\n") {
		t.Errorf("stdout does not keep its start and end: %q ... %q", r.Stdout[:20], r.Stdout[len(r.Stdout)-20:])
	}
	if !strings.Contains(r.Stdout, "bytes omitted]") || len(r.Stdout) > 1100 {
		t.Errorf("stdout is %d bytes, marker present %v", len(r.Stdout), strings.Contains(r.Stdout, "omitted"))
	}
	// 700,000 bytes were written; 1000 kept.
	if !strings.Contains(r.Stdout, "[699000 bytes omitted]") {
		t.Errorf("the marker does not count the dropped bytes: %q", r.Stdout[490:560])
	}
	if r.Stderr != "tail\n" {
		t.Errorf("stderr %q", r.Stderr)
	}
}

func TestBashNotStarted(t *testing.T) {
	f := newFixture(t, nil)
	t.Setenv("PATH", t.TempDir()) // no bash to be found
	_, err := call(t, f.set, "bash", args("command", "true"))
	if !errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("error %v does not wrap ErrNotStarted", err)
	}
	// A done context: nothing runs.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = invoke(ctx, f.set, "bash", args("command", "touch ran"))
	if !errors.Is(err, tool.ErrNotStarted) {
		t.Errorf("error %v does not wrap ErrNotStarted", err)
	}
	if _, err := os.Stat(f.path("ran")); !os.IsNotExist(err) {
		t.Errorf("the command ran")
	}
}

func TestBashProcessGroupIsItsOwn(t *testing.T) {
	f := newFixture(t, nil)
	res, err := call(t, f.set, "bash", args("command", `ps -o pgid= -p $$`))
	r := bashResultOf(t, res, err)
	if r.ExitCode != 0 {
		t.Skipf("ps is not usable here: %+v", r)
	}
	pgid, _ := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if pgid == syscall.Getpgrp() || pgid == 0 {
		t.Errorf("the command ran in the gateway's process group %d", pgid)
	}
}
