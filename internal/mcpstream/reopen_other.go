//go:build unix && !linux

package mcpstream

import "syscall"

// reopen is Linux's alone (/proc/self/fd): elsewhere Polled takes a
// duplicate descriptor.
func reopen(int, *syscall.Stat_t, int) (int, bool) { return -1, false }
