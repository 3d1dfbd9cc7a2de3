package sandbox

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// escapeLab is what the escape tests share: a folder every user can read
// (the compiled escape program, a copy of this test binary to serve as the
// launcher, a workspace) and a Unix socket that counts its connections.
type escapeLab struct {
	dir, launcher, escape, ws, sock string
	accepted                        *atomic.Int64
}

func newEscapeLab(t *testing.T) *escapeLab {
	t.Helper()
	if st := Probe(); !st.Available {
		t.Skip("the kernel cannot sandbox: " + st.Reason)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the escape program: " + err.Error())
	}
	// One level under the temporary folder, 0755: t.TempDir's folders
	// are 0700, which uid 65534 could not enter.
	dir, err := os.MkdirTemp("", "backplane-escape-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l := &escapeLab{dir: dir, launcher: filepath.Join(dir, "launcher"), escape: filepath.Join(dir, "escape"),
		ws: filepath.Join(dir, "ws"), sock: filepath.Join(dir, "s.sock"), accepted: &atomic.Int64{}}
	if err := os.Mkdir(l.ws, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, l.ws} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(gcc, "-O", "-o", l.escape, "testdata/escape.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	copyFile(t, os.Args[0], l.launcher)
	ln, err := net.Listen("unix", l.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// Anyone may connect as far as file modes go: a refusal is the
	// sandbox's, not the permission bits'.
	if err := os.Chmod(l.sock, 0o777); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	return l
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// script is what the sandboxed bash runs: its own capability sets (bash
// reads /proc/self itself: its /proc entry is the one granted), unshare -n
// (which needs CAP_SYS_ADMIN), then the escape program in bash's place
// (exec), so that the program's parent is bash's: the supervising launcher,
// or for a launcher that executes the tool directly, the gateway.
func (l *escapeLab) script() string {
	return `while read -r k v; do case $k in Cap*) echo "$k $v";; esac; done </proc/self/status; ` +
		`unshare -n true 2>/dev/null && echo UNSHARED; exec ` + l.escape + " " + l.sock
}

// runSandboxed runs bash -c script through Wrap, as the gateway would (its
// own process group), as uid (0: this process's user).
func (l *escapeLab) runSandboxed(t *testing.T, uid int, supervised bool) string {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", l.script())
	cmd.Dir = l.ws
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin"}
	p := &Policy{Write: []string{l.ws}, Read: []string{l.escape}, Limits: DefaultLimits}
	cleanup, err := Wrap(cmd, p, supervised)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	cmd.Path = l.launcher // /proc/self/exe lies in a folder uid 65534 cannot enter
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the sandboxed bash: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("the sandboxed bash did not end:\n%s", out.String())
	}
	return out.String()
}

// mustRefuse are the attempts of testdata/escape.c that must fail inside
// the sandbox; mustWork those that must not.
var (
	mustRefuse = []string{"ptrace attach", "process_vm_readv", "pidfd_getfd", "socket unix", "connect unix",
		"socket unix high bits", "socketpair dgram", "sendto unix", "socket netlink", "socket packet",
		"socket inet raw", "io_uring_setup"}
	mustWork = []string{"socketpair stream (allowed)", "socket inet (allowed)"}
)

func checkEscape(t *testing.T, out string, root bool) {
	t.Helper()
	lines := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			lines[k] = v
		}
		if k, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(k, "Cap") {
			lines[k] = v
		}
	}
	if !strings.Contains(out, "socket inet (allowed):") {
		t.Fatalf("the script did not run to its end:\n%s", out)
	}
	for _, k := range mustRefuse {
		if v, ok := lines[k]; !ok || !strings.HasPrefix(v, "refused") {
			t.Errorf("%s inside the sandbox: %q, want refused\n%s", k, v, out)
		}
	}
	for _, k := range mustWork {
		if v := lines[k]; v != "SUCCEEDED" {
			t.Errorf("%s inside the sandbox: %q, want it to work", k, v)
		}
	}
	for _, k := range []string{"CapInh:", "CapPrm:", "CapEff:", "CapAmb:"} {
		if v := lines[k]; v != "0000000000000000" {
			t.Errorf("%s %q inside the sandbox, want none\n%s", k, v, out)
		}
	}
	// Only a gateway with CAP_SETPCAP (root) may empty the bounding set.
	if v := lines["CapBnd:"]; root && v != "0000000000000000" {
		t.Errorf("CapBnd: %q under a root gateway, want empty", v)
	}
	if strings.Contains(out, "UNSHARED") {
		t.Error("unshare -n worked inside the sandbox")
	}
}

