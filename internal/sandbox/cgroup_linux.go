package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Per-call cgroups (cgroup v1: the pids and memory controllers), made by
// a gateway that can (root) and joined by the launcher just before it
// executes the tool, so that the tool and everything it starts, and
// nothing of Backplane's own, are counted and limited.

// The cgroup v1 hierarchies; variables so that tests can point them
// elsewhere.
var (
	pidsRoot   = "/sys/fs/cgroup/pids"
	memoryRoot = "/sys/fs/cgroup/memory"
)

var cgroupSeq atomic.Uint64

// gatewayTag names this gateway in its calls' cgroup folders: its pid and
// start time (clock ticks since boot, /proc/self/stat field 22), so that a
// folder of a dead gateway is told from one of a live process that reuses
// the pid.
var gatewayTag = sync.OnceValue(func() string {
	return fmt.Sprintf("%d-%d", os.Getpid(), startTime(os.Getpid()))
})

// startTime is process pid's start time, 0 when it is gone.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

var staleOnce sync.Once

// RemoveStale removes the call cgroups of gateways that are gone (a
// gateway killed with SIGKILL leaves its calls' folders behind), killing
// any process left in them first. serve calls it at start; the first
// call's cgroup does too. Safe to call more than once.
func RemoveStale() { staleOnce.Do(removeStale) }

func removeStale() {
	for _, root := range []string{pidsRoot, memoryRoot} {
		dirs, _ := filepath.Glob(filepath.Join(root, "backplane-*"))
		for _, d := range dirs {
			if staleCgroup(filepath.Base(d)) {
				removeCgroup(d)
			}
		}
	}
}

// staleCgroup: the folder name is a call cgroup of a gateway that is
// gone. Names are backplane-PID-START-SEQ (backplane-PID-SEQ before the
// start time was recorded: stale once that pid is gone).
func staleCgroup(name string) bool {
	f := strings.Split(strings.TrimPrefix(name, "backplane-"), "-")
	var nums []uint64
	for _, s := range f {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return false // not one of ours
		}
		nums = append(nums, n)
	}
	if len(nums) < 2 || len(nums) > 3 || nums[0] == 0 || nums[0] > 1<<22 {
		return false
	}
	pid := int(nums[0])
	if pid == os.Getpid() {
		return false
	}
	if len(nums) == 2 {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	return startTime(pid) != nums[1]
}

// newCgroups makes the call's cgroups for the limits it can enforce that
// way: a pids cgroup for Processes, a memory cgroup for AddressSpace (the
// memory limit then counts what the call's processes use together, not
// each one's address space). "" for each it cannot make.
func newCgroups(l Limits) (pids, memory string) {
	RemoveStale()
	name := fmt.Sprintf("backplane-%s-%d", gatewayTag(), cgroupSeq.Add(1))
	if l.Processes > 0 {
		pids = makeCgroup(filepath.Join(pidsRoot, name), "pids.max", l.Processes)
	}
	if l.AddressSpace > 0 {
		if memory = makeCgroup(filepath.Join(memoryRoot, name), "memory.limit_in_bytes", l.AddressSpace); memory != "" {
			// Swap counted too where the kernel accounts it; where it
			// does not, the file is missing and RAM alone is limited.
			_ = os.WriteFile(filepath.Join(memory, "memory.memsw.limit_in_bytes"), []byte(strconv.FormatUint(l.AddressSpace, 10)), 0)
		}
	}
	return pids, memory
}

func makeCgroup(dir, limitFile string, v uint64) string {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatUint(v, 10)), 0); err != nil {
		os.Remove(dir)
		return ""
	}
	return dir
}

// joinCgroups moves the calling process into each folder (the launcher,
// just before it executes the tool).
func joinCgroups(dirs ...string) error {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte("0"), 0); err != nil {
			return fmt.Errorf("joining the call's cgroup %s: %w", d, err)
		}
	}
	return nil
}

// removeCgroup kills whatever is left in a call's cgroup (a process that
// left the process group included) and removes it. Bounded: the killed
// leave the cgroup when reaped, which may take a moment.
func removeCgroup(dir string) {
	if dir == "" {
		return
	}
	for range 50 {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		killCgroup(dir)
		time.Sleep(10 * time.Millisecond)
	}
}

// killCgroup sends SIGKILL to every process in the cgroup but the caller,
// including those forked while it runs. A single read of cgroup.procs
// followed by kills misses a child forked in between: a shell starting
// `setsid sleep &` at that moment leaves a process that is outside the
// process group and was not listed. So, in a pids
// cgroup, pids.max goes to 0 first (no fork in the cgroup succeeds from
// then on), and in any case the listing is read again until a read finds
// no process not already killed, twice in a row a moment apart (a fork
// that passed its check before pids.max changed is attached to the
// cgroup within that moment, or aborted by the kill of its parent).
func killCgroup(dir string) {
	// Not os.WriteFile: a memory cgroup has no pids.max to create.
	if f, err := os.OpenFile(filepath.Join(dir, "pids.max"), os.O_WRONLY, 0); err == nil {
		_, _ = f.Write([]byte("0"))
		f.Close()
	}
	killed := map[int]bool{}
	quiet := 0
	for round := 0; round < 1000 && quiet < 2; round++ {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return
		}
		fresh := false
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 || pid == os.Getpid() || killed[pid] {
				continue
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
			fresh = true
		}
		if fresh {
			quiet = 0
		} else {
			quiet++
			time.Sleep(time.Millisecond)
		}
	}
}
