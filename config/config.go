// Package config reads Backplane's single configuration file (YAML,
// backplane.yaml by default) and opens the gateway it describes.
//
// What it promises:
//
//   - An invalid file is refused whole, with an [*Error] naming the file and
//     the line of the offending node ("backplane.yaml:12: ..."): YAML syntax
//     errors, unknown keys (every level is strict), duplicate keys, values
//     of the wrong type, and semantic mistakes (duplicate tool names, bad
//     durations, policy patterns path.Match rejects, unknown budget scopes,
//     two budgets of one scope, negative quotas or costs, a tool without a
//     command, an input schema the gateway's validator refuses).
//   - Relative paths (store, log.file, a tool's dir) resolve against the
//     folder of the configuration file, never the process's working folder,
//     and a tool's program runs in that folder unless its dir says
//     otherwise. Defaults: store .backplane, approvals expire after 10m and
//     wait 0s, limits as the gateway's (see [Limits]).
//   - The policy is default deny: a caller no rule names may call nothing,
//     and an empty policy means no call is allowed at all.
//   - A tool's input_schema is converted from YAML to the JSON value it
//     denotes, exactly: numbers keep their text (minimum: 1.0 stays 1.0),
//     quoted scalars stay strings, mapping keys must be strings, and what
//     JSON cannot hold (.inf, .nan, binary, merge keys) is refused.
//
// The file (keys beyond these are refused):
//
//	store: .backplane              # a folder (SQLite) or a postgres:// URL
//	postgres: {lease_ttl: 15s, renew_every: 5s, max_conns: 16}  # only with a postgres:// store ([PostgresConfig])
//	policy:                        # default deny; exact names or path.Match globs
//	  - caller: alice
//	    allow: [note, danger, "fs.*"]
//	    approve: [danger]          # these calls need an approval first
//	approvals:
//	  expire: 10m
//	  wait: 0s                     # 0s: return at once with approval_required
//	budgets:
//	  - scope: caller              # caller | session
//	    quota: 3
//	    cost: {default: 1, danger: 2}
//	limits: {max_argument_bytes: 4194304, max_result_bytes: 1048576, timeout: 30s}
//	log: {level: info, file: audit.log}
//	tools:
//	  - name: note
//	    description: Append a note to a log.
//	    input_schema: {type: object, properties: {text: {type: string}}}
//	    command: [sh, -c, 'cat >> "$NOTE_LOG"; echo ''{"ok":true}''']
//	    env: [NOTE_LOG]            # passed through; nothing else is
//	    dir: .                     # where the program runs
//	    timeout: 5s
//	    max_output_bytes: 1048576
//	    safety: {read_only: false, idempotent: false, requires_approval: false}
//	servers:                       # upstream MCP servers, tools as NAME.TOOL ([ServerConfig])
//	  - name: everything
//	    command: [npx, -y, "@modelcontextprotocol/server-everything"]
//	    validator: subset            # the default; or draft2020-12
//
// [Config.Open] turns a Config into a running [Runtime]: its store, its
// policy and budgets, and a gateway with every tool registered with a
// command backend (package backend/command), and every upstream server's
// tools (package backend/mcp).
package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/approval"
	"github.com/agentbackplane/backplane/backend/builtin"
	"github.com/agentbackplane/backplane/backend/command"
	"github.com/agentbackplane/backplane/backend/mcp"
	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// DefaultFile is the configuration file looked for in the working folder.
const DefaultFile = "backplane.yaml"

// DefaultStore is the state folder used when the file names none.
const DefaultStore = ".backplane"

// Config is a parsed, checked configuration. Every default is filled in, so
// the values are the ones in force.
type Config struct {
	// Path is the file's name as given to Load or Parse.
	Path string
	// Dir is the absolute folder relative paths were resolved against: the
	// file's own.
	Dir string

	// Store is the absolute path of the state folder, or a postgres:// URL.
	Store string
	// Postgres tunes a postgres:// store (see [PostgresConfig]).
	Postgres PostgresConfig
	// Policy is the list of rules; empty means nothing may be called.
	Policy    []policy.Rule
	Approvals Approvals
	Budgets   []budget.Quota
	Tools     []ToolConfig
	Limits    Limits
	Log       Log
	// Workspace is the absolute folder the built-in tools are confined to.
	// Default: the configuration file's folder.
	Workspace string
	Builtin   Builtin
	// Serve configures `backplane serve` (see [ServeConfig]).
	Serve ServeConfig
	// Servers are the upstream MCP servers (see [ServerConfig]).
	Servers []ServerConfig
	// Sandbox confines tool processes (see [SandboxConfig]).
	Sandbox SandboxConfig
}

