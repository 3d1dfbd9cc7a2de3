package procsup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// groupKills records every group kill and the state of the group's leader
// (its /proc stat state letter, "gone" once reaped) at that moment.
type groupKills struct {
	mu    sync.Mutex
	kills []string // "pgid:state"
}

// watchGroupKills makes signalGroup record its calls, then kill as usual.
func watchGroupKills(t *testing.T) *groupKills {
	t.Helper()
	k := &groupKills{}
	real := signalGroup
	signalGroup = func(pgid int) {
		k.mu.Lock()
		k.kills = append(k.kills, strconv.Itoa(pgid)+":"+procState(pgid))
		k.mu.Unlock()
		real(pgid)
	}
	t.Cleanup(func() { signalGroup = real })
	return k
}

func (k *groupKills) list() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.kills...)
}

// procState is the state letter of process pid ("Z" for a zombie), or
// "gone" when there is no such process.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "gone"
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return "gone"
	}
	return string(b[i+2])
}

// waitDead waits for pid to be gone or a zombie (an orphan is reaped by
// whoever adopted it, which in a container may be no one).
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		switch procState(pid) {
		case "gone", "Z":
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs (state %s)", pid, procState(pid))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// backgroundScript starts sleep in the background, writes its pid to
// file and exits: the sleep outlives the leader, in its group.
func backgroundScript(file string) []string {
	return []string{"/bin/sh", "-c", "sleep 1000 </dev/null >/dev/null 2>&1 & echo $! >" + file}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

// TestGroupKillsBeforeReap: the background child that outlives the leader
// is killed, by a kill sent while the leader was a zombie (its pid, the
// group id, still reserved), and once the leader is reaped nothing
// signals the group id again.
func TestGroupKillsBeforeReap(t *testing.T) {
	kills := watchGroupKills(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd, cleanup, err := Command(backgroundScript(pidFile), "", []string{"PATH=/usr/bin:/bin"}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	g := NewGroup(cmd)
	g.Kill() // not started: nothing to signal
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	leader := cmd.Process.Pid
	if got, want := kills.list(), []string{strconv.Itoa(leader) + ":Z"}; !slices.Equal(got, want) {
		t.Fatalf("group kills %v, want %v (one, while the leader was an unreaped zombie)", got, want)
	}
	waitDead(t, readPid(t, pidFile))
	g.Kill()
	if err := g.Wait(); err != nil { // the same answer again, no second reap
		t.Fatalf("second Wait: %v", err)
	}
	if got := kills.list(); len(got) != 1 {
		t.Fatalf("group kills after the reap: %v", got)
	}
}

func TestGroupWaitNotStarted(t *testing.T) {
	cmd, cleanup, err := Command([]string{"/bin/true"}, "", nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if err := NewGroup(cmd).Wait(); !errors.Is(err, ErrGroupNotStarted) {
		t.Fatalf("Wait before Start: %v, want ErrGroupNotStarted", err)
	}
}

// TestRunKillsGroupBeforeReap: Run's process (the supervising launcher,
// on Linux) exits normally, leaving a background child; the child is
// killed while the leader is not reaped yet, and not signalled after.
func TestRunKillsGroupBeforeReap(t *testing.T) {
	kills := watchGroupKills(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	o, err := Run(context.Background(), &Spec{Argv: backgroundScript(pidFile), Env: []string{"PATH=/usr/bin:/bin"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Reaped || o.Wait != nil || o.TimedOut {
		t.Fatalf("outcome %+v", o)
	}
	got := kills.list()
	if len(got) != 1 || !strings.HasSuffix(got[0], ":Z") {
		t.Fatalf("group kills %v, want one, while the leader was an unreaped zombie", got)
	}
	waitDead(t, readPid(t, pidFile))
}

// TestRunTimeoutKillsLiveGroup: on a deadline the group is killed while
// its leader still runs; nothing signals the group once it is reaped.
func TestRunTimeoutKillsLiveGroup(t *testing.T) {
	kills := watchGroupKills(t)
	o, err := Run(context.Background(), &Spec{Argv: []string{"/bin/sleep", "1000"}, Env: []string{}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !o.TimedOut || !o.Reaped {
		t.Fatalf("outcome %+v", o)
	}
	if sig, ok := o.Signaled(); !ok || sig.String() != "killed" {
		t.Fatalf("the process ended with %v, want SIGKILL", o.Wait)
	}
	// Run kills the running group, then Group.Wait kills what is left
	// once the leader is a zombie: never once it is reaped.
	got := kills.list()
	if len(got) == 0 || strings.HasSuffix(got[0], ":Z") {
		t.Fatalf("group kills %v, want the first while the leader ran", got)
	}
	for _, k := range got {
		if strings.HasSuffix(k, ":gone") {
			t.Fatalf("group kills %v: one after the leader was reaped", got)
		}
	}
}