// TestSandboxEscapeThroughLauncher is issue 22's item 1 done the way the
// attack did it, with item 4's Unix socket and item 10's capabilities:
// a program run by a sandboxed bash attaches to its parent (the
// supervising launcher), reads its memory, takes its descriptors, and
// connects to a Unix socket by path; every attempt fails, and the
// socket's accept counter stays 0. As root and as uid 65534, supervised
// (bash and command tools) and not (stdio servers, whose parent is the
// gateway).
func TestSandboxEscapeThroughLauncher(t *testing.T) {
	l := newEscapeLab(t)
	for _, tc := range []struct {
		name       string
		uid        int
		supervised bool
	}{
		{"root/supervised", 0, true},
		{"root/direct", 0, false},
		{"nobody/supervised", 65534, true},
		{"nobody/direct", 65534, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("needs root: the root case runs as root, the other switches to uid 65534")
			}
			if tc.uid != 0 {
				// A gateway of that user can make no cgroup: neither can
				// this one for it (the launcher could not join one).
				old1, old2 := pidsRoot, memoryRoot
				pidsRoot, memoryRoot = "/nonexistent", "/nonexistent"
				t.Cleanup(func() { pidsRoot, memoryRoot = old1, old2 })
			}
			before := l.accepted.Load()
			out := l.runSandboxed(t, tc.uid, tc.supervised)
			checkEscape(t, out, tc.uid == 0)
			time.Sleep(50 * time.Millisecond) // an accept would have been counted
			if n := l.accepted.Load() - before; n != 0 {
				t.Errorf("the Unix socket accepted %d connections from the sandbox", n)
			}
		})
	}
}

// TestEscapeProgramControl: the same program, not sandboxed, succeeds at
// what the sandbox refuses, so the refusals above are the sandbox's.
func TestEscapeProgramControl(t *testing.T) {
	l := newEscapeLab(t)
	out, err := exec.Command("/bin/bash", "-c", l.script()).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, k := range []string{"ptrace attach: SUCCEEDED", "process_vm_readv: SUCCEEDED", "connect unix: SUCCEEDED", "socket netlink: SUCCEEDED"} {
		if !strings.Contains(string(out), k) {
			t.Errorf("unsandboxed, %q missing:\n%s", k, out)
		}
	}
	if l.accepted.Load() == 0 {
		t.Error("unsandboxed, the Unix socket saw no connection")
	}
}

// runLimited runs bash -c script sandboxed and supervised with memory
// limit mem, and returns its output and error.
func runLimited(t *testing.T, dir string, mem uint64, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	lim := DefaultLimits
	lim.AddressSpace = mem
	cleanup, err := Wrap(cmd, &Policy{Write: []string{dir}, Limits: lim}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	cmd.Path = os.Args[0]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSandboxMemoryLimit (issue 22, item 10): a memory limit of 1 GiB or
// less binds the tool, not the Go launcher (which crashed on every call
// under one); with a memory cgroup it holds the call's processes
// together, not each one.
func TestSandboxMemoryLimit(t *testing.T) {
	if st := Probe(); !st.Available {
		t.Skip("the kernel cannot sandbox: " + st.Reason)
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("the memory hogs are python3 programs: " + err.Error())
	}
	// Each hog fills 60 MiB (touched, so it is resident), holds it for a
	// second, and says so.
	hog := python + ` -c 'import time; b = b"x" * (60 << 20); time.sleep(1); print("held", flush=True)'`
	three := hog + " & " + hog + " & " + hog + " & wait; echo launcher-ok"
	big := python + ` -c 'b = b"x" * (400 << 20); print("big held")'; echo launcher-ok`

	t.Run("rlimit", func(t *testing.T) {
		old1, old2 := pidsRoot, memoryRoot
		memoryRoot = "/nonexistent"
		t.Cleanup(func() { pidsRoot, memoryRoot = old1, old2 })
		out, err := runLimited(t, t.TempDir(), 256<<20, three)
		if err != nil || !strings.Contains(out, "launcher-ok") || heldLines(out) != 3 {
			t.Fatalf("three 60 MiB processes under a 256 MiB per-process limit: %v\n%s", err, out)
		}
		out, _ = runLimited(t, t.TempDir(), 256<<20, big)
		if strings.Contains(out, "big held") || !strings.Contains(out, "MemoryError") || !strings.Contains(out, "launcher-ok") {
			t.Fatalf("400 MiB under a 256 MiB limit:\n%s", out)
		}
	})
	t.Run("cgroup", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("a memory cgroup per call needs a root gateway")
		}
		if _, err := os.Stat(filepath.Join(memoryRoot, "memory.limit_in_bytes")); err != nil {
			t.Skip("no cgroup v1 memory controller here: " + err.Error())
		}
		out, err := runLimited(t, t.TempDir(), 128<<20, three)
		if n := heldLines(out); n == 3 || !strings.Contains(out, "launcher-ok") {
			t.Fatalf("three 60 MiB processes under a 128 MiB call limit: %d held (%v), want fewer\n%s", n, err, out)
		}
		if out, err := runLimited(t, t.TempDir(), 128<<20, hog); err != nil || heldLines(out) != 1 {
			t.Fatalf("one 60 MiB process under a 128 MiB call limit: %v\n%s", err, out)
		}
	})
}

// heldLines counts the hogs that filled their memory (the shell's "Killed"
// lines quote the command, which holds the word too).
func heldLines(out string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if l == "held" {
			n++
		}
	}
	return n
}