// Approvals configure the approval step.
type Approvals struct {
	// Expire is how long a request stays open and an approval usable.
	// Default 10m.
	Expire time.Duration
	// Wait is how long a call waits for a decision before it returns
	// approval_required with the request id. Default 0: at once.
	Wait time.Duration
}

// Limits bound calls.
type Limits struct {
	// MaxArgumentBytes refuses larger arguments. Default 4 MiB.
	MaxArgumentBytes int
	// MaxResultBytes refuses larger results; it is also a tool's default
	// max_output_bytes. Default 1 MiB.
	MaxResultBytes int
	// Timeout bounds a call of a tool that sets none. Default 30s.
	Timeout time.Duration
}

// Log configures the audit log written when Open is given no logger.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string
	// File receives the audit events as JSON lines, appended; "" writes
	// none.
	File string
}

// ToolConfig is one configured tool, run by the command backend.
type ToolConfig struct {
	Name        string
	Description string
	// InputSchema is the schema as JSON-compatible Go values:
	// map[string]any, []any, string, bool, nil and json.Number (exactly the
	// number's text).
	InputSchema any
	// InputSchemaJSON is the schema as JSON text, keys in the file's order:
	// what the gateway registers and shows.
	InputSchemaJSON json.RawMessage
	// Command is the program and its arguments, run without a shell.
	Command []string
	// Env names the variables passed through from the gateway's environment.
	Env []string
	// Dir is the absolute folder the program runs in. Default: Config.Dir.
	Dir string
	// Timeout bounds one call. Default: Limits.Timeout.
	Timeout time.Duration
	// MaxOutputBytes caps the program's stdout. Default: Limits.MaxResultBytes.
	MaxOutputBytes int
	Safety         gateway.Safety
	// Sandbox overrides the top-level sandbox section; nil: none.
	Sandbox *SandboxConfig
	// Line is where the tool is declared in the file.
	Line int
}

// Error is a configuration error at a line of a file (Line 0 when no line
// applies, such as a file that cannot be read).
type Error struct {
	File string
	Line int
	Msg  string
	// Err is the underlying cause, when there is one.
	Err error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads and parses the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return Parse(data, path)
}

// Parse parses data, the contents of the file filename; filename names the
// file in errors and its folder is where relative paths resolve.
func Parse(data []byte, filename string) (*Config, error) {
	dir, err := filepath.Abs(filepath.Dir(filename))
	if err != nil {
		return nil, &Error{File: filename, Msg: err.Error()}
	}
	p := &parser{file: filename, data: data}
	c := &Config{
		Path:      filename,
		Dir:       dir,
		Store:     DefaultStore,
		Approvals: Approvals{Expire: gateway.DefaultApprovalExpiry},
		Limits: Limits{
			MaxArgumentBytes: inputschema.DefaultMaxArgumentBytes,
			MaxResultBytes:   gateway.DefaultMaxResultBytes,
			Timeout:          gateway.DefaultTimeout,
		},
		Log:       Log{Level: "info"},
		Workspace: ".",
	}
	if err := p.parse(c); err != nil {
		return nil, err
	}
	return c, nil
}

// OpenOptions configure Open. A nil *OpenOptions means the defaults.
type OpenOptions struct {
	// SkipServers leaves the MCP upstreams unconnected (their tools are not
	// registered): for commands that only read or decide on the store, such
	// as journal, approvals and budget, which must not start servers.
	SkipServers bool
	// Logger receives the audit events. Default: a JSON log appended to
	// log.file when the configuration names one, else none.
	Logger *slog.Logger
	// Approver, when set, is asked for decisions interactively.
	Approver approval.Approver
	// Asker is the interaction channel of ask_user_question (a terminal
	// prompt, MCP elicitation); nil means none.
	Asker builtin.Asker
}

// Runtime is an opened configuration: its store and its gateway.
type Runtime struct {
	Gateway *gateway.Gateway
	Store   store.Store
	Config  *Config

	// Sandbox is the sandbox decision of each tool process, by tool name
	// (a server by its name); SandboxNotes the distinct reasons tools run
	// unsandboxed, for the start to say once.
	Sandbox      map[string]SandboxDecision
	SandboxNotes []string

	closers   []io.Closer
	upstreams []*mcp.Upstream // also in closers
}

// Close closes the upstream servers' connections (their programs are
// stopped), the store and the audit log file, if Open opened one.
func (r *Runtime) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i].Close())
	}
	r.closers = nil
	return errors.Join(errs...)
}

// ErrStoreUnavailable is returned by Open for a store that this build
// cannot open.
var ErrStoreUnavailable = errors.New("store not available")

