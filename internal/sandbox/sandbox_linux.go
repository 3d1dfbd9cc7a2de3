package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

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
	st := Status{ABI: abi, Available: true}
	st.UnixSockets, st.UnixReason = seccompUsable()
	return st
}

// The launcher starts from the package's initialization, before main or
// TestMain: every binary that can start a tool process (it imports this
// package through procsup) can be the launcher, test binaries included.
func init() { Main() }

// Main makes this process the launcher when its first argument is
// LauncherArg: it confines itself and executes the tool, or supervises a
// confined one, and never returns. Otherwise it returns at once. The
// package's init calls it.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != LauncherArg {
		return
	}
	err := launch(os.Args[2:])
	fmt.Fprintf(os.Stderr, "backplane sandbox: %v\n", err)
	os.Exit(ExitLauncher)
}

// maxSpec bounds the launch spec the launcher reads.
const maxSpec = 64 << 20

// readSpec reads and closes the launch spec from descriptor fd.
func readSpec(arg string) (*launchSpec, error) {
	fd, err := strconv.Atoi(arg)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("launcher: policy: want the descriptor of the launch spec, not %q", arg)
	}
	f := os.NewFile(uintptr(fd), "launch-spec")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpec+1))
	if err != nil {
		return nil, fmt.Errorf("launcher: policy: %w", err)
	}
	if len(b) > maxSpec {
		return nil, fmt.Errorf("launcher: policy: longer than %d bytes", maxSpec)
	}
	var spec launchSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("launcher: policy: %w", err)
	}
	if spec.Path == "" || len(spec.Argv) == 0 {
		return nil, fmt.Errorf("launcher: policy: want a program and its argv")
	}
	return &spec, nil
}

// specFile is a memory file holding spec, at offset 0, for the launcher
// to inherit. Not a pipe: the spec (a whole command) may be larger than a
// pipe's buffer, and nothing has to write it while the launcher starts.
func specFile(spec *launchSpec) (*os.File, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("backplane-launch-spec", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("launch spec: %w", err)
	}
	f := os.NewFile(uintptr(fd), "launch-spec")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("launch spec: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("launch spec: %w", err)
	}
	return f, nil
}

// launch runs the launcher; it returns only on failure. args: the launch
// spec's descriptor.
//
// With a lifeline the launcher is a supervisor: it confines nothing of
// its own and starts a second launcher (without a lifeline) that confines
// itself and executes the tool. The supervisor must stay out of the tool's
// Landlock domain: Landlock lets a process ptrace (and process_vm_readv,
// pidfd_getfd) any process of its own domain, and a Go process can only
// restrict the thread that execs, so a supervisor restricted on one thread
// was the tool's ptrace target, whose other, unconfined threads then ran
// whatever the tool wrote into them (issue 22, item 1). Outside the domain
// it is refused to the tool, and it is not dumpable either.
func launch(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("launcher: policy: want one argument, the launch spec's descriptor")
	}
	spec, err := readSpec(args[0])
	if err != nil {
		return err
	}
	// Never unlocked: the thread that confines itself is the one that
	// executes the tool (or, supervising, that forks it: the parent-death
	// signal is tied to the forking thread).
	runtime.LockOSThread()
	if spec.Lifeline > 0 {
		return supervise(spec)
	}
	if p := spec.Policy; p != nil {
		return confineAndExec(p, spec.Path, spec.Argv)
	}
	err = syscall.Exec(spec.Path, spec.Argv, os.Environ())
	return fmt.Errorf("executing %s: %w", spec.Path, err)
}

// confineAndExec confines this process by p (on this thread, which then
// executes the tool: credentials, Landlock domain and seccomp filter are
// per thread, and the exec keeps those of the thread that calls it) and
// executes the tool.
func confineAndExec(p *confinement, path string, argv []string) error {
	if err := joinCgroups(p.Cgroup, p.MemoryCgroup); err != nil {
		return err
	}
	if err := setLimits(p.Limits, p.Cgroup == ""); err != nil {
		return err
	}
	if err := dropBoundingAndAmbient(); err != nil {
		return err
	}
	if err := restrict(p); err != nil {
		return err
	}
	if err := clearCaps(); err != nil {
		return err
	}
	// A home the tool cannot read (the gateway's) makes programs such as
	// git fail: the workspace stands in for it.
	if home := os.Getenv("HOME"); home != "" && len(p.Write) > 0 {
		if fd, err := unix.Open(home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			os.Setenv("HOME", p.Write[0])
		} else {
			unix.Close(fd)
		}
	}
	if err := installSeccomp(); err != nil {
		return err
	}
	// The exec's arguments as C strings, made before the address-space
	// limit: that limit binds this Go process too, which is already past
	// it (the runtime reserves more than a tool's limit), so any mmap after
	// it is fatal ("runtime: cannot allocate memory", seen once in three
	// CI runs when syscall.Exec's own conversions needed a new span).
	// After the limit only the execve system call runs; the tool gets the
	// limit fresh. (Unlike syscall.Exec this leaves RLIMIT_NOFILE's soft
	// limit where Go's runtime raised it, at the hard limit, which the tool
	// could raise it to itself.)
	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		return fmt.Errorf("executing %s: %w", path, err)
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return fmt.Errorf("executing %s: %w", path, err)
	}
	envp, err := syscall.SlicePtrFromStrings(os.Environ())
	if err != nil {
		return fmt.Errorf("executing %s: %w", path, err)
	}
	if p.MemoryCgroup == "" && p.Limits.AddressSpace > 0 {
		if err := setLimit(unix.RLIMIT_AS, p.Limits.AddressSpace, "address space"); err != nil {
			return err
		}
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	return fmt.Errorf("executing %s: %w", path, errno)
}

