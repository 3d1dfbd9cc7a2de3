package builtin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbackplane/backplane/internal/procsup"
	"github.com/agentbackplane/backplane/sandbox"
	"github.com/agentbackplane/backplane/tool"
)

type bashArgs struct {
	Command string `json:"command"`
	Timeout *int   `json:"timeout"` // seconds
}

// bashResult is what a bash call returns. When the command exits with a
// non-zero status, is killed by a signal, or runs out of time, the result is
// an IsError result and Error says why.
type bashResult struct {
	// ExitCode is the exit status, or 128+N when the shell was killed by
	// signal N (as a shell reports it): 137 after a timeout.
	ExitCode  int        `json:"exit_code"`
	Stdout    string     `json:"stdout"`
	Stderr    string     `json:"stderr"`
	Truncated bool       `json:"truncated"` // the middle of stdout or stderr was dropped
	TimedOut  bool       `json:"timed_out"`
	Error     *errorBody `json:"error,omitempty"`
}

func (s *Set) runBash(ctx context.Context, call *tool.Call) (*tool.Result, error) {
	var a bashArgs
	if err := decode(call.Arguments, &a); err != nil {
		return nil, err
	}
	timeout := s.bash.Timeout
	capped := false
	if a.Timeout != nil {
		if *a.Timeout < 1 {
			return nil, fail(tool.ClassValidation, "timeout %d: it is a number of seconds, at least 1", *a.Timeout)
		}
		if *a.Timeout > int(s.bash.MaxTimeout/time.Second) {
			timeout, capped = s.bash.MaxTimeout, true
		} else {
			timeout = time.Duration(*a.Timeout) * time.Second
		}
	}

	stdout := &headTail{max: s.bash.MaxOutputBytes}
	stderr := &headTail{max: s.bash.MaxOutputBytes}
	o, err := procsup.Run(ctx, &procsup.Spec{
		Argv: []string{"bash", "-c", a.Command},
		Dir:  s.ws,
		// The call's own TRACEPARENT and TRACESTATE, when it is traced.
		Env:     append(s.environ(), call.Trace.Env()...), // stdin: /dev/null
		Stdout:  stdout,
		Stderr:  stderr,
		Timeout: timeout,
		Sandbox: s.bash.Sandbox,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: bash could not be started: %w", tool.ErrNotStarted, err)
	}
	waitErr, timedOut := o.Wait, o.TimedOut
	if o.Ctx != nil {
		return nil, fmt.Errorf("bash: the call ended (%w) while the command ran; its process group was killed", o.Ctx)
	}
	if !o.Reaped {
		return nil, fmt.Errorf("bash: the shell did not end within %v of SIGKILL", procsup.ReapTimeout)
	}
	drained := o.Drained

	res := bashResult{
		Stdout:    stdout.String(),
		Stderr:    stderr.String(),
		Truncated: stdout.truncated() || stderr.truncated(),
		TimedOut:  timedOut,
	}
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		ws, _ := exitErr.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		} else {
			res.ExitCode = exitErr.ExitCode()
		}
		switch {
		case timedOut:
			msg := fmt.Sprintf("the command did not finish within %v; its process group was killed", timeout)
			if capped {
				msg += fmt.Sprintf(" (the timeout asked for, %ds, is capped at %v)", *a.Timeout, s.bash.MaxTimeout)
			}
			res.Error = &errorBody{Class: tool.ClassTimeout, Message: msg, Step: "invoke", Details: map[string]any{}}
		case ws.Signaled():
			res.Error = &errorBody{Class: tool.ClassExecutionFailure, Message: "the shell was killed by signal " + ws.Signal().String(), Step: "invoke", Details: map[string]any{}}
		default:
			res.Error = &errorBody{Class: tool.ClassExecutionFailure, Message: "exit status " + strconv.Itoa(res.ExitCode), Step: "invoke", Details: map[string]any{}}
		}
	default:
		return nil, fmt.Errorf("bash: %w", waitErr)
	}
	if timedOut && res.Error == nil {
		// It exited on its own just as the timer fired.
		res.TimedOut = false
	}
	if !drained {
		res.Truncated = true
		note := "stdout or stderr was still held open by a process outside the command's process group; output may be missing"
		if res.Error == nil {
			res.Error = &errorBody{Class: tool.ClassExecutionFailure, Message: note, Step: "invoke", Details: map[string]any{}}
		} else {
			res.Error.Message += "; " + note
		}
	}
	return &tool.Result{Content: marshal(res), IsError: res.Error != nil}, nil
}

