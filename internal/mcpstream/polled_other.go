//go:build !unix

package mcpstream

import "os"

// Polled returns f unchanged where the runtime's poller does not take
// pipes (see polled_unix.go).
func Polled(f *os.File) *os.File { return f }
