// Package command is a [tool.Backend] that runs a configured program for
// each call, without a shell.
//
// What one call does, and what the gateway learns from it:
//
//   - The program (Spec.Argv; argv[0] is looked up in the gateway's PATH
//     when it has no slash, and is relative to Spec.Dir when it is a
//     relative path) starts in its own process group, in Spec.Dir, with an
//     environment holding exactly the variables named in Spec.Env, taken
//     from the gateway's environment at the time of the call, and, for a
//     traced call, TRACEPARENT and TRACESTATE (the call's own trace
//     context): nothing else is passed, not even PATH.
//   - The call's argument bytes, exactly as validated, are written to its
//     stdin, which is then closed.
//   - Its stdout is read up to Spec.MaxOutputBytes; the last 4 KiB of its
//     stderr are kept for error messages.
//   - When the program exits, what is left of its process group is killed
//     with SIGKILL: no process of a call outlives it (a process that leaves
//     the group, with setsid for one, is beyond reach; if it still holds
//     stdout the result is refused, see below).
//
// The outcome, in the terms of package backend:
//
//   - The program cannot be started (not found, not executable, bad Dir), or
//     ctx was done before it started: an error wrapping
//     [tool.ErrNotStarted]. Nothing ran.
//   - Exit status 0 and stdout is one JSON value (surrounding whitespace
//     allowed): a [tool.Result] whose Content is that value, trimmed.
//   - Exit status 0 and stdout is not one JSON value (empty included): an
//     error wrapping [tool.ErrMalformedResult] quoting the start of the
//     output. It ran; its answer cannot be read.
//   - More than Spec.MaxOutputBytes on stdout: the process group is killed at
//     once and the error wraps [tool.ErrMalformedResult], naming the
//     limit.
//   - A non-zero exit status: the tool ran and reports a failure, so this is
//     a tool-level error result, not a Go error: IsError set and Content
//     {"exit_code":N,"stderr":"<tail>","stdout":<the output as JSON when it
//     is one JSON value, else as a string>}.
//   - Killed by a signal it did not get from this package (a crash, the OOM
//     killer): an error wrapping neither sentinel. Whatever it did is
//     unknown.
//   - ctx deadline or cancellation while it runs: the whole process group is
//     killed with SIGKILL and the error wraps ctx.Err(); the gateway
//     classifies it as timeout or cancelled, outcome unknown.
package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/internal/procsup"
	"github.com/agentbackplane/backplane/sandbox"
	"github.com/agentbackplane/backplane/tool"
)

// DefaultMaxOutputBytes caps a call's stdout when Spec.MaxOutputBytes is 0.
const DefaultMaxOutputBytes = 1 << 20

const (
	// stderrTailBytes is how much of the end of stderr is kept.
	stderrTailBytes = 4 << 10
	// quoteBytes is how much of a malformed output an error message quotes.
	quoteBytes = 64
)

// Spec says what program a Backend runs.
type Spec struct {
	// Argv is the program and its arguments; Argv[0] is looked up in the
	// gateway's PATH when it holds no slash, and a relative path is
	// relative to Dir.
	Argv []string
	// Env names the variables passed through from the gateway's environment
	// (those unset there are left out). Nothing else is passed.
	Env []string
	// Dir is the working directory; "" means the gateway's.
	Dir string
	// MaxOutputBytes caps stdout; 0 means DefaultMaxOutputBytes.
	MaxOutputBytes int
	// Sandbox, when not nil, confines the program (package sandbox's
	// options, applied by internal/sandbox).
	Sandbox *sandbox.Policy
}

// Backend runs Spec's program once per call. It is safe for concurrent use.
type Backend struct {
	spec Spec
}

// New checks spec and returns its Backend.
func New(spec Spec) (*Backend, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("command: the program (argv[0]) is required")
	}
	for _, name := range spec.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return nil, fmt.Errorf("command: %q is not an environment variable name", name)
		}
	}
	if spec.MaxOutputBytes < 0 {
		return nil, fmt.Errorf("command: MaxOutputBytes %d must not be negative", spec.MaxOutputBytes)
	}
	if spec.MaxOutputBytes == 0 {
		spec.MaxOutputBytes = DefaultMaxOutputBytes
	}
	spec.Argv = append([]string(nil), spec.Argv...)
	spec.Env = append([]string(nil), spec.Env...)
	return &Backend{spec: spec}, nil
}

