package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter of a sandboxed tool. Landlock before ABI 9 does not
// cover connecting to a Unix socket by path (a PostgreSQL store's
// /var/run/postgresql/.s.PGSQL.5432, serve's control socket): the filter
// refuses creating any socket but IPv4 and IPv6 ones (Landlock's TCP rules
// then apply), with EACCES, so Unix, netlink, packet and every other family
// are out of reach. socketpair stays for stream and seqpacket pairs
// (libuv, Python, subprocess plumbing): such a pair is connected already
// and cannot send to a path, which a datagram pair could (sendto). io_uring
// is refused (ENOSYS) because its operations create and connect sockets
// without the system calls the filter sees. A system call of another ABI
// than the native one (i386 through int 0x80 on amd64, x32, arm32 compat)
// is refused (ENOSYS) wholesale: their socketcall and numbers would slip
// past the checks. Argument words are compared on their low 32 bits, which
// are all the kernel reads of an int.

// seccompArch is the native architecture's audit word and system call
// numbers; zero on architectures the filter does not know.
type seccompArch struct {
	audit                   uint32
	socket, socketpair      uint32
	uringSetup, uringEnter  uint32
	uringRegister, x32Limit uint32
}

// seccompUsable reports whether the filter can be installed here.
func seccompUsable() (bool, string) {
	if nativeArch.audit == 0 {
		return false, "the seccomp filter knows amd64 and arm64 only, not " + runtime.GOARCH
	}
	action := uint32(unix.SECCOMP_RET_ERRNO)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
		return false, "this kernel has no seccomp filters: " + e.Error()
	}
	return true, ""
}

// bpf is a tiny assembler: jumps name their targets by label.
type bpf struct {
	prog   []unix.SockFilter
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at     int
	jt, jf string
}

func (b *bpf) label(name string) { b.labels[name] = len(b.prog) }

func (b *bpf) stmt(code uint16, k uint32) {
	b.prog = append(b.prog, unix.SockFilter{Code: code, K: k})
}

// jump compares the accumulator with k: to jt when true, jf when false
// ("" is the next instruction).
func (b *bpf) jump(code uint16, k uint32, jt, jf string) {
	b.fixups = append(b.fixups, fixup{len(b.prog), jt, jf})
	b.stmt(code, k)
}

func (b *bpf) assemble() ([]unix.SockFilter, error) {
	for _, f := range b.fixups {
		for _, j := range []struct {
			name string
			dst  *uint8
		}{{f.jt, &b.prog[f.at].Jt}, {f.jf, &b.prog[f.at].Jf}} {
			if j.name == "" {
				continue
			}
			to, ok := b.labels[j.name]
			off := to - f.at - 1
			if !ok || off < 0 || off > 255 {
				return nil, fmt.Errorf("seccomp: bad jump to %q", j.name)
			}
			*j.dst = uint8(off)
		}
	}
	return b.prog, nil
}

const (
	ldAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	andK   = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	retK   = unix.BPF_RET | unix.BPF_K
	sockTy = 0xf // SOCK_TYPE_MASK: the rest of socket's type are flags
)

// struct seccomp_data: nr, arch, instruction pointer, then six 64-bit
// arguments; the low word of an argument is first (little-endian: amd64
// and arm64 both).
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
)

func seccompFilter(a seccompArch) ([]unix.SockFilter, error) {
	b := &bpf{labels: map[string]int{}}
	b.stmt(ldAbs, offArch)
	b.jump(jeqK, a.audit, "", "nosys")
	b.stmt(ldAbs, offNr)
	b.jump(jgeK, a.x32Limit, "nosys", "")
	b.jump(jeqK, a.socket, "socket", "")
	b.jump(jeqK, a.socketpair, "socketpair", "")
	b.jump(jeqK, a.uringSetup, "nosys", "")
	b.jump(jeqK, a.uringEnter, "nosys", "")
	b.jump(jeqK, a.uringRegister, "nosys", "")
	b.stmt(retK, unix.SECCOMP_RET_ALLOW)

	b.label("socket")
	b.stmt(ldAbs, offArg0)
	b.jump(jeqK, unix.AF_INET, "allow", "")
	b.jump(jeqK, unix.AF_INET6, "allow", "")
	b.stmt(retK, unix.SECCOMP_RET_ERRNO|uint32(unix.EACCES))

	b.label("socketpair")
	b.stmt(ldAbs, offArg1)
	b.stmt(andK, sockTy)
	b.jump(jeqK, unix.SOCK_STREAM, "allow", "")
	b.jump(jeqK, unix.SOCK_SEQPACKET, "allow", "")
	b.stmt(retK, unix.SECCOMP_RET_ERRNO|uint32(unix.EACCES))

	b.label("allow")
	b.stmt(retK, unix.SECCOMP_RET_ALLOW)
	b.label("nosys")
	b.stmt(retK, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	return b.assemble()
}

// installSeccomp installs the filter on this thread (no_new_privs is set
// already); it does nothing where the filter cannot be had (the gateway
// decided at start whether to run so, see Status.UnixSockets).
func installSeccomp() error {
	if ok, _ := seccompUsable(); !ok {
		return nil
	}
	prog, err := seccompFilter(nativeArch)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("seccomp filter: %w", e)
	}
	runtime.KeepAlive(prog)
	return nil
}