// supervise runs the tool as its child, in its own process group (the
// gateway made it), and waits for it: through a second launcher that
// confines itself first, when there is a policy. When the gateway dies
// (the lifeline reads EOF), it kills what is in the call's cgroup (the
// background children of the tool, which the parent-death signal, not
// inherited across fork, does not reach, and those that left the group)
// and the whole group, itself included. Signals the gateway sends to stop
// a program are passed on. Its exit status is the tool's; killed by a
// signal, it kills itself with the same signal.
func supervise(spec *launchSpec) error {
	// Not dumpable: a process of the same user, even unsandboxed, cannot
	// ptrace it or read its memory, and its /proc entries are root's.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	unix.CloseOnExec(spec.Lifeline)
	cmd := &exec.Cmd{Path: spec.Path, Args: spec.Argv, Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if spec.Policy != nil {
		inner := &launchSpec{Policy: spec.Policy, Path: spec.Path, Argv: spec.Argv}
		f, err := specFile(inner)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Path = "/proc/self/exe"
		cmd.Args = []string{"backplane-sandbox", LauncherArg, "3"}
		cmd.ExtraFiles = []*os.File{f}
	}
	// Started from this locked thread, which lives as long as the launcher.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("executing %s: %w", spec.Path, err)
	}
	// ending is taken, and never released, by whichever ends this
	// process: the lifeline's goroutine, which kills the call, or the
	// tool's end below, which exits with its status. Before, when the
	// gateway died, the cgroup kill killed the tool, Wait returned, and
	// the supervisor killed itself with the tool's signal before the rest
	// of the cgroup and the group were killed: under load the background
	// children survived the gateway (issue 22, item 25).
	var ending sync.Mutex
	lifeline := os.NewFile(uintptr(spec.Lifeline), "lifeline")
	go func() {
		var b [1]byte
		lifeline.Read(b[:]) // EOF: the gateway is gone
		ending.Lock()
		killCall(spec)
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
	ending.Lock()
	// The gateway may have died just as the tool ended: then nobody else
	// kills what the tool left running.
	if gatewayGone(spec.Lifeline) {
		killCall(spec)
	}
	runtime.KeepAlive(lifeline)
	if err == nil {
		os.Exit(0)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("waiting for %s: %w", spec.Path, err)
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

// killCall kills what is in the call's cgroup, then the tool's whole
// process group, this supervisor included: it does not return.
func killCall(spec *launchSpec) {
	if p := spec.Policy; p != nil {
		// The pids cgroup first: it is the one that stops forks.
		for _, d := range []string{p.Cgroup, p.MemoryCgroup} {
			if d != "" {
				killCgroup(d)
				break
			}
		}
	}
	syscall.Kill(0, syscall.SIGKILL)
	for {
		time.Sleep(time.Hour) // the signal is on its way
	}
}

// gatewayGone reports, without waiting, whether the lifeline reads EOF.
func gatewayGone(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n > 0 && pfd[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0
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

// setLimit lowers resource res to v (both soft and hard), never above
// the hard limit the gateway already runs under.
func setLimit(res int, v uint64, name string) error {
	var cur unix.Rlimit
	if err := unix.Getrlimit(res, &cur); err != nil {
		return fmt.Errorf("limit %s: %w", name, err)
	}
	if cur.Max != unix.RLIM_INFINITY && v > cur.Max {
		v = cur.Max
	}
	if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
		return fmt.Errorf("limit %s %d: %w", name, v, err)
	}
	return nil
}

// setLimits sets every limit but the address space's (see confineAndExec);
// 0 leaves one unset.
func setLimits(l Limits, nproc bool) error {
	for _, r := range []struct {
		res  int
		v    uint64
		name string
	}{
		{unix.RLIMIT_CPU, l.CPUSeconds, "cpu"},
		{unix.RLIMIT_FSIZE, l.FileSize, "file size"},
	} {
		if r.v != 0 {
			if err := setLimit(r.res, r.v, r.name); err != nil {
				return err
			}
		}
	}
	if nproc && l.Processes != 0 {
		return setLimit(unix.RLIMIT_NPROC, l.Processes, "processes")
	}
	return nil
}

func restrict(p *confinement) error {
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