// environ returns the child's environment: never nil, because a nil
// exec.Cmd.Env would pass the gateway's whole environment.
func (b *Backend) environ() []string {
	env := make([]string, 0, len(b.spec.Env))
	for _, name := range b.spec.Env {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// Invoke runs the program once; see the package documentation for the
// outcomes.
func (b *Backend) Invoke(ctx context.Context, call *tool.Call) (*tool.Result, error) {
	name := b.spec.Argv[0]
	stdin := []byte(call.Arguments)
	if stdin == nil {
		stdin = []byte{}
	}
	out := &capture{max: b.spec.MaxOutputBytes}
	tail := &tailBuffer{max: stderrTailBytes}
	o, err := procsup.Run(ctx, &procsup.Spec{
		Argv: b.spec.Argv,
		Dir:  b.spec.Dir,
		// The call's own TRACEPARENT and TRACESTATE, when it is traced.
		Env:     append(b.environ(), call.Trace.Env()...),
		Stdin:   stdin,
		Stdout:  out,
		Stderr:  tail,
		Sandbox: b.spec.Sandbox,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: command %s: %w", tool.ErrNotStarted, name, err)
	}

	stderr := tail.String()
	switch {
	case o.Ctx != nil:
		return nil, fmt.Errorf("command %s: the process group was killed: %w", name, o.Ctx)
	case o.Overflow || out.overflowed():
		return nil, fmt.Errorf("%w: command %s: its output exceeds the limit of %d bytes (the process group was killed)%s",
			tool.ErrMalformedResult, name, b.spec.MaxOutputBytes, stderrNote(stderr))
	case !o.Reaped:
		return nil, fmt.Errorf("command %s: the process did not end within %v of SIGKILL", name, procsup.ReapTimeout)
	case !o.Drained:
		return nil, fmt.Errorf("%w: command %s: its stdout or stderr was still open %v after it exited (held by a process outside its process group)",
			tool.ErrMalformedResult, name, procsup.DrainTimeout)
	}

	stdout := out.buf
	var exitErr *exec.ExitError
	switch {
	case o.Wait == nil:
		content := trimJSONSpace(stdout)
		if err := validJSON(content, b.spec.MaxOutputBytes); err != nil {
			return nil, fmt.Errorf("%w: command %s exited 0 but its output is not one JSON value (%v): %s%s",
				tool.ErrMalformedResult, name, err, quotePrefix(stdout), stderrNote(stderr))
		}
		return &tool.Result{Content: bytes.Clone(content)}, nil
	case errors.As(o.Wait, &exitErr):
		if sig, ok := o.Signaled(); ok {
			return nil, fmt.Errorf("command %s was killed by signal %v%s", name, sig, stderrNote(stderr))
		}
		return &tool.Result{Content: exitResult(exitErr.ExitCode(), stderr, stdout, b.spec.MaxOutputBytes), IsError: true}, nil
	default:
		return nil, fmt.Errorf("command %s: %w", name, o.Wait)
	}
}

// exitResult is the tool-level error result of a non-zero exit status.
func exitResult(code int, stderr string, stdout []byte, limit int) json.RawMessage {
	var so json.RawMessage
	if t := trimJSONSpace(stdout); validJSON(t, limit) == nil {
		so = t
	} else {
		so = marshal(string(stdout))
	}
	return marshal(struct {
		ExitCode int             `json:"exit_code"`
		Stderr   string          `json:"stderr"`
		Stdout   json.RawMessage `json:"stdout"`
	}{code, stderr, so})
}

// marshal encodes v without HTML escaping (the result is for programs and
// people, not for a web page) and without the encoder's trailing newline.
func marshal(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only strings, ints and validated JSON go in: this cannot happen.
		panic("command: encoding a result: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func validJSON(b []byte, limit int) error {
	return jsonstrict.Valid(b, &jsonstrict.Options{MaxBytes: max(limit, jsonstrict.DefaultMaxBytes)})
}

func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}

// quotePrefix quotes the start of a malformed output for an error message.
func quotePrefix(b []byte) string {
	if len(b) == 0 {
		return "the output is empty"
	}
	if len(b) <= quoteBytes {
		return strconv.Quote(string(b))
	}
	cut := quoteBytes
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strconv.Quote(string(b[:cut])) + fmt.Sprintf(" (first %d of %d bytes)", cut, len(b))
}

func stderrNote(stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return ""
	}
	if len(stderr) > 256 {
		i := len(stderr) - 256
		for i < len(stderr) && !utf8.RuneStart(stderr[i]) {
			i++
		}
		stderr = "..." + stderr[i:]
	}
	return "; stderr: " + strconv.Quote(stderr)
}

// capture keeps up to max bytes of a stream, and one more to tell that the
// stream is longer; then it refuses more, which kills the process group.
type capture struct {
	max int
	buf []byte
}

func (c *capture) Write(p []byte) (int, error) {
	n := min(len(p), c.max+1-len(c.buf))
	c.buf = append(c.buf, p[:n]...)
	if len(c.buf) > c.max {
		return n, procsup.ErrOutputLimit
	}
	return len(p), nil
}

// overflowed may be called once the process is done.
func (c *capture) overflowed() bool { return len(c.buf) > c.max }

// tailBuffer keeps the last max bytes of a stream.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.truncated = true
	}
	return len(p), nil
}

// String returns the tail, starting at a character boundary.
func (t *tailBuffer) String() string {
	b := t.buf
	if len(b) > t.max {
		b, t.truncated = b[len(b)-t.max:], true
	}
	if t.truncated {
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	return string(b)
}

// AuditAttrs implements tool.Auditor: the audit event that settles a
// call says whether the program was sandboxed, and how.
func (b *Backend) AuditAttrs() []any { return sandbox.AuditAttrs(b.spec.Sandbox) }
