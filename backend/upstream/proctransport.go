package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/internal/procsup"
)

// procTransport is the SDK's CommandTransport, framed by package mcpstream
// (one standard-library decode per message), with the start done by
// package procsup: its own process group, the parent-death signal from the
// thread that lives as long as the gateway, the sandbox launcher when the
// server has a policy. Closing follows the MCP stdio shutdown: stdin
// closed, then SIGTERM, then SIGKILL.
type procTransport struct {
	cmd       *exec.Cmd
	group     *procsup.Group // cmd's
	cleanup   func()         // the sandbox's, once the process is reaped
	terminate time.Duration
	onDropped func(error) // told of each line of stdout dropped
}

func (t *procTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.group.Start(); err != nil {
		return nil, err
	}
	w := &procStdin{WriteCloser: stdin, cmd: t.cmd, group: t.group, terminate: t.terminate, cleanup: t.cleanup}
	// A line the server writes that cannot be read fails only the request
	// whose id it carries, or is dropped (onDropped) when it carries none;
	// never the connection and every call in flight on it (issue 22, item
	// 8), as the SDK's own transport would. A torn line still ends it
	// (supervise reconnects). Wait closes stdout (Unclosed: closing the
	// connection only ends a blocked read); it is a pipe Go polls, which
	// the connection's Read reads itself, with no goroutine hand-off per
	// message.
	return mcpstream.New(mcpstream.Unclosed(stdout), w, &mcpstream.Options{OnDropped: t.onDropped}).Connect(ctx)
}

// procStdin closes the connection by closing stdin and waiting for the
// process to end, hastening it with SIGTERM and SIGKILL. Its process
// group is killed before the reap (procsup.Group), so what it left running
// in the background ends with it.
type procStdin struct {
	io.WriteCloser
	cmd       *exec.Cmd
	group     *procsup.Group
	terminate time.Duration
	cleanup   func()
}

// SyscallConn and SetWriteDeadline are those of stdin (exec's pipe, which
// the runtime polls), so that the connection writes it with raw system
// calls (package mcpstream, rawio_linux.go).
func (s *procStdin) SyscallConn() (syscall.RawConn, error) {
	if f, ok := s.WriteCloser.(interface {
		SyscallConn() (syscall.RawConn, error)
	}); ok {
		return f.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

func (s *procStdin) SetWriteDeadline(t time.Time) error {
	if f, ok := s.WriteCloser.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return f.SetWriteDeadline(t)
	}
	return os.ErrNoDeadline
}

func (s *procStdin) Close() error {
	defer s.cleanup()
	cerr := s.WriteCloser.Close()
	res := make(chan error, 1)
	go func() { res <- s.group.Wait() }()
	wait := func(d time.Duration) (error, bool) {
		select {
		case err := <-res:
			return err, true
		case <-time.After(d):
			return nil, false
		}
	}
	if err, ok := wait(s.terminate); ok {
		return errors.Join(cerr, err)
	}
	// Signal goes through the process's pidfd: never to a reused pid.
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		if err, ok := wait(s.terminate); ok {
			return err
		}
	}
	s.group.Kill()
	if err, ok := wait(s.terminate); ok {
		return err
	}
	return fmt.Errorf("the server did not end after SIGKILL")
}
