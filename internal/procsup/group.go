package procsup

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"
)

// ErrGroupNotStarted is what [Group.Wait] returns for a group whose
// leader was never started.
var ErrGroupNotStarted = errors.New("process group not started")

// Group is a process that leads its own process group (see [Start]), with
// what it takes to signal that group safely.
//
// A process group's id is its leader's pid. As long as the leader is alive
// or a zombie, that pid cannot be reused, so the id names our group. Once
// the leader is reaped and no member is left, the kernel may give the pid
// to an unrelated process (pids wrap around, after pid_max), which may lead
// a group of its own: kill(-pgid) would then hit it. So a Group signals
// its process group only while its leader is not reaped: [Group.Wait]
// waits for the leader to exit without reaping it (on Linux, waitid with
// WNOWAIT), kills what is left of the group, and only then reaps; and
// [Group.Kill] does nothing once the leader is reaped.
type Group struct {
	cmd *exec.Cmd

	mu      sync.Mutex // held while the group is signalled, and to say it is reaped
	started bool
	reaped  bool

	waitOnce sync.Once
	waitErr  error
}

// NewGroup returns the Group for cmd, not started yet. cmd is Command's
// (or any exec.Cmd); start it with [Group.Start], not by itself.
func NewGroup(cmd *exec.Cmd) *Group { return &Group{cmd: cmd} }

// Start starts the leader as [Start] does.
func (g *Group) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := Start(g.cmd); err != nil {
		return err
	}
	g.started = true
	return nil
}

// Kill kills the whole process group with SIGKILL, unless the leader was
// never started or is already reaped (then whatever it left was killed by
// Wait, just before the reap).
func (g *Group) Kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started && !g.reaped {
		signalGroup(g.cmd.Process.Pid)
	}
}

// Wait waits for the leader to exit, kills what is left of its group (its
// background children) and reaps the leader; it returns exec.Cmd.Wait's
// error. Every call waits for the same end and returns the same error.
func (g *Group) Wait() error {
	g.waitOnce.Do(func() { g.waitErr = g.wait() })
	return g.waitErr
}

func (g *Group) wait() error {
	g.mu.Lock()
	started := g.started
	g.mu.Unlock()
	if !started {
		return ErrGroupNotStarted
	}
	pid := g.cmd.Process.Pid
	if waitExited(pid) == nil {
		// The leader exited and is a zombie, which keeps its pid: the
		// group id is still ours.
		g.mu.Lock()
		signalGroup(pid)
		g.reaped = true // from here on nothing signals the group
		g.mu.Unlock()
		return g.cmd.Wait()
	}
	// Without a way to wait for the exit alone (not Linux), the group is
	// killed just after the reap, as before: safe while a member lives,
	// which keeps the id reserved.
	err := g.cmd.Wait()
	g.mu.Lock()
	signalGroup(pid)
	g.reaped = true
	g.mu.Unlock()
	return err
}

// signalGroup kills process group pgid with SIGKILL; a group with no
// member left makes it fail harmlessly with ESRCH. Only for a group whose
// leader is not reaped (see Group). A variable so that tests can see when
// it is called.
var signalGroup = func(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
