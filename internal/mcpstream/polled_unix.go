//go:build unix

package mcpstream

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// Polled returns f, when it is a pipe, a FIFO or a socket that the Go
// runtime does not poll (a process's inherited stdin), as a file the
// runtime polls: one with read deadlines, which a connection then reads
// itself, without a reading goroutine in between (see the package doc),
// and whose reads park a goroutine rather than block a thread. f itself is
// left open and unchanged; closing the file returned closes only its own
// descriptor. Anything else (a terminal, a regular file, a file polled
// already, and any error on the way) comes back as f.
//
// Why not merely make f's descriptor non-blocking: O_NONBLOCK belongs to
// the open file description, which the processes that handed f down share
// (a shell's pipeline, a wrapper script that runs something after serve):
// they would find it non-blocking too, and a program that reads it after
// serve exits would get EAGAIN. On Linux a pipe or FIFO is opened again
// through /proc/self/fd, which makes a description of its own, the same
// pipe's; a socket cannot be opened so, and takes the duplicate (or /proc
// is not mounted, or refuses): that fallback does set O_NONBLOCK on the
// shared description, as serve --stdio did before.
func Polled(f *os.File) *os.File {
	if f.SetReadDeadline(time.Time{}) == nil {
		return f // polled already (an os.Pipe, say)
	}
	var st syscall.Stat_t
	fd := int(f.Fd()) // f is blocking: Fd leaves it as it is
	if syscall.Fstat(fd, &st) != nil {
		return f
	}
	kind := st.Mode & syscall.S_IFMT
	if kind != syscall.S_IFIFO && kind != syscall.S_IFSOCK {
		return f
	}
	if kind == syscall.S_IFIFO {
		if own, ok := reopen(fd, &st, syscall.O_RDONLY); ok {
			// os.NewFile sees the descriptor non-blocking and registers
			// it with the runtime's poller.
			return os.NewFile(uintptr(own), f.Name())
		}
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
	return os.NewFile(uintptr(dup), f.Name())
}

// PolledOutput returns a writer of f, a process's stdout, for [New]: when
// f is a pipe or FIFO, its own non-blocking description of it (opened
// again, as [Polled] does; Linux only), which the runtime polls and the
// connection writes with raw system calls (a write waits for room in the
// poller, not in a blocked thread). Its Close closes only that
// description, never f. A write the pipe refuses with EPIPE (its reader
// is gone) is made again on f, so that it fails as a write of f would:
// on stdout, the Go runtime then ends the process with SIGPIPE, as before.
// Anything else (a terminal, a file, a socket, an error on the way)
// writes f itself, and Close leaves f open.
func PolledOutput(f *os.File) io.WriteCloser {
	var st syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nopCloser{f}
	}
	own, ok := reopen(int(f.Fd()), &st, syscall.O_WRONLY)
	if !ok {
		return nopCloser{f}
	}
	p := os.NewFile(uintptr(own), f.Name())
	return &polledOutput{own: p, w: rawWriter(p), orig: f}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// polledOutput writes its own description of a pipe (see PolledOutput).
type polledOutput struct {
	own  *os.File
	w    io.Writer // own, written raw where the platform can
	orig *os.File
}

func (p *polledOutput) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		m, err := p.orig.Write(b[n:])
		return n + m, err
	}
	return n, err
}

func (p *polledOutput) Close() error { return p.own.Close() }
