//go:build !linux

package procsup

import "syscall"

// Without Linux's parent-death signal, a process whose gateway is killed
// stops when it sees its pipes close, if it does.
func setPdeathsig(*syscall.SysProcAttr) {}
