package mcpbench

import (
	"os"
	"os/exec"
	"runtime/debug"
	"testing"
	"time"
)

// goStallEnv, set to a duration, makes TestGoStdinStall run.
const goStallEnv = "BACKPLANE_GOSTALL"

// goStallChildEnv makes this test binary the child of TestGoStdinStall.
const goStallChildEnv = "BACKPLANE_GOSTALL_CHILD"

// TestGoStdinStall is the stall of issue 14 without MCP: a child process
// answers each byte of its stdin (a blocking pipe) with one byte, after an
// allocation of 32 KiB (what the Go SDK's JSON decoder allocates per
// message), at a low GOGC; its reader enters the next read at a random
// moment of that work. With Go 1.26.8 the child's stop-the-world sometimes
// waits for that read, so the answer waits for the next byte of stdin: the
// test fails, saying how long the stall lasted and that one more byte
// ended it (measured: a stall after 133,480 and 495,384 round trips, over
// 12 s, ended 0.2 and 1.8 ms after the extra byte). It passes on a runtime
// without the race; backend/upstream's nudge (nudge.go) is then no longer
// needed for Go servers. Minutes on a busy 2-core machine:
//
//	BACKPLANE_GOSTALL=3m go test -run TestGoStdinStall -v ./internal/mcpbench
func TestGoStdinStall(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv(goStallEnv))
	if err != nil {
		t.Skip(goStallEnv + " is not set to a duration")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), goStallChildEnv+"=1")
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	got := make(chan struct{})
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := r.Read(b); err != nil {
				close(got)
				return
			}
			got <- struct{}{}
		}
	}()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		if _, err := w.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			continue
		case <-time.After(10 * time.Second):
		}
		t.Errorf("the child has not answered byte %d for 10 s (GOTRACEBACK=all and SIGQUIT it to see it 'stopping the world')", n)
		t0 := time.Now()
		w.Write([]byte{'y'})
		select {
		case <-got:
			t.Errorf("one more byte on its stdin, and it answered %v later", time.Since(t0))
		case <-time.After(10 * time.Second):
			t.Errorf("one more byte did not end it either")
		}
		return
	}
	t.Logf("%d round trips, no stall", n)
}

// goStallChild is the child of TestGoStdinStall.
func goStallChild() {
	debug.SetGCPercent(1)
	in := make(chan byte)
	go func() {
		b := make([]byte, 1)
		x := uint32(1)
		for {
			if _, err := os.Stdin.Read(b); err != nil {
				os.Exit(0)
			}
			in <- b[0]
			// Enter the next read at a random moment of the other
			// goroutine's allocation (xorshift: no lock, no allocation).
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			for i := uint32(0); i < x%4000; i++ {
				goStallSpin++
			}
		}
	}()
	for c := range in {
		goStallSink = make([]byte, 32<<10)
		os.Stdout.Write([]byte{c})
	}
}

var (
	goStallSink []byte
	goStallSpin int
)
