package sandbox

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// keptRefused are the attempts of testdata/kept.c, with the error each
// must fail with inside the sandbox ("" for any refusal).
var keptRefused = map[string]string{
	"ptrace seize pid 1":   "EPERM",
	"ptrace seize gateway": "EPERM",
	"signal pid 1":         "EPERM",
	"signal gateway":       "EPERM",
	"read gateway environ": "EACCES",
	"read gateway status":  "EACCES",
	"read pid 1 environ":   "EACCES",
	"read /etc/shadow":     "EACCES",
	"read token file":      "EACCES",
	"tcp connect":          "EACCES",
	"tcp bind":             "EACCES",
	"abstract connect":     "",
	"io_uring_setup":       "ENOSYS",
	"write past file_size": "EFBIG",
}

// TestKeptSandboxDirectRefusals (issue 22's review, "Kept"): a program run
// in the sandbox, as root, directly and supervised, cannot ptrace or
// signal PID 1 or the gateway (this test's process), read the gateway's
// /proc entries, PID 1's environment, /etc/shadow or a token file outside
// the workspace, connect or bind TCP on 127.0.0.1, reach an abstract Unix
// socket, set up an io_uring (ENOSYS: its operations would bypass the
// filter), or write past its file-size limit; the listeners count no
// connection. The same program outside the sandbox succeeds at each (the
// control), so every refusal is the sandbox's.
func TestKeptSandboxDirectRefusals(t *testing.T) {
	if st := Probe(); !st.Available {
		t.Skip("the kernel cannot sandbox: " + st.Reason)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the control must be able to ptrace PID 1 and read /etc/shadow")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is needed to build the program: " + err.Error())
	}
	dir := t.TempDir()
	prog, ws, token := filepath.Join(dir, "kept"), filepath.Join(dir, "ws"), filepath.Join(dir, "tokens")
	if out, err := exec.Command(gcc, "-O", "-o", prog, "testdata/kept.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("tok-secret-0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	serve := func(ln net.Listener) {
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(tcp)
	abstract := fmt.Sprintf("backplane-kept-%d-%d", os.Getpid(), time.Now().UnixNano())
	un, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	serve(un)
	args := []string{strconv.Itoa(os.Getpid()), strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port), abstract, token, filepath.Join(ws, "big")}

	run := func(t *testing.T, p *Policy, supervised bool) map[string]string {
		t.Helper()
		cmd := exec.Command(prog, args...)
		cmd.Dir, cmd.Env = ws, []string{"PATH=/usr/bin:/bin"}
		if p != nil || supervised {
			cleanup, err := Wrap(cmd, p, supervised)
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("kept: %v\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("kept did not end:\n%s", out.String())
		}
		lines := map[string]string{}
		for _, line := range strings.Split(out.String(), "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok {
				lines[k] = v
			}
		}
		if len(lines) != len(keptRefused) {
			t.Fatalf("kept ran %d attempts, want %d:\n%s", len(lines), len(keptRefused), out.String())
		}
		return lines
	}

	t.Run("control", func(t *testing.T) {
		before := accepted.Load()
		for k, v := range run(t, nil, false) {
			if v != "SUCCEEDED" && strings.Contains(k, "pid 1") {
				// A container's PID 1 may be beyond even root here (no
				// CAP_SYS_PTRACE): the refusal inside is then not proven.
				t.Logf("%s outside the sandbox: %q: this machine cannot show the sandbox refuses it", k, v)
			} else if v != "SUCCEEDED" {
				t.Errorf("%s outside the sandbox: %q, want it to work (else the refusal proves nothing)", k, v)
			}
		}
		waitAccepted(t, &accepted, before+2) // tcp and abstract
	})
	for _, supervised := range []bool{false, true} {
		t.Run(fmt.Sprintf("supervised=%v", supervised), func(t *testing.T) {
			before := accepted.Load()
			limits := DefaultLimits
			limits.FileSize = 1 << 20
			got := run(t, &Policy{Write: []string{ws}, Limits: limits}, supervised)
			for k, want := range keptRefused {
				v := got[k]
				if !strings.HasPrefix(v, "refused") || (want != "" && v != "refused ("+want+")") {
					t.Errorf("%s inside the sandbox: %q, want refused (%s)", k, v, want)
				}
			}
			if st, err := os.Stat(filepath.Join(ws, "big")); err != nil || st.Size() > 1<<20 {
				t.Errorf("the file past the limit: %v, %v", st, err)
			}
			time.Sleep(50 * time.Millisecond) // an accept would have been counted
			if n := accepted.Load() - before; n != 0 {
				t.Errorf("the listeners accepted %d connections from the sandbox", n)
			}
		})
	}
}

func waitAccepted(t *testing.T, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the listeners counted %d connections, want %d", n.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
