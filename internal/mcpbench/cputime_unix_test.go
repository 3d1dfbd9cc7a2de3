//go:build unix

package mcpbench

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used: the
// benchmark's client and, in the gateway legs, the whole gateway, but not
// the upstream process.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
