// Package sandbox holds the options of a confined tool process: [Policy],
// what one process may read, write and connect to, and its resource
// [Limits]. backend/command's Spec.Sandbox, backend/builtin's bash and
// backend/upstream's upstream commands take one; a program that embeds
// Backplane confines a command tool with it:
//
//	p := &sandbox.Policy{Write: []string{workspace}, Limits: sandbox.DefaultLimits}
//	b, err := command.New(command.Spec{Argv: []string{"make", "test"}, Dir: workspace, Sandbox: p})
//
// This package is types only, and imports nothing of the mechanism, so
// that a package that only parses or describes a policy (as config should)
// need not link it. The mechanism, package internal/sandbox (Landlock, seccomp,
// cgroups and resource limits, applied by a launcher: docs/security.md),
// confines the process when the backend starts it. It needs nothing of the
// embedding program's main: the launcher is the program itself
// (/proc/self/exe) started with a hidden first argument, and takes over
// from its package's initialization, before main, in every program that
// can start a tool process.
//
// A policy is never relaxed to fit the kernel: where the kernel lacks the
// sandbox (Landlock ABI 6, Linux 6.12), the process is not started and the
// call fails as not run, with the reason. Landlock grants whole
// hierarchies: a grant that covers the gateway's own state (its store, its
// configuration, its audit log) lets the tool forge it, which serve's
// configuration refuses; an embedder keeps its store out of Read and Write.
package sandbox

import (
	"strconv"
	"strings"
)

// Policy is what one confined process may do, on top of reading and
// executing the system's folders (/usr, /bin, /sbin, /lib*, /opt), a short
// list of /etc files, its own /proc entries and its program, and reading
// and writing a few /dev files. It travels to the launcher as JSON.
type Policy struct {
	// Read are extra paths (folders or files, each with everything below
	// it) with read and execute.
	Read []string `json:"read,omitempty"`
	// Write are paths with read, write and execute: the workspace and
	// configured extras.
	Write []string `json:"write,omitempty"`
	// Network is what TCP the process may use.
	Network Network `json:"network"`
	// Limits are its resource limits.
	Limits Limits `json:"limits"`
}

// Network says what TCP a confined process may use.
type Network struct {
	// All leaves the network unrestricted.
	All bool `json:"all,omitempty"`
	// Ports are the TCP ports it may connect to (when not All); none: no
	// TCP at all. Binding a port is refused unless All.
	Ports []uint16 `json:"ports,omitempty"`
}

// String is how the network rule reads in logs and audit events.
func (n Network) String() string {
	switch {
	case n.All:
		return "all"
	case len(n.Ports) == 0:
		return "none"
	}
	var s []string
	for _, p := range n.Ports {
		s = append(s, strconv.Itoa(int(p)))
	}
	return "tcp connect " + strings.Join(s, ",")
}

// Limits bound a confined process; 0 leaves one unset.
type Limits struct {
	// CPUSeconds is RLIMIT_CPU.
	CPUSeconds uint64 `json:"cpu_seconds,omitempty"`
	// AddressSpace, in bytes, is the memory of the call's processes
	// together where the gateway can make a memory cgroup (root, cgroup
	// v1), else each process's RLIMIT_AS.
	AddressSpace uint64 `json:"address_space,omitempty"`
	// Processes is the call's pids cgroup limit where the gateway can make
	// one, else RLIMIT_NPROC (which the kernel does not apply to root).
	Processes uint64 `json:"processes,omitempty"`
	// FileSize, in bytes, is RLIMIT_FSIZE.
	FileSize uint64 `json:"file_size,omitempty"`
}

// DefaultLimits are the limits of a policy that sets none.
var DefaultLimits = Limits{
	CPUSeconds:   600,
	AddressSpace: 16 << 30,
	Processes:    256,
	FileSize:     1 << 30,
}

// Rules is a short description of p for logs, audit events and tools list.
func (p *Policy) Rules() map[string]any {
	return map[string]any{
		"write":   p.Write,
		"read":    p.Read,
		"network": p.Network.String(),
		"limits":  p.Limits,
	}
}

// AuditAttrs are the audit attributes of a process run under p (nil: not
// confined), which a backend puts on the events that settle its calls
// (backend.Auditor): "sandboxed", and "sandbox_rules" ([Policy.Rules]).
func AuditAttrs(p *Policy) []any {
	if p == nil {
		return []any{"sandboxed", false}
	}
	return []any{"sandboxed", true, "sandbox_rules", p.Rules()}
}

// Status says whether the kernel can sandbox (package internal/sandbox's
// Probe asks it).
type Status struct {
	// ABI is the Landlock ABI version, 0 when there is none.
	ABI int
	// Available reports ABI >= 6 on Linux.
	Available bool
	// Reason says why not, when not.
	Reason string
	// UnixSockets reports that sandboxed tools are kept from Unix sockets
	// by path (and from netlink, packet and every family but IPv4 and
	// IPv6): a seccomp filter, on the architectures the launcher knows.
	// Landlock of ABI < 9 does not cover connecting to a Unix socket.
	UnixSockets bool
	// UnixReason says why not, when not.
	UnixReason string
}
