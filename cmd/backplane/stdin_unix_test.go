//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// A blocking pipe, as a parent process hands serve --stdio its stdin, comes
// back as a file the runtime polls: read deadlines work on it (they do not
// on a blocking file), and a read still gets the bytes written.
func TestPolledStdinPipe(t *testing.T) {
	r, w := blockingPipe(t)
	if err := r.SetReadDeadline(time.Now()); !errors.Is(err, os.ErrNoDeadline) {
		t.Fatalf("the test's pipe should start blocking (no deadlines), SetReadDeadline: %v", err)
	}
	p := polledStdin(r)
	if p == r {
		t.Fatal("a blocking pipe was returned as it is")
	}
	defer p.Close()
	if err := p.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatalf("polledStdin's file does not take a read deadline: %v", err)
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
}

// A regular file is left as it is (only pipes and sockets are polled).
func TestPolledStdinRegularFile(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := polledStdin(f); got != f {
		t.Fatal("a regular file was replaced")
	}
}

// The polled file owns a descriptor of its own: closing it leaves the
// original open (one descriptor number closed twice would close whatever
// reused it: a test's temporary folder, a listener).
func TestPolledStdinClosesItsOwnDescriptor(t *testing.T) {
	r, _ := blockingPipe(t)
	p := polledStdin(r)
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
func TestPolledStdinPolledAlready(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := polledStdin(r); got != r {
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
