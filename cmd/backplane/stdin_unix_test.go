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
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		t.Fatal(err)
	}
	r := os.NewFile(uintptr(fds[0]), "stdin")
	w := os.NewFile(uintptr(fds[1]), "client")
	defer w.Close()
	if err := r.SetReadDeadline(time.Now()); !errors.Is(err, os.ErrNoDeadline) {
		t.Fatalf("the test's pipe should start blocking (no deadlines), SetReadDeadline: %v", err)
	}
	p := polledStdin(r)
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
