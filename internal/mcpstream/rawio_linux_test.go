package mcpstream

import (
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// A polled pipe is read and written with raw system calls, and reads and
// writes as os.File does: the bytes, a deadline, the end of the stream, a
// write larger than the pipe holds (waiting for room in the poller), and
// EPIPE once the reader is gone.
func TestRawFileAsOSFile(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	rr, ww := rawReader(r), rawWriter(w)
	if _, ok := rr.(*rawFile); !ok {
		t.Fatalf("a polled pipe's reader is a %T, not read raw", rr)
	}
	if _, ok := ww.(*rawFile); !ok {
		t.Fatalf("a polled pipe's writer is a %T, not written raw", ww)
	}

	r.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	buf := make([]byte, 4)
	if _, err := rr.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of an empty pipe past its deadline: %v", err)
	}
	r.SetReadDeadline(time.Time{})

	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: many pipefuls
	got := make(chan []byte)
	go func() {
		data, _ := io.ReadAll(io.LimitReader(rr, int64(len(big))))
		got <- data
	}()
	if n, err := ww.Write(big); err != nil || n != len(big) {
		t.Fatalf("wrote %d of %d: %v", n, len(big), err)
	}
	if data := <-got; !bytes.Equal(data, big) {
		t.Fatalf("read %d bytes, not what was written", len(data))
	}

	w.Close()
	if n, err := rr.Read(buf); err != io.EOF {
		t.Fatalf("read after the writer closed: %d, %v; want EOF", n, err)
	}

	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	r2.Close()
	if _, err := rawWriter(w2).Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a pipe without a reader: %v, want EPIPE", err)
	}
}

// Unclosed's Close interrupts a raw read blocked in the poller.
func TestRawReadEndsAtUnclosedClose(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	u := Unclosed(r)
	rr := rawReader(u)
	if _, ok := rr.(*rawFile); !ok {
		t.Fatalf("Unclosed's pipe is read as a %T, not raw", rr)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rr.Read(make([]byte, 8))
		done <- err
	}()
	u.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the interrupted read returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not interrupt the raw read")
	}
}

// A blocking file is left to os.File: a raw call on it would block its
// thread with the P held.
func TestRawIOLeavesBlockingFiles(t *testing.T) {
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	defer r.Close()
	defer w.Close()
	if got := rawReader(r); got != io.Reader(r) {
		t.Fatalf("a blocking pipe is read as a %T", got)
	}
	if got := rawWriter(w); got != io.Writer(w) {
		t.Fatalf("a blocking pipe is written as a %T", got)
	}
}
