// Package builtin implements the nine built-in coding tools (read, write,
// edit, ls, glob, grep, bash, url_fetch, ask_user_question) as gateway
// backends, with the input schemas of package schemas.
//
// # Confinement
//
// Every file the path-taking tools (read, write, edit, ls, glob, grep) touch
// is reached through one [os.Root] opened on the workspace: a path is
// resolved component by component from the root's directory descriptor, so
// "..", an absolute path outside the workspace and a symbolic link that
// leads out (or any absolute link) are refused, never followed, whatever
// the file system looks like at the moment of the call. There is no
// separate check that a swapped symlink could slip between. A link that
// stays inside is followed. An absolute path inside the workspace is
// accepted and made relative. Walks (grep, glob) never follow symbolic
// links. write and edit replace files by renaming a temporary file inside
// the root, so they refuse a path whose last component is a symbolic link
// (the rename would replace the link) and name its target instead.
//
// # Paths the policy decided
//
// The path-taking tools are [tool.PathResolver]s: before the gateway's
// policy decides, the path is resolved inside the root to its real
// workspace-relative path (links inside followed, escapes refused), so that
// a rule about ".env" sees "src/envlink". A call carrying that resolution
// (tool.Call.Path) uses only what it resolved: the file or folder
// opened (for write and edit, the folder renamed into) must have the
// (device, inode) recorded then, or, when nothing existed, must resolve to
// the same real path now; otherwise the call is refused as forbidden and
// nothing is read or changed. glob and grep leave out what
// tool.Call.PathDenied says a deny names, by real path.
//
// # Hidden paths
//
// The gateway's private state (the store folder with its journal of every
// call's arguments, the audit log, the configuration file) may lie inside
// the workspace: [Options.Hide] names it, and the path-taking tools treat
// it as outside the workspace. Naming a hidden path or anything inside it
// is refused with forbidden, whatever the name: directly, with "./" or
// "sub/..", absolutely, or through a symbolic link inside the workspace
// that points into it (to the folder or to a file). On Linux this holds by
// construction: a file or folder is checked after it is opened, by where
// the kernel says its descriptor is (/proc/self/fd), and the descriptor
// checked is the one read from, listed, or created and renamed in; write
// and edit create missing folders one at a time below a checked one. ls
// leaves hidden entries out of its listing and count, and the walks of
// glob and grep skip them, through links too (a link into them is still
// listed by name, as every link is, and never followed). A file is also
// compared by (device, inode) with the hidden files: on Linux a regular
// file with several links (a hard link to the journal placed in the
// workspace), elsewhere every file and folder opened, where names are also
// compared regardless of case (macOS and Windows volumes usually ignore
// it), so "BACKPLANE.YAML" is the hidden configuration there.
//
// # bash is not confined
//
// bash runs a shell in the workspace folder, with the gateway's user
// rights: nothing of the above applies to it. Its command can read and
// write outside the workspace and the hidden paths alike, start network
// connections, and anything else that user may do. That is why it requires
// an approval by default: a person reads the command before it runs. Give
// it requires_approval: false only where the callers are trusted as much
// as the gateway's user.
//
// # Results and errors
//
// Every result is a JSON object. What the tool itself found out is a result,
// and a Go error is kept for what the gateway must treat as not run or as
// unknown:
//
//   - A tool-level failure (refused path, missing file, not a regular file,
//     edit text found 0 or several times, a refused URL, an HTTP error
//     status, a non-zero exit status, bash's own timeout) is a
//     [tool.Result] with IsError set whose Content holds
//     {"error": {"class": C, "message": M, "details": {...}}}, C one of the
//     gateway's classes (forbidden for confinement and address refusals,
//     not_found, validation, timeout, execution_failure,
//     unsupported_capability, cancelled). These calls ran to a known end:
//     nothing was changed by a refused or failed write, edit or fetch.
//     Results that carry other data (bash's exit status and output,
//     url_fetch's status and body) keep it beside "error".
//   - An error wrapping [tool.ErrNotStarted]: nothing ran (ctx was done
//     before the tool started; bash could not be started).
//   - An error wrapping [tool.ErrMalformedResult]: the Asker returned an
//     answer that is none of the options.
//   - Any other Go error: the outcome is unknown (ctx was done while bash
//     ran, while a request was in flight, while a question was shown, or
//     during a read or a walk; the Asker failed). The gateway settles such a
//     call uncertain; for the read-only tools that is harmless.
//
// A confinement refusal is thus a result, not a Go error: the gateway keeps
// a backend error's class only for ErrNotStarted and ErrMalformedResult,
// and a refusal must reach the caller as forbidden.
package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/sandbox"
	"github.com/agentbackplane/backplane/tool"
)

