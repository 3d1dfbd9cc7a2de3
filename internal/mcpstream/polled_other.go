//go:build !unix

package mcpstream

import (
	"io"
	"os"
)

// Polled returns f unchanged where the runtime's poller does not take
// pipes (see polled_unix.go).
func Polled(f *os.File) *os.File { return f }

// PolledOutput returns f, whose Close leaves f open (see polled_unix.go).
func PolledOutput(f *os.File) io.WriteCloser { return nopCloser{f} }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
