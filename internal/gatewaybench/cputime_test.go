package gatewaybench

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user and system) this process has used so
// far: the callers, the gateway and the store's writer, but not a database
// server.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU used since start per op, as cpu-ns/op:
// on a shared machine, where throughput swings with the load, the CPU an
// op costs is the steadier figure.
func reportCPU(b *testing.B, start time.Duration) {
	if start > 0 && b.N > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}
