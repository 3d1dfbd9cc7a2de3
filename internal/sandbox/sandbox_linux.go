package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// Main makes this process the launcher when its first argument is
// LauncherArg: it confines itself and executes the tool, and never
// returns. Otherwise it returns at once. Call it first thing in main (and
// in TestMain of tests that sandbox).
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
	var p Policy
	dec := json.NewDecoder(bytes.NewReader([]byte(args[0])))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("launcher: policy: %w", err)
	}
	path, argv := args[1], args[2:]

	if p.Cgroup != "" {
		if err := os.WriteFile(filepath.Join(p.Cgroup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("joining the process-count cgroup: %w", err)
		}
	}
	if err := setLimits(p.Limits, p.Cgroup == ""); err != nil {
		return err
	}
	if err := restrict(&p); err != nil {
		return err
	}
	err := syscall.Exec(path, argv, os.Environ())
	return fmt.Errorf("executing %s: %w", path, err)
}

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
	if err := cfg.Restrict(rules...); err != nil {
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
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(10 * time.Millisecond) // the killed leave the cgroup when reaped
	}
}
