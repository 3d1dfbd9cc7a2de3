//go:build unix

package mcpstream_test

import (
	"errors"
	"io"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/internal/mcpstream"
)

// A blocking pipe, as a parent process hands serve --stdio its stdin, comes
// back as a file the runtime polls: read deadlines work on it (they do not
// on a blocking file), a read still gets the bytes written, and the end of
// the writer is the end of the stream.
func TestPolledPipe(t *testing.T) {
	r, w := blockingPipe(t)
	if err := r.SetReadDeadline(time.Now()); !errors.Is(err, os.ErrNoDeadline) {
		t.Fatalf("the test's pipe should start blocking (no deadlines), SetReadDeadline: %v", err)
	}
	p := mcpstream.Polled(r)
	if p == r {
		t.Fatal("a blocking pipe was returned as it is")
	}
	defer p.Close()
	if err := p.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatalf("Polled's file does not take a read deadline: %v", err)
	}
	buf := make([]byte, 8)
	if _, err := p.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of an empty polled pipe: %v, want the deadline", err)
	}
	p.SetReadDeadline(time.Time{})
	if _, err := w.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Read(buf); err != nil || string(buf[:n]) != "{}\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	w.Close()
	if n, err := p.Read(buf); err != io.EOF {
		t.Fatalf("read after the writer closed: %q, %v; want EOF", buf[:n], err)
	}
}

// On Linux the pipe is opened again (a description of its own): the
// inherited description, which the processes that handed stdin down
// share, stays blocking.
func TestPolledLeavesTheSharedDescriptionBlocking(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux opens the pipe again (/proc/self/fd); elsewhere the duplicate shares the description")
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("/proc is not mounted: " + err.Error())
	}
	r, _ := blockingPipe(t)
	p := mcpstream.Polled(r)
	defer p.Close()
	if p == r {
		t.Fatal("a blocking pipe was returned as it is")
	}
	if nb, err := nonblocking(r); err != nil || nb {
		t.Fatalf("the inherited description is non-blocking now (%v, %v)", nb, err)
	}
}

// A regular file is left as it is (only pipes and sockets are polled).
func TestPolledRegularFile(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := mcpstream.Polled(f); got != f {
		t.Fatal("a regular file was replaced")
	}
}

// A socket (which /proc/self/fd cannot open) takes the duplicate
// descriptor, polled.
func TestPolledSocket(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "client")
	t.Cleanup(func() { r.Close(); w.Close() })
	p := mcpstream.Polled(r)
	if p == r {
		t.Fatal("a blocking socket was returned as it is")
	}
	defer p.Close()
	if err := p.SetReadDeadline(time.Time{}); err != nil {
		t.Fatalf("Polled's socket does not take a read deadline: %v", err)
	}
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if n, err := p.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

// The polled file owns a descriptor of its own: closing it leaves the
// original open (one descriptor number closed twice would close whatever
// reused it: a test's temporary folder, a listener).
func TestPolledClosesItsOwnDescriptor(t *testing.T) {
	r, _ := blockingPipe(t)
	p := mcpstream.Polled(r)
	if p.Fd() == r.Fd() {
		t.Fatalf("the polled file reads descriptor %d, the original's", p.Fd())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(r.Fd()), &st); err != nil {
		t.Fatalf("the original descriptor was closed with the polled file: %v", err)
	}
}

// A file the runtime polls already (os.Pipe's) is returned as it is.
func TestPolledPolledAlready(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := mcpstream.Polled(r); got != r {
		t.Fatal("a polled pipe was replaced")
	}
}

// blockingPipe is a pipe whose ends the runtime does not poll, as a parent
// process hands serve --stdio its stdin; both are closed when the test ends.
func blockingPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "client")
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// nonblocking reports whether f's open file description is non-blocking
// (fcntl F_GETFL, which leaves f as it is, unlike f.Fd).
func nonblocking(f *os.File) (bool, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var flags uintptr
	var errno syscall.Errno
	if err := sc.Control(func(fd uintptr) {
		flags, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	}); err != nil {
		return false, err
	}
	if errno != 0 {
		return false, errno
	}
	return flags&syscall.O_NONBLOCK != 0, nil
}

// A blocking pipe as stdout is written through a polled description of its
// own on Linux (the inherited one stays blocking); Close leaves the
// original open; a write once the reader is gone fails with EPIPE (made on
// the original: on fd 1 the runtime then raises SIGPIPE, as before).
func TestPolledOutputPipe(t *testing.T) {
	r, w := blockingPipe(t)
	out := mcpstream.PolledOutput(w)
	if _, err := out.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "{}\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if runtime.GOOS == "linux" {
		if nb, err := nonblocking(w); err != nil || nb {
			t.Fatalf("the inherited stdout is non-blocking now (%v, %v)", nb, err)
		}
	}
	r.Close()
	if _, err := out.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write without a reader: %v, want EPIPE", err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatalf("Close closed the original stdout: %v", err)
	}
}

// A regular file as stdout is written as it is, and Close leaves it open.
func TestPolledOutputRegularFile(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := mcpstream.PolledOutput(f)
	if _, err := out.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if _, err := f.Write([]byte("!")); err != nil {
		t.Fatalf("Close closed the file: %v", err)
	}
}