// Defaults.
const (
	DefaultBashTimeout        = 120 * time.Second
	DefaultBashMaxTimeout     = 600 * time.Second
	DefaultBashMaxOutputBytes = 64 << 10 // per stream
	DefaultURLFetchTimeout    = 30 * time.Second
	DefaultURLFetchMaxBytes   = 5 << 20 // of the response body, before conversion
	DefaultURLFetchMaxLength  = 100_000 // characters returned when max_length is omitted
	DefaultReadMaxBytes       = 256 << 10
	// DefaultAskTimeout applies when ask_user_question has no timeout_ms;
	// MaxAskTimeout caps it.
	DefaultAskTimeout = 5 * time.Minute
	MaxAskTimeout     = 30 * time.Minute
	// DefaultListLimit is the default limit of ls and glob, DefaultGrepLimit
	// that of grep (matching lines).
	DefaultListLimit = 1000
	DefaultGrepLimit = 200
)

// deadlineGrace is how much longer than a tool's own longest timeout the
// gateway's deadline is set, so that the tool's timeout (a known outcome)
// always fires before the gateway's (an unknown one).
const deadlineGrace = 10 * time.Second

// Options configure the built-in tools. Zero fields mean the defaults.
type Options struct {
	// Workspace is the folder every path-taking tool is confined to, and
	// bash's working folder. Required.
	Workspace string
	Bash      BashOptions
	URLFetch  URLFetchOptions
	Read      ReadOptions
	// Asker is the interaction channel of ask_user_question. A call may
	// carry its own (tool.Call.Asker: the MCP session's elicitation),
	// which is asked instead; with neither, the tool fails with
	// unsupported_capability.
	Asker Asker
	// Hide lists absolute paths of folders and files the path-taking tools
	// treat as outside the workspace (the gateway's store folder, audit
	// log, configuration file): see "Hidden paths" above. Paths need not
	// exist; the workspace must not lie inside one.
	Hide []string
}

// BashOptions configure the bash tool.
type BashOptions struct {
	// Timeout applies when a call gives none (default 120s); MaxTimeout
	// caps what a call asks for (default 600s).
	Timeout, MaxTimeout time.Duration
	// Env names the variables passed from the gateway's environment (those
	// unset there are left out); nothing else is passed but, for a traced
	// call, TRACEPARENT and TRACESTATE (the call's own trace context), and
	// the git pins: GIT_CONFIG_NOSYSTEM=1 and core.fsmonitor set empty
	// through GIT_CONFIG_COUNT (names starting GIT_CONFIG are never passed
	// from the gateway). nil means [PATH, HOME]; an empty non-nil slice
	// passes nothing.
	Env []string
	// MaxOutputBytes caps what is kept of stdout and of stderr, each
	// (default 64 KiB); the middle of a longer stream is dropped.
	MaxOutputBytes int
	// Sandbox, when not nil, confines the shell (package sandbox's options);
	// its Write list should hold the workspace.
	Sandbox *sandbox.Policy
}

// URLFetchOptions configure the url_fetch tool.
type URLFetchOptions struct {
	// Allow lists host:port entries exempt from the refusal of loopback,
	// private, link-local, unspecified and multicast addresses. An entry
	// matches the URL's host and port as written, or the IP address and
	// port actually connected to.
	Allow []string
	// Timeout bounds a whole fetch, redirects and body included (default 30s).
	Timeout time.Duration
	// MaxBytes caps the body read (default 5 MiB).
	MaxBytes int
}

// ReadOptions configure the read tool.
type ReadOptions struct {
	// MaxBytes caps the content returned by one call (default 256 KiB).
	MaxBytes int
}

// Set is the nine built-in tools over one workspace. It is safe for
// concurrent use. Close releases the workspace.
type Set struct {
	root    *os.Root
	ws      string   // absolute workspace path, as given
	wsReal  string   // the same with symbolic links resolved
	hidden  []string // Options.Hide, clean, and with links resolved
	bash    BashOptions
	fetch   *fetcher
	readMax int
	asker   Asker
	tools   []tool.Tool
	// walkOpens counts what walks open (walkFS.open): the tests bound the
	// work of a glob or grep with it.
	walkOpens atomic.Int64

	// ids caches the identities of the hidden files where every open is
	// compared with them (see hiddenIDs).
	idsMu sync.Mutex
	ids   map[fileKey]bool
	idsAt time.Time
}

