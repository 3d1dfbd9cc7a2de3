package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func probe() Status {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return Status{Reason: "Landlock is not enabled in this kernel: " + err.Error()}
	}
	if abi < MinABI {
		return Status{ABI: abi, Reason: fmt.Sprintf("Landlock ABI %d is older than %d (Linux 6.12), which scopes signals", abi, MinABI)}
	}
	return Status{ABI: abi, Available: true}
}

// The launcher starts from the package's initialization, before main or
// TestMain: every binary that can start a tool process (it imports this
// package through procsup) can be the launcher, test binaries included.
func init() { Main() }

// Main makes this process the launcher when its first argument is
// LauncherArg: it confines itself and executes the tool, and never
// returns. Otherwise it returns at once. The package's init calls it.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != LauncherArg {
		return
	}
	err := launch(os.Args[2:])
	fmt.Fprintf(os.Stderr, "backplane sandbox: %v\n", err)
	os.Exit(ExitLauncher)
}

// launch confines this process and executes the tool; it returns only on
// failure. args: the policy as JSON, the program's path, its argv.
func launch(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("launcher: want a policy, a program and its argv")
	}
	var spec launchSpec
	dec := json.NewDecoder(bytes.NewReader([]byte(args[0])))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("launcher: policy: %w", err)
	}
	path, argv := args[1], args[2:]
	// Never unlocked: the restricted thread is the one that starts the
	// tool. Landlock and no_new_privs are set on this thread alone:
	// restricting every thread of a Go process (psx) signals each one.
	runtime.LockOSThread()
	if p := spec.Policy; p != nil {
		if p.Cgroup != "" {
			// Opened now: once confined, the launcher can open nothing there.
			if dir := ownPidsCgroup(); dir != "" {
				origCgroup, _ = os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
			}
			if err := os.WriteFile(filepath.Join(p.Cgroup, "cgroup.procs"), []byte("0"), 0); err != nil {
				return fmt.Errorf("joining the process-count cgroup: %w", err)
			}
		}
		if err := setLimits(p.Limits, p.Cgroup == ""); err != nil {
			return err
		}
		if err := restrict(p); err != nil {
			return err
		}
		// A home the tool cannot read (the gateway's) makes programs such
		// as git fail: the workspace stands in for it.
		if home := os.Getenv("HOME"); home != "" && len(p.Write) > 0 {
			if fd, err := unix.Open(home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				os.Setenv("HOME", p.Write[0])
			} else {
				unix.Close(fd)
			}
		}
	}
	if spec.Lifeline <= 0 {
		err := syscall.Exec(path, argv, os.Environ())
		return fmt.Errorf("executing %s: %w", path, err)
	}
	return supervise(spec, path, argv)
}

// origCgroup is the cgroup.procs file of the pids cgroup the launcher was
// in before it joined the call's (nil when it joined none, or it is
// unknown), opened before the launcher confined itself.
var origCgroup *os.File

// ownPidsCgroup is the folder of this process's cgroup v1 pids cgroup, read
// from /proc/self/cgroup; "" when it cannot be told.
func ownPidsCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "pids" {
				return filepath.Join(cgroupRoot, filepath.Clean("/"+parts[2]))
			}
		}
	}
	return ""
}

