//go:build !linux

package mcp

import "syscall"

// procAttr puts a server in its own process group. (Without Linux's
// parent-death signal, a server whose gateway is killed stops when it sees
// its stdin close, if it does.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
