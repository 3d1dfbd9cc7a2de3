//go:build unix

package mcpbench

import (
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/internal/mcpstream"
)

// stdioPipes returns the two pipes between the benchmark's client and the
// gateway's server as `backplane serve --stdio` has them: the server's
// ends (inR, outW) as a client process hands them down, blocking
// descriptors the runtime does not poll, taken through mcpstream.Polled
// and mcpstream.PolledOutput exactly as serve's stdinOf and stdoutOf take
// them (cmd/backplane/serve.go); the client's ends
// (inW, outR) polled, as os.Pipe's are (the direct leg's client reads its
// upstream's pipes from exec.Cmd, polled). Every end is closed when b
// ends.
func stdioPipes(b testing.TB) (inR io.ReadCloser, inW io.WriteCloser, outR io.ReadCloser, outW io.WriteCloser) {
	b.Helper()
	in, clientIn := pipe(b, false, true)   // client -> server
	clientOut, out := pipe(b, true, false) // server -> client
	return mcpstream.Polled(in), clientIn, clientOut, mcpstream.PolledOutput(out)
}

// pipe is a pipe whose read and write ends are non-blocking (which the
// runtime then polls) as asked, closed when b ends.
func pipe(b testing.TB, pollRead, pollWrite bool) (r, w *os.File) {
	b.Helper()
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		b.Fatal(err)
	}
	for i, poll := range []bool{pollRead, pollWrite} {
		syscall.CloseOnExec(fds[i])
		if err := syscall.SetNonblock(fds[i], poll); err != nil {
			b.Fatal(err)
		}
	}
	// os.NewFile polls a descriptor it finds non-blocking.
	r, w = os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "stdout")
	b.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// The server's stdin in the gateway legs reads as serve's does: polled,
// with read deadlines, so that its connection reads it directly
// (mcpstream's package doc).
func TestStdioPipesAsServe(t *testing.T) {
	inR, _, _, _ := stdioPipes(t)
	d, ok := inR.(interface{ SetReadDeadline(time.Time) error })
	if !ok {
		t.Fatalf("the server's stdin is a %T, without read deadlines", inR)
	}
	if err := d.SetReadDeadline(time.Time{}); err != nil {
		t.Fatalf("the server's stdin refuses read deadlines: %v", err)
	}
}