// supervise runs the tool as its child, in its own process group (the
// gateway made it), and waits for it. When the gateway dies (the lifeline
// reads EOF), it kills the whole group, itself included, and what is left
// in the call's cgroup: the background children of the tool, which the
// parent-death signal (not inherited across fork) does not reach. Signals
// the gateway sends to stop a program are passed on. Its exit status is
// the tool's; killed by a signal, it kills itself with the same signal.
func supervise(spec launchSpec, path string, argv []string) error {
	unix.CloseOnExec(spec.Lifeline)
	cmd := &exec.Cmd{Path: path, Args: argv, Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	// Started from this locked thread, which lives as long as the launcher.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("executing %s: %w", path, err)
	}
	// The tool was forked inside the call's pids cgroup; the launcher now
	// leaves it, so that a tool which fills the cgroup (a fork bomb) cannot
	// starve the launcher's own runtime of the threads it needs to report
	// and clean up (cgroup v1 counts threads).
	if origCgroup != nil {
		_, _ = origCgroup.Write([]byte("0"))
		origCgroup.Close()
	}
	go func() {
		var b [1]byte
		os.NewFile(uintptr(spec.Lifeline), "lifeline").Read(b[:]) // EOF: the gateway is gone
		if spec.Policy != nil && spec.Policy.Cgroup != "" {
			killCgroup(spec.Policy.Cgroup)
		}
		syscall.Kill(0, syscall.SIGKILL) // the group, this launcher included
	}()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	signal.Stop(sigs)
	if err == nil {
		os.Exit(0)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("waiting for %s: %w", path, err)
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() {
		os.Exit(ws.ExitStatus())
	}
	sig := ws.Signal()
	switch sig {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGSYS:
		// The Go runtime owns these: the shell's convention instead.
		os.Exit(128 + int(sig))
	}
	signal.Reset(sig)
	syscall.Kill(os.Getpid(), sig)
	time.Sleep(time.Second) // the signal is on its way
	os.Exit(128 + int(sig))
	return nil
}

var (
	lifelineOnce sync.Once
	lifelineR    *os.File
	//lint:ignore U1000 the write end is only held open, for the process's life
	lifelineW *os.File
)

// isolateAttr hands cmd the lifeline and returns its fd number in the
// child (0 when there is none).
func isolateAttr(cmd *exec.Cmd) int {
	lifelineOnce.Do(func() {
		var err error
		if lifelineR, lifelineW, err = os.Pipe(); err != nil {
			lifelineR, lifelineW = nil, nil
		}
	})
	if lifelineR == nil {
		return 0
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, lifelineR)
	return 2 + len(cmd.ExtraFiles)
}

// OwnPdeathsig reports whether cmd is a supervising launcher, which must
// not get the parent-death signal: when the gateway dies it has the tool's
// process group to kill first (it learns of the death by its lifeline).
func OwnPdeathsig(cmd *exec.Cmd) bool {
	return lifelineR != nil && slices.Contains(cmd.ExtraFiles, lifelineR)
}

// supervisable: supervision needs nothing the system may refuse.
func supervisable() bool { return true }

func setLimits(l Limits, nproc bool) error {
	set := func(res int, v uint64, name string) error {
		if v == 0 {
			return nil
		}
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err != nil {
			return fmt.Errorf("limit %s: %w", name, err)
		}
		// Never raise a limit the gateway already runs under.
		if cur.Max != unix.RLIM_INFINITY && v > cur.Max {
			v = cur.Max
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("limit %s %d: %w", name, v, err)
		}
		return nil
	}
	if err := set(unix.RLIMIT_CPU, l.CPUSeconds, "cpu"); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_AS, l.AddressSpace, "address space"); err != nil {
		return err
	}
	if err := set(unix.RLIMIT_FSIZE, l.FileSize, "file size"); err != nil {
		return err
	}
	if nproc {
		if err := set(unix.RLIMIT_NPROC, l.Processes, "processes"); err != nil {
			return err
		}
	}
	return nil
}

func restrict(p *Policy) error {
	cfg := landlock.V6
	if p.Network.All {
		cfg.HandledAccessNet = 0
	}
	rules := []landlock.Rule{
		landlock.RODirs(systemDirs...).IgnoreIfMissing(),
		landlock.RWFiles(devFiles...).IgnoreIfMissing(),
	}
	for _, f := range append(etcFiles, procFiles...) {
		rules = append(rules, pathRule(f, false))
	}
	for _, f := range p.Read {
		rules = append(rules, pathRule(f, false))
	}
	for _, f := range p.Write {
		rules = append(rules, pathRule(f, true))
	}
	if !p.Network.All {
		for _, port := range p.Network.Ports {
			rules = append(rules, landlock.ConnectTCP(port))
		}
	}
	// On this thread only, which then executes the tool (the caller holds
	// it locked): restricting every thread of a Go process (psx, signals to
	// each thread) hangs when the launcher is PID 1 of a new namespace.
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

// pathRule grants a folder or a file (Landlock wants file rights only on
// files); a missing path is skipped.
func pathRule(path string, write bool) landlock.Rule {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir() && write:
		return landlock.RWDirs(path).WithRefer().IgnoreIfMissing()
	case err == nil && fi.IsDir():
		return landlock.RODirs(path).IgnoreIfMissing()
	case write:
		return landlock.RWFiles(path).IgnoreIfMissing()
	default:
		return landlock.ROFiles(path).IgnoreIfMissing()
	}
}

// removeCgroup kills whatever is left in a call's cgroup (a process that
// left the process group included) and removes it. Bounded: the pids limit
// keeps the membership finite, and a few rounds of SIGKILL empty it.
func removeCgroup(dir string) {
	for range 50 {
		if err := os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		killCgroup(dir)
		time.Sleep(10 * time.Millisecond) // the killed leave the cgroup when reaped
	}
}

// killCgroup sends SIGKILL to every process in the cgroup but the caller.
func killCgroup(dir string) {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
