// Package procsup starts and supervises the processes Backplane runs for
// tools: the command backend's programs, the built-in bash tool and stdio
// MCP upstreams. It is the one place that knows how.
//
// What it promises, for every process it starts:
//
//   - The process leads its own process group, so a signal to the
//     gateway's group does not reach it and the whole group can be killed.
//   - On Linux it gets SIGKILL when the gateway dies, even by SIGKILL
//     (PR_SET_PDEATHSIG). The kernel ties that signal to the thread that
//     forked, not the process, so every start happens on one goroutine
//     locked to its OS thread for the life of the process: that thread
//     never exits while the gateway lives.
//   - [Run] (one call, one process) starts it, on Linux, under the
//     supervising launcher (see sandbox.Wrap), which stays its parent and
//     kills its whole process group when the gateway dies: the parent-death
//     signal alone would miss its background children (it is not inherited
//     across fork).
//   - [Run]: stdin is written and closed, stdout
//     and stderr are copied to the caller's writers; when the process
//     exits, the deadline passes, ctx is done or a writer refuses more
//     output, what is left of its group is killed with SIGKILL, always
//     before its leader is reaped (see [Group]: the group id is then
//     still ours); the reap
//     and the draining of the pipes are bounded, so a process that left
//     the group (setsid) cannot hold the call.
//   - With a sandbox policy (package internal/sandbox) the process is
//     started through the sandbox launcher, which confines itself and
//     then executes the program; under supervision ([Run]) the
//     supervising launcher stays outside the program's confinement and
//     starts a second launcher that confines itself.
package procsup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/agentbackplane/backplane/internal/sandbox"
)

const (
	// DrainTimeout bounds the wait for stdout and stderr to reach EOF once
	// the process group is dead: only a process that left the group can
	// hold them open that long.
	DrainTimeout = 2 * time.Second
	// ReapTimeout bounds the wait for the killed process to be reaped (a
	// process in uninterruptible sleep dies only when it wakes up).
	ReapTimeout = 5 * time.Second
)

// ErrNotStarted wraps every error of a process that could not be started:
// nothing ran.
var ErrNotStarted = errors.New("process not started")

// ErrOutputLimit is what a Spec's Stdout or Stderr writer returns to say
// that it takes no more: the process group is killed at once.
var ErrOutputLimit = errors.New("output limit reached")

// Spec says what one supervised process is.
type Spec struct {
	// Argv is the program and its arguments. Argv[0] is looked up in the
	// gateway's PATH when it has no slash; a relative path is relative to
	// Dir.
	Argv []string
	// Dir is the working folder; "" means the gateway's.
	Dir string
	// Env is the whole environment. Never nil in practice: a nil Env
	// passes none (unlike exec.Cmd, where it passes the gateway's).
	Env []string
	// Stdin is written to the process's stdin, which is then closed; nil
	// means stdin is /dev/null.
	Stdin []byte
	// Stdout and Stderr receive the output, each from one goroutine. A
	// write error (ErrOutputLimit) kills the group. nil discards.
	Stdout, Stderr io.Writer
	// Timeout, when positive, kills the group after that long.
	Timeout time.Duration
	// Sandbox, when not nil, confines the process (see package sandbox).
	Sandbox *sandbox.Policy
}

// Outcome is what became of a process Run started.
type Outcome struct {
	// Wait is exec.Cmd.Wait's error: nil (exit 0), an *exec.ExitError, or
	// another error. Meaningful when Reaped.
	Wait error
	// Reaped reports that the process was reaped within ReapTimeout.
	Reaped bool
	// TimedOut reports that Timeout passed before it exited.
	TimedOut bool
	// Ctx is ctx's error when ctx ended the call.
	Ctx error
	// Overflow reports that a writer refused output.
	Overflow bool
	// Drained reports that stdout and stderr reached EOF within
	// DrainTimeout of the group's death.
	Drained bool
}

// Signaled returns the signal that killed the process, if one did.
func (o *Outcome) Signaled() (syscall.Signal, bool) {
	var ee *exec.ExitError
	if !errors.As(o.Wait, &ee) {
		return 0, false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

// Command returns an exec.Cmd for argv in dir with env (never the
// gateway's environment), wrapped in the sandbox launcher when policy is
// not nil or isolate is set (see [sandbox.Wrap]). Start it with
// [Group.Start] (or [Start], to manage the group oneself); call cleanup
// (never nil) once it is reaped.
func Command(argv []string, dir string, env []string, policy *sandbox.Policy, isolate bool) (cmd *exec.Cmd, cleanup func(), err error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, nil, fmt.Errorf("%w: no program", ErrNotStarted)
	}
	cmd = exec.Command(argv[0], argv[1:]...)
	if cmd.Err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotStarted, cmd.Err)
	}
	if err := checkProgram(cmd.Path, dir); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	cmd.Dir = dir
	if env == nil {
		env = []string{}
	}
	cmd.Env = env
	cleanup = func() {}
	if policy != nil || isolate {
		if cleanup, err = sandbox.Wrap(cmd, policy, isolate); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
		}
	}
	return cmd, cleanup, nil
}

