//go:build linux

package sandbox

import "golang.org/x/sys/unix"

// amd64: system calls of the x32 ABI carry bit 30 in their number.
var nativeArch = seccompArch{
	audit: unix.AUDIT_ARCH_X86_64, socket: unix.SYS_SOCKET, socketpair: unix.SYS_SOCKETPAIR,
	uringSetup: unix.SYS_IO_URING_SETUP, uringEnter: unix.SYS_IO_URING_ENTER, uringRegister: unix.SYS_IO_URING_REGISTER,
	x32Limit: 0x40000000,
}
