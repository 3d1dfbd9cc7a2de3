//go:build unix

package main

import (
	"os"
	"syscall"
	"time"
)

// polledStdin returns f, when it is a pipe or a socket the Go runtime does
// not poll, as a file the runtime polls instead of reading it with a
// blocking read(2).
//
// Why: Go 1.26's runtime can stall a stop-the-world behind a goroutine
// that is entering a blocking read (issue 14's stall, docs/mcp.md): with
// serve --stdio, the collector would then wait until the client writes
// again, and a client waiting for an answer never does. A polled read
// parks the goroutine instead of blocking its thread, so no
// stop-the-world waits for it (the reproducer is internal/mcpbench's
// TestGoStdinStall). A terminal or a regular file is left as it is:
// O_NONBLOCK on a terminal would reach the shell that shares it.
//
// The polled file reads a duplicate of f's descriptor, so closing it does
// not close f's: two *os.File owning one descriptor number would close it
// twice, the second time closing whatever reused the number.
func polledStdin(f *os.File) *os.File {
	if f.SetReadDeadline(time.Time{}) == nil {
		return f // polled already (an os.Pipe, say)
	}
	var st syscall.Stat_t
	fd := int(f.Fd()) // f is blocking: Fd leaves it as it is
	if syscall.Fstat(fd, &st) != nil {
		return f
	}
	if kind := st.Mode & syscall.S_IFMT; kind != syscall.S_IFIFO && kind != syscall.S_IFSOCK {
		return f
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return f
	}
	syscall.CloseOnExec(dup)
	if syscall.SetNonblock(dup, true) != nil {
		syscall.Close(dup)
		return f
	}
	// os.NewFile sees the descriptor non-blocking and registers it with
	// the runtime's poller.
	return os.NewFile(uintptr(dup), f.Name())
}
