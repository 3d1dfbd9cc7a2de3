// Package sandbox confines the processes Backplane starts for tools.
//
// A confined process is started as Backplane itself (/proc/self/exe) with
// the hidden first argument [LauncherArg] and the number of a descriptor
// from which it reads its launch spec (policy, program, argv: never in its
// own argv, which every local user can read). The launcher ([Main], called
// by the binary before anything else) confines itself and then executes
// the tool, whose restrictions survive the exec. On Linux the launcher:
//
//   - joins the per-call pids and memory cgroups the gateway made for it,
//     when the gateway can make them (root with the cgroup v1 pids and
//     memory controllers), else sets RLIMIT_NPROC (which the kernel does
//     not apply to root) and, as the memory limit, RLIMIT_AS (per
//     process), the latter just before the exec so that it binds the tool
//     and not the launcher's Go runtime;
//   - sets RLIMIT_CPU and RLIMIT_FSIZE;
//   - empties its capability sets: effective, permitted, inheritable and
//     ambient always, bounding when it holds CAP_SETPCAP (a root gateway),
//     with securebits that keep root from regaining any at exec;
//   - applies a Landlock domain (ABI 6 or later; no_new_privs is set):
//     read and execute on the system's folders (/usr, /bin, /sbin, /lib*,
//     /opt), on a short list of /etc files and on the process's own /proc
//     entries (not all of /proc: see procFiles), read-write on a few
//     /dev files, read-write on the policy's Write paths (the workspace),
//     read on its Read paths; TCP connect and bind refused except the
//     policy's ports (or not handled at all when the network is allowed);
//     signals and abstract Unix sockets scoped to the sandbox, so the
//     gateway and every process outside cannot be signalled or reached.
//     Landlock also refuses ptrace attach of a process outside the domain
//     (and with it process_vm_readv and pidfd_getfd);
//   - installs a seccomp filter (amd64, arm64) that refuses sockets of any
//     family but IPv4 and IPv6 (Unix sockets by path, netlink, packet),
//     datagram socket pairs and io_uring (see seccomp_linux.go).
//
// For bash and command tools the gateway also asks for supervision: the
// launcher then stays as the tool's parent, kills the tool's process group
// and cgroup when the gateway dies, and confines nothing of its own: it
// starts a second launcher that confines itself and executes the tool, so
// that no process outside the tool's Landlock domain shares an address
// space with it and the supervisor, outside the domain and not dumpable,
// cannot be ptraced, read or robbed of its descriptors by the tool.
//
// A refusal the launcher meets before the exec (a rule it cannot apply) is
// written to stderr prefixed "backplane sandbox:" and it exits 126: the
// tool did not run.
package sandbox

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbackplane/backplane/sandbox"
)

// LauncherArg is the hidden first argument that makes the binary the
// launcher.
const LauncherArg = "__backplane-sandbox"

// ExitLauncher is the launcher's exit status when it could not confine
// itself or execute the tool.
const ExitLauncher = 126

// MinABI is the Landlock ABI the sandbox needs: 6 is the first with the
// signal and abstract socket scopes (Linux 6.12).
const MinABI = 6

// The options of a confinement are package sandbox's (the public one, so
// that other modules and config name them without this mechanism); these
// aliases keep this package's code and tests in its own words.
type (
	Policy  = sandbox.Policy
	Network = sandbox.Network
	Limits  = sandbox.Limits
	Status  = sandbox.Status
)

// DefaultLimits are the limits of a policy that sets none.
var DefaultLimits = sandbox.DefaultLimits

// confinement is a Policy as the launcher gets it: with the call's cgroups
// that Wrap made, which are the mechanism's and no option of a caller's.
// Its JSON is the policy's members and these two beside.
type confinement struct {
	Policy
	// Cgroup is the pids cgroup folder the launcher joins.
	Cgroup string `json:"cgroup,omitempty"`
	// MemoryCgroup is the memory cgroup folder the launcher joins; with
	// one, Limits.AddressSpace is enforced there, for the call's processes
	// together, instead of as each one's RLIMIT_AS.
	MemoryCgroup string `json:"memory_cgroup,omitempty"`
}

var (
	statusOnce sync.Once
	status     Status
)

// Probe reports what the kernel offers (asked once).
func Probe() Status {
	statusOnce.Do(func() { status = probe() })
	return status
}

// launchSpec is what the launcher is told, as JSON in a memory file whose
// descriptor number is its only argument: never in its argv, which every
// local user can read (ps, /proc/PID/cmdline).
type launchSpec struct {
	// Policy confines the tool; nil: no confinement.
	Policy *confinement `json:"policy,omitempty"`
	// Path is the tool's program, Argv its argv.
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	// Lifeline is the fd of the read end of a pipe whose write end only
	// the gateway holds: the launcher stays as the tool's parent (a
	// supervisor, itself unconfined and not dumpable, outside the tool's
	// Landlock domain) and, when the pipe reads EOF (the gateway is gone),
	// kills the tool's whole process group and cgroup. 0: the launcher
	// confines itself and executes the tool in its place.
	Lifeline int `json:"lifeline,omitempty"`
}