// New opens the workspace and returns the tools.
func New(opts *Options) (*Set, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Workspace == "" {
		return nil, errors.New("builtin: the workspace is required")
	}
	ws, err := filepath.Abs(o.Workspace)
	if err != nil {
		return nil, fmt.Errorf("builtin: workspace %s: %w", o.Workspace, err)
	}
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return nil, fmt.Errorf("builtin: workspace %s: %w", o.Workspace, err)
	}
	hidden, err := hidePaths(o.Hide, ws, real)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, fmt.Errorf("builtin: workspace %s: %w", o.Workspace, err)
	}
	learnEscapeError(root)

	b := o.Bash
	if b.Timeout < 0 || b.MaxTimeout < 0 || b.MaxOutputBytes < 0 {
		root.Close()
		return nil, errors.New("builtin: bash timeouts and output cap must not be negative")
	}
	if b.Timeout == 0 {
		b.Timeout = DefaultBashTimeout
	}
	if b.MaxTimeout == 0 {
		b.MaxTimeout = max(DefaultBashMaxTimeout, b.Timeout)
	}
	if b.Timeout > b.MaxTimeout {
		root.Close()
		return nil, fmt.Errorf("builtin: bash timeout %v is above its max_timeout %v", b.Timeout, b.MaxTimeout)
	}
	if b.Env == nil {
		b.Env = []string{"PATH", "HOME"}
	}
	b.Env = append([]string(nil), b.Env...)
	for _, name := range b.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			root.Close()
			return nil, fmt.Errorf("builtin: bash env: %q is not an environment variable name", name)
		}
	}
	if b.MaxOutputBytes == 0 {
		b.MaxOutputBytes = DefaultBashMaxOutputBytes
	}

	f, err := newFetcher(o.URLFetch)
	if err != nil {
		root.Close()
		return nil, err
	}
	readMax := o.Read.MaxBytes
	if readMax < 0 {
		root.Close()
		return nil, errors.New("builtin: read max bytes must not be negative")
	}
	if readMax == 0 {
		readMax = DefaultReadMaxBytes
	}

	s := &Set{root: root, ws: ws, wsReal: real, hidden: hidden, bash: b, fetch: f, readMax: readMax, asker: o.Asker}
	s.tools = s.describe()
	return s, nil
}

// Close releases the workspace root. Calls made afterwards fail.
func (s *Set) Close() error {
	s.fetch.client.CloseIdleConnections()
	return s.root.Close()
}

// Workspace returns the absolute path of the workspace.
func (s *Set) Workspace() string { return s.ws }

// Tools returns the nine tools, in the order of [schemas.All], with their
// default safety flags. The slice is the caller's own.
func (s *Set) Tools() []tool.Tool {
	return append([]tool.Tool(nil), s.tools...)
}

// Tool returns the named built-in tool.
func (s *Set) Tool(name string) (tool.Tool, bool) {
	for _, t := range s.tools {
		if t.Name == name {
			return t, true
		}
	}
	return tool.Tool{}, false
}

// toolFunc runs one call of a built-in tool.
type toolFunc func(ctx context.Context, call *tool.Call) (*tool.Result, error)

// argsOnly adapts a tool that needs only the call's arguments.
func argsOnly(fn func(ctx context.Context, args json.RawMessage) (*tool.Result, error)) toolFunc {
	return func(ctx context.Context, call *tool.Call) (*tool.Result, error) { return fn(ctx, call.Arguments) }
}

