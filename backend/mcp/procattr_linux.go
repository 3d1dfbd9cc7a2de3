package mcp

import "syscall"

// procAttr puts a server in its own process group and has the kernel kill
// it when the gateway dies, even by SIGKILL: a server outlives no gateway.
// (The signal follows the death of the thread that started it; the Go
// runtime does not end its threads while the process lives, except those
// of goroutines that lock one and exit, which nothing here does.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
