package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRemoveStale (issue 22, item 10): the call cgroups of gateways that
// are gone are removed, those of live ones kept, a pid reused by another
// process told apart by its start time.
func TestRemoveStale(t *testing.T) {
	pids, mem := t.TempDir(), t.TempDir()
	old1, old2 := pidsRoot, memoryRoot
	pidsRoot, memoryRoot = pids, mem
	t.Cleanup(func() { pidsRoot, memoryRoot = old1, old2 })

	// A process that is gone: one started and reaped.
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid
	self := os.Getpid()
	one := startTime(1)
	if one == 0 {
		t.Skip("no /proc/1/stat to read a live process's start time from")
	}
	names := map[string]bool{ // name: stale
		fmt.Sprintf("backplane-%d-%d-1", dead, 12345):  true,  // gateway gone
		fmt.Sprintf("backplane-%d-7", dead):            true,  // the old naming, gateway gone
		fmt.Sprintf("backplane-1-%d-3", one+1):         true,  // pid 1 is not that gateway: reused
		fmt.Sprintf("backplane-1-%d-3", one):           false, // a live gateway's
		fmt.Sprintf("backplane-%d-%d-2", self, one+99): false, // this gateway's own
		"backplane-notours":                            false,
		fmt.Sprintf("other-%d-%d-1", dead, 12345):      false,
	}
	for _, root := range []string{pids, mem} {
		for n := range names {
			if err := os.Mkdir(filepath.Join(root, n), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	removeStale()
	for _, root := range []string{pids, mem} {
		for n, stale := range names {
			_, err := os.Stat(filepath.Join(root, n))
			if gotStale := os.IsNotExist(err); gotStale != stale {
				t.Errorf("%s/%s: removed %v, want %v", filepath.Base(root), n, gotStale, stale)
			}
		}
	}
}

// TestLauncherArgvHoldsNoSpec (issue 22, item 10): the launcher's command
// line, which every local user can read, holds neither the policy nor the
// tool's command: only a descriptor number.
func TestLauncherArgvHoldsNoSpec(t *testing.T) {
	if st := Probe(); !st.Available {
		t.Skip("the kernel cannot sandbox: " + st.Reason)
	}
	ws := t.TempDir()
	token := fmt.Sprintf("tok%d", time.Now().UnixNano())
	cmd := exec.Command("/bin/sleep", "30")
	cmd.Args[0] = "sleep-" + token // the tool's argv, which the launcher must not show
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	p := &Policy{Write: []string{ws + "-" + token}, Limits: DefaultLimits}
	cleanup, err := Wrap(cmd, p, true)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	cmd.Path = os.Args[0]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}()
	// Start returns when the exec has closed the descriptors marked
	// close-on-exec, which the kernel does before it lays out the new
	// argument block: until then the command line reads empty. Wait for it.
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); len(b) == 0; time.Sleep(time.Millisecond) {
		if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 && time.Now().After(deadline) {
			t.Fatal("the launcher's command line stayed empty for 10s")
		}
	}
	line := strings.ReplaceAll(string(b), "\x00", " ")
	if strings.Contains(line, token) || strings.Contains(line, "policy") || strings.Contains(line, "/bin/sleep") {
		t.Fatalf("the launcher's command line shows its spec: %q", line)
	}
	if !strings.Contains(line, LauncherArg+" ") {
		t.Fatalf("the launcher's command line %q, want %s and a descriptor", line, LauncherArg)
	}
}