// gitPins are set in every shell's environment, over the allowlist. git
// reads configuration from the workspace's .git/config, which the tool can
// often write, and "git status" runs core.fsmonitor as a command: these
// make git ignore the system-wide file and set core.fsmonitor to empty
// (off) above every configuration file (only "git -c" on the command line
// overrides them, and that is a different command to the policy). They do not
// stop the other keys a writable .git/config can use to run code (filter
// drivers, hooks, diff.external, ...): see docs/security.md.
var gitPins = []string{
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_CONFIG_COUNT=1",
	"GIT_CONFIG_KEY_0=core.fsmonitor",
	"GIT_CONFIG_VALUE_0=",
}

// pinned reports a name the allowlist may not pass: one gitPins sets, or
// one that changes how git reads them (a larger GIT_CONFIG_COUNT with more
// keys, GIT_CONFIG_PARAMETERS, GIT_CONFIG_SYSTEM, GIT_CONFIG_GLOBAL).
func pinned(name string) bool {
	return strings.HasPrefix(name, "GIT_CONFIG")
}

// environ is the shell's environment: the allowlisted variables that are set
// in the gateway's, then gitPins. Never nil: a nil exec.Cmd.Env would pass
// everything.
func (s *Set) environ() []string {
	env := make([]string, 0, len(s.bash.Env)+len(gitPins))
	for _, name := range s.bash.Env {
		if pinned(name) {
			continue
		}
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return append(env, gitPins...)
}

// headTail keeps the first and the last max/2 bytes of a stream, so that a
// long output still shows how it began and how it ended.
type headTail struct {
	max     int
	head    []byte
	tail    []byte // a ring would save copies; the tail is small
	dropped int64
}

func (h *headTail) Write(b []byte) (int, error) {
	h.write(b)
	return len(b), nil
}

func (h *headTail) write(b []byte) {
	headMax := h.max - h.max/2
	if room := headMax - len(h.head); room > 0 {
		k := min(room, len(b))
		h.head = append(h.head, b[:k]...)
		b = b[k:]
	}
	if len(b) == 0 {
		return
	}
	tailMax := h.max / 2
	h.tail = append(h.tail, b...)
	if over := len(h.tail) - tailMax; over > 0 && len(h.tail) > 2*tailMax {
		h.dropped += int64(over)
		h.tail = append(h.tail[:0], h.tail[over:]...)
	}
}

func (h *headTail) truncated() bool {
	return h.dropped > 0 || len(h.tail) > h.max/2
}

// String returns the kept output, valid UTF-8, with a marker where the
// middle was dropped.
func (h *headTail) String() string {
	tail := h.tail
	dropped := h.dropped
	if over := len(tail) - h.max/2; over > 0 {
		dropped += int64(over)
		tail = tail[over:]
	}
	if dropped == 0 {
		return validUTF8(string(h.head) + string(tail))
	}
	return validUTF8(string(h.head)) + fmt.Sprintf("\n…[%d bytes omitted]…\n", dropped) + validUTF8(string(tail))
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// AuditAttrs implements tool.Auditor: the audit event that settles a
// bash call says whether the shell was sandboxed, and how.
func (b *toolBackend) AuditAttrs() []any {
	if b.name != "bash" {
		return nil
	}
	return sandbox.AuditAttrs(b.s.bash.Sandbox)
}