// Wrap rewrites cmd to run through the launcher: confined by p when p is
// not nil, and with isolate (Linux) supervised by it: the launcher stays
// as the tool's parent and kills the tool's whole process group when the
// gateway dies (see launchSpec.Lifeline). With neither, cmd is left as it
// is. The
// program must already be resolved (exec.Command did) and is granted read
// and execute. The returned cleanup removes the call's cgroup, killing
// whatever is left in it; call it once the process is reaped.
func Wrap(cmd *exec.Cmd, p *Policy, isolate bool) (cleanup func(), err error) {
	cleanup = func() {}
	if p != nil {
		if st := Probe(); !st.Available {
			return nil, fmt.Errorf("sandbox unavailable: %s", st.Reason)
		}
	}
	isolate = isolate && supervisable()
	if p == nil && !isolate {
		return cleanup, nil
	}
	spec := launchSpec{Path: cmd.Path, Argv: cmd.Args}
	if p != nil {
		q := confinement{Policy: *p}
		q.Read = slices.Clone(p.Read)
		prog := cmd.Path
		if !filepath.IsAbs(prog) {
			if prog, err = filepath.Abs(filepath.Join(cmd.Dir, prog)); err != nil {
				return nil, err
			}
		}
		q.Read = append(q.Read, prog)
		q.Cgroup, q.MemoryCgroup = newCgroups(q.Limits)
		cleanup = func() {
			removeCgroup(q.Cgroup)
			removeCgroup(q.MemoryCgroup)
		}
		spec.Policy = &q
	}
	if isolate {
		spec.Lifeline = isolateAttr(cmd)
	}
	f, err := specFile(&spec)
	if err != nil {
		cleanup()
		return nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	fd := 2 + len(cmd.ExtraFiles)
	rm := cleanup
	cleanup = func() {
		f.Close()
		rm()
	}
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{"backplane-sandbox", LauncherArg, strconv.Itoa(fd)}
	return cleanup, nil
}

// ErrStateInside is returned by CheckState for a state path a grant covers.
var ErrStateInside = errors.New("gateway state inside the sandbox's grants")

// CheckState refuses a policy whose grants cover one of the gateway's
// state paths (store, configuration, audit log): Landlock grants whole
// hierarchies, so such a path cannot be cut out of a grant.
func CheckState(p *Policy, state []string) error {
	grants := append(slices.Clone(p.Write), p.Read...)
	grants = append(grants, systemDirs...)
	for _, s := range state {
		if s == "" {
			continue
		}
		sa := realish(s)
		for _, g := range grants {
			ga := realish(g)
			if within(sa, ga) {
				return fmt.Errorf("%w: %s is inside %s; move the state out or grant a narrower folder", ErrStateInside, s, g)
			}
		}
	}
	return nil
}

// realish is the absolute, symlink-resolved path, as far as it exists.
func realish(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if r, err := filepath.EvalSymlinks(a); err == nil {
		return r
	}
	// Resolve the existing parent: a file not yet created.
	if r, err := filepath.EvalSymlinks(filepath.Dir(a)); err == nil {
		return filepath.Join(r, filepath.Base(a))
	}
	return a
}

func within(p, dir string) bool {
	if p == dir {
		return true
	}
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// systemDirs get read and execute.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// procFiles get read. /proc as a whole is not granted: on the kernels
// tried (Linux 6.18), Landlock's ptrace scoping refuses PTRACE_ATTACH of a
// process outside the domain but not the read-mode access that guards
// /proc/<pid>/environ, so another process's environment (the gateway's,
// with its tokens) would be readable. "/proc/self" is resolved by the
// launcher, before the exec, to its own /proc/<pid>, which the tool keeps.
var procFiles = []string{"/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/uptime", "/proc/loadavg", "/proc/version", "/proc/filesystems"}

// etcFiles are the /etc entries programs commonly need; /etc as a whole is
// not granted (it holds secrets such as /etc/shadow, readable by root).
var etcFiles = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/passwd", "/etc/group",
	"/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/localtime", "/etc/timezone", "/etc/ssl", "/etc/ca-certificates", "/etc/pki",
	"/etc/gitconfig", "/etc/bash.bashrc", "/etc/profile", "/etc/inputrc", "/etc/terminfo",
	"/etc/mime.types", "/etc/os-release", "/etc/locale.alias", "/etc/protocols", "/etc/services",
	"/etc/alternatives", "/etc/magic", "/etc/nanorc", "/etc/environment",
}

// devFiles get read and write.
var devFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