// checkProgram refuses a program that is missing or not executable before
// anything starts: through the launcher, its exec would fail only in the
// child, which the gateway could not tell from a tool's own exit status.
func checkProgram(path, dir string) error {
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: %w", path, os.ErrPermission)
	}
	return nil
}

// Start starts cmd in its own process group with the parent-death signal
// (on Linux; a supervising launcher gets none, see sandbox.OwnPdeathsig),
// on the thread that forks every tool process.
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if !sandbox.OwnPdeathsig(cmd) {
		setPdeathsig(cmd.SysProcAttr)
	}
	var err error
	onSpawner(func() { err = cmd.Start() })
	return err
}

var (
	spawnOnce sync.Once
	spawnReq  chan func()
)

// onSpawner runs f on the spawner thread and waits for it.
func onSpawner(f func()) {
	spawnOnce.Do(func() {
		spawnReq = make(chan func())
		go func() {
			// Never unlocked, and the goroutine never returns: the thread
			// lives as long as the process, so the parent-death signal of
			// its children fires only when the gateway dies.
			runtime.LockOSThread()
			for f := range spawnReq {
				f()
			}
		}()
	})
	done := make(chan struct{})
	spawnReq <- func() { defer close(done); f() }
	<-done
}

// Run starts spec's process and supervises it to its end. The error is
// non-nil only when the process could not be started (it wraps
// ErrNotStarted, and ctx's error when ctx was done before).
func Run(ctx context.Context, spec *Spec) (*Outcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	cmd, cleanup, err := Command(spec.Argv, spec.Dir, spec.Env, spec.Sandbox, true)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	// The pipes are ours, handed to the child as plain files, so that
	// Wait only reaps and never waits on a copy that a straggler keeps
	// open: the draining below is bounded.
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close() // closing twice is harmless
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	var inR, inW *os.File
	var err0 error
	if spec.Stdin != nil {
		inR, inW, err0 = pipe()
		cmd.Stdin = inR
	}
	outR, outW, err1 := pipe()
	errR, errW, err2 := pipe()
	if err := errors.Join(err0, err1, err2); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	group := NewGroup(cmd)
	if err := group.Start(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	// The child has its ends; ours must go, or EOF never comes.
	if inR != nil {
		inR.Close()
	}
	outW.Close()
	errW.Close()

	waitc := make(chan error, 1)
	go func() { waitc <- group.Wait() }()

	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		if inW != nil {
			// A program that exits without reading its input makes this
			// fail with EPIPE; that is its business.
			inW.Write(spec.Stdin)
			inW.Close()
		}
	}()
	overflow := make(chan struct{})
	var overflowOnce sync.Once
	copyOut := func(w io.Writer, r io.Reader, done chan struct{}) {
		defer close(done)
		if w == nil {
			w = io.Discard
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					overflowOnce.Do(func() { close(overflow) })
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	outDone, errDone := make(chan struct{}), make(chan struct{})
	go copyOut(spec.Stdout, outR, outDone)
	go copyOut(spec.Stderr, errR, errDone)

	var timeout <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	o := &Outcome{}
	select {
	case o.Wait = <-waitc:
		o.Reaped = true
	case <-timeout:
		o.TimedOut = true
	case <-ctx.Done():
		o.Ctx = ctx.Err()
	case <-overflow:
		o.Overflow = true
	}
	// Kill the group whatever happened: on a deadline, cancellation or
	// overflow to stop the program. After a normal exit, group.Wait killed
	// what it left running in the background before the reap, and this
	// does nothing (see Group).
	group.Kill()
	if !o.Reaped {
		select {
		case o.Wait = <-waitc:
			o.Reaped = true
		case <-time.After(ReapTimeout):
		}
	}
	o.Drained = waitAll(DrainTimeout, outDone, errDone)
	// Closing the read ends unblocks readers stuck on a pipe that a process
	// outside the group holds open; then they are done for certain.
	outR.Close()
	errR.Close()
	if inW != nil {
		inW.Close()
	}
	<-outDone
	<-errDone
	<-stdinDone
	select {
	case <-overflow:
		o.Overflow = true
	default:
	}
	return o, nil
}

// waitAll reports whether every channel closed within d.
func waitAll(d time.Duration, chans ...chan struct{}) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, c := range chans {
		select {
		case <-c:
		case <-timer.C:
			return false
		}
	}
	return true
}