// Open opens the store, builds the policy and budgets, and returns a
// gateway with every configured tool registered. Close the Runtime when
// done.
func (c *Config) Open(ctx context.Context, opts *OpenOptions) (_ *Runtime, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var o OpenOptions
	if opts != nil {
		o = *opts
	}
	rt := &Runtime{Config: c}
	defer func() {
		if err != nil {
			rt.Close() // what was opened before the failure
		}
	}()

	// Parse checked all of this; a Config built or changed by hand is
	// checked again rather than trusted.
	rules, err := policy.NewRules(c.Policy)
	if err != nil {
		return nil, &Error{File: c.Path, Msg: err.Error()}
	}
	for _, q := range c.Budgets {
		if err := q.Check(); err != nil {
			return nil, &Error{File: c.Path, Msg: err.Error()}
		}
	}

	logger := o.Logger
	if logger == nil && c.Log.File != "" {
		f, err := os.OpenFile(c.Log.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, &Error{File: c.Path, Msg: "log file: " + err.Error()}
		}
		rt.closers = append(rt.closers, f)
		var level slog.Level
		if err := level.UnmarshalText([]byte(c.Log.Level)); err != nil {
			return nil, &Error{File: c.Path, Msg: "log level: " + err.Error()}
		}
		logger = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level}))
	}

	st, err := c.openStore(logger)
	if err != nil {
		return nil, err
	}
	rt.Store = st
	rt.closers = append(rt.closers, st)

	g := gateway.New(&gateway.Options{
		Store:   st,
		Policy:  rules,
		Budgets: c.Budgets,
		Approvals: approval.Options{
			Expire:   c.Approvals.Expire,
			Wait:     c.Approvals.Wait,
			Approver: o.Approver,
		},
		Logger:         logger,
		Timeout:        c.Limits.Timeout,
		MaxResultBytes: c.Limits.MaxResultBytes,
		Limits:         inputschema.Limits{MaxArgumentBytes: c.Limits.MaxArgumentBytes},
	})
	for _, t := range c.Tools {
		sb, err := c.sandboxFor(kindCommand, t.Sandbox)
		if err != nil {
			return nil, &Error{File: c.Path, Line: t.Line, Msg: fmt.Sprintf("tool %s: %v", t.Name, err)}
		}
		rt.noteSandbox(logger, t.Name, sb)
		cb, err := command.New(command.Spec{Argv: t.Command, Env: t.Env, Dir: t.Dir, MaxOutputBytes: t.MaxOutputBytes, Sandbox: sb.Policy})
		if err != nil {
			return nil, &Error{File: c.Path, Line: t.Line, Msg: fmt.Sprintf("tool %s: %v", t.Name, err)}
		}
		b := &sandboxedBackend{Backend: cb, attrs: auditAttrs(sb)}
		err = g.Register(gateway.Tool{
			Name:        t.Name,
			Description: t.Description,
			InputSchema: t.InputSchemaJSON,
			Safety:      t.Safety,
			Timeout:     t.Timeout,
			Backend:     b,
		})
		if err != nil {
			return nil, &Error{File: c.Path, Line: t.Line, Msg: err.Error()}
		}
	}
	set, err := c.registerBuiltins(g, o.Asker, rt, logger)
	if err != nil {
		return nil, err
	}
	if set != nil {
		rt.closers = append(rt.closers, set)
	}
	// Last: a server's tools collide with any tool registered before.
	if !o.SkipServers {
		if err := c.connectServers(ctx, rt, g, logger); err != nil {
			return nil, err
		}
	}
	rt.Gateway = g
	return rt, nil
}

// openStore opens the configured store: a postgres:// URL is the shared
// PostgreSQL store, a folder the embedded SQLite store.
func (c *Config) openStore(logger *slog.Logger) (store.Store, error) {
	if isPostgres(c.Store) {
		u, password := c.Store, ""
		if pu, err := url.Parse(u); err == nil {
			u = pu.Redacted() // never print a password
			password, _ = pu.User.Password()
		}
		// Connecting, migrating and recovering; bounded, since Open's
		// context does not reach here.
		const openTimeout = 30 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
		defer cancel()
		opts := c.Postgres.options()
		opts.Logger = logger
		st, err := postgres.Open(ctx, c.Store, opts)
		if err != nil {
			msg := err.Error()
			if password != "" {
				// The store's errors do not show it; make sure.
				msg = strings.ReplaceAll(msg, password, "xxxxx")
			}
			return nil, &Error{File: c.Path, Msg: fmt.Sprintf("store %s: %s", u, msg), Err: err}
		}
		return st, nil
	}
	var opts *sqlite.Options
	if logger != nil {
		opts = &sqlite.Options{Logger: logger}
	}
	st, err := sqlite.Open(c.Store, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: store %s: %w", c.Path, c.Store, err)
	}
	return st, nil
}

func isPostgres(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}