func (s *Set) describe() []tool.Tool {
	impl := map[string]struct {
		fn      toolFunc
		safety  tool.Safety
		timeout time.Duration
	}{
		"read":              {argsOnly(s.read), tool.Safety{ReadOnly: true, Idempotent: true}, 0},
		"ls":                {argsOnly(s.ls), tool.Safety{ReadOnly: true, Idempotent: true}, 0},
		"glob":              {argsOnly(s.glob), tool.Safety{ReadOnly: true, Idempotent: true}, 0},
		"grep":              {argsOnly(s.grep), tool.Safety{ReadOnly: true, Idempotent: true}, 0},
		"write":             {argsOnly(s.write), tool.Safety{RequiresApproval: true}, 0},
		"edit":              {argsOnly(s.edit), tool.Safety{RequiresApproval: true}, 0},
		"bash":              {s.runBash, tool.Safety{RequiresApproval: true}, s.bash.MaxTimeout + deadlineGrace},
		"url_fetch":         {argsOnly(s.urlFetch), tool.Safety{ReadOnly: true}, s.fetch.timeout + deadlineGrace},
		"ask_user_question": {s.ask, tool.Safety{ReadOnly: true}, MaxAskTimeout + deadlineGrace},
	}
	var out []tool.Tool
	for _, st := range schemas.All() {
		im, ok := impl[st.Name]
		if !ok {
			panic("builtin: no implementation of the built-in tool " + st.Name)
		}
		fn := im.fn
		out = append(out, tool.Tool{
			Name:         st.Name,
			Description:  st.Description,
			InputSchema:  st.InputSchema,
			OutputSchema: st.OutputSchema,
			Safety:       im.safety,
			Timeout:      im.timeout,
			Backend:      &toolBackend{s: s, name: st.Name, fn: fn, check: checker(st.Name)},
			Source:       tool.SourceBuiltin,
			MainArg:      policy.BuiltinMainArgs[st.Name].Field,
		})
	}
	return out
}

// checker is the argument check of the named tool; every tool has one.
func checker(name string) func(json.RawMessage) error {
	c, ok := checkers[name]
	if !ok {
		panic("builtin: no argument check of the built-in tool " + name)
	}
	return c
}

// toolBackend runs one built-in tool. It checks its arguments before the
// intent (tool.Checker) and previews write, edit and bash calls for
// whoever decides their approval (tool.Previewer).
type toolBackend struct {
	s     *Set
	name  string
	fn    toolFunc
	check func(json.RawMessage) error
}

func (b *toolBackend) Invoke(ctx context.Context, call *tool.Call) (*tool.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", tool.ErrNotStarted, b.name, err)
	}
	// What the gateway resolved and decided travels with ctx to where
	// each tool opens its path (verify) or walks (walkDenied).
	res, err := b.fn(withPaths(ctx, call), call)
	var te *toolError
	if errors.As(err, &te) {
		return te.result(), nil
	}
	return res, err
}

func (b *toolBackend) Preview(ctx context.Context, call *tool.Call) (*tool.Preview, error) {
	return b.s.preview(ctx, b.name, call.Arguments)
}

// toolError is a tool-level failure: it becomes an IsError result.
type toolError struct {
	class   tool.Class
	msg     string
	details map[string]any
}

func (e *toolError) Error() string { return string(e.class) + ": " + e.msg }

func fail(class tool.Class, format string, args ...any) *toolError {
	return &toolError{class: class, msg: fmt.Sprintf(format, args...)}
}

func (e *toolError) with(key string, v any) *toolError {
	if e.details == nil {
		e.details = map[string]any{}
	}
	e.details[key] = v
	return e
}

// errorBody is the "error" member of an IsError result: the shape of the
// gateway's own error object (class, message, step, details), step
// "invoke", so that a client reads a refusal and a tool's error alike.
type errorBody struct {
	Class   tool.Class     `json:"class"`
	Message string         `json:"message"`
	Step    string         `json:"step"`
	Details map[string]any `json:"details"`
}

func (e *toolError) body() *errorBody {
	d := e.details
	if d == nil {
		d = map[string]any{}
	}
	return &errorBody{Class: e.class, Message: e.msg, Step: "invoke", Details: d}
}

func (e *toolError) result() *tool.Result {
	return &tool.Result{Content: marshal(struct {
		Error *errorBody `json:"error"`
	}{e.body()}), IsError: true}
}

// ok wraps a result value.
func ok(v any) (*tool.Result, error) {
	return &tool.Result{Content: marshal(v)}, nil
}

// marshal encodes v without HTML escaping (results are read by programs and
// models, not embedded in web pages) and without a trailing newline.
func marshal(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only plain structs, strings and numbers go in.
		panic("builtin: encoding a result: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// decode reads a call's arguments strictly. The gateway has validated them
// against the same schema; a mismatch here is reported, not guessed around.
func decode(args json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fail(tool.ClassValidation, "the arguments cannot be read: %v", err)
	}
	if dec.More() {
		return fail(tool.ClassValidation, "the arguments hold more than one JSON value")
	}
	return nil
}
