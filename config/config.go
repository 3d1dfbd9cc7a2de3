// Package config reads Backplane's single configuration file (YAML,
// backplane.yaml by default) and checks it.
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
//   - Relative paths (store, log.file, workspace, a tool's dir) resolve
//     against the folder of the configuration file, never the process's
//     working folder. A tool's program, and an upstream server's, runs in
//     the workspace unless its dir says otherwise. Which file is loaded:
//     [Find] (--config, $BACKPLANE_CONFIG, the user's file; never the
//     working folder) and [Config.CheckFound].
//     Defaults: store .backplane, approvals expire after 10m and
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
//	# or store_env: NAME / store_file: PATH: the same, read from the environment or a file
//	# (a URL holding a password, kept out of this file; never printed)
//	postgres: {lease_ttl: 15s, renew_every: 5s, max_conns: 16}  # only with a postgres:// store ([PostgresConfig])
//	policy:                        # default deny; exact names or path.Match globs
//	  - caller: alice
//	    allow: [note, danger, "fs.*"]
//	    approve: [danger]          # these calls need an approval first
//	    resources: ["demo://resource/static/document/*"]  # upstream resources, by URI (default: none)
//	    prompts: [simple-prompt]   # upstream prompts, by name (default: none)
//	approvals:
//	  expire: 10m
//	  wait: 0s                     # 0s: return at once with approval_required
//	budgets:
//	  - scope: caller              # caller | session
//	    quota: 3
//	    cost: {default: 1, danger: 2}   # default: the cost of unlisted tools
//	limits: {max_argument_bytes: 4194304, max_result_bytes: 1048576, timeout: 30s}
//	log: {level: info, file: audit.log, max_size: 100MB, max_files: 10}   # the audit log (docs/audit.md)
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
//	tracing: {endpoint: http://127.0.0.1:4318, protocol: http/protobuf, sample: 1.0}  # OpenTelemetry ([Tracing]); off without the key
//
// This package only parses and checks: it opens no store, starts nothing
// and imports no store driver, backend or gateway. Package assemble turns
// a Config into a running gateway.
package config

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/tool"
)

// DefaultFile is the name of the user's configuration file (see [UserFile]).
const DefaultFile = "backplane.yaml"

// DefaultStore is the state folder used when the file names none.
const DefaultStore = ".backplane"

// Defaults the file shares with the gateway (package gateway's
// DefaultApprovalExpiry, DefaultMaxResultBytes and DefaultTimeout; a test
// of package assemble holds them equal).
const (
	DefaultApprovalExpire = 10 * time.Minute
	DefaultMaxResultBytes = 1 << 20
	DefaultTimeout        = 30 * time.Second
)

// StoreKind says which store Config.Store names, as the parser read it.
type StoreKind string

const (
	// StoreSQLite: Store is the absolute path of a folder (the embedded
	// SQLite store).
	StoreSQLite StoreKind = "sqlite"
	// StorePostgres: Store is a postgres:// or postgresql:// URL (the
	// shared PostgreSQL store).
	StorePostgres StoreKind = "postgres"
)

// StoreKindOf is the kind of store s names: a postgres:// or
// postgresql:// URL is PostgreSQL, anything else a folder. (Parse refuses
// other URLs.)
func StoreKindOf(s string) StoreKind {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		return StorePostgres
	}
	return StoreSQLite
}

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
	// StoreSource says where Store was read when not in the file itself:
	// "store_env NAME" or "store_file PATH"; "" for store: (or the
	// default). What prints the store then names this, never the URL.
	StoreSource string
	// StoreKind says which of the two Store is; Parse sets it.
	StoreKind StoreKind
	// Postgres tunes a postgres:// store (see [PostgresConfig]).
	Postgres PostgresConfig
	// Policy is the list of rules; empty means nothing may be called.
	// Parse compiles it once ([Config.CompiledPolicy]).
	Policy    []policy.Rule
	compiled  *policy.Rules // by Parse; see CompiledPolicy
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
	// Operators decide approvals (see [Operator]).
	Operators []Operator
	// Retention says how long the store keeps what is finished (see
	// [Retention]).
	Retention Retention
	// Tracing, when set, exports OpenTelemetry traces (see [Tracing]).
	Tracing *Tracing
	// Secrets, when set, holds the keys that seal upstream tokens in the
	// store (see [SecretsConfig]).
	Secrets *SecretsConfig
}

// Approvals configure the approval step.
type Approvals struct {
	// Expire is how long a request stays open and an approval usable.
	// Default 10m.
	Expire time.Duration
	// Wait is how long a call waits for a decision before it returns
	// approval_required with the request id: `backplane call`'s (unless
	// --wait) and served calls' (unless serve.approval_wait). Default 0:
	// do not wait, return at once (0 means that everywhere in Backplane).
	Wait time.Duration
	// SelfApproveTimeout bounds how long the person at the caller's own
	// client has to answer, where a rule sets self_approve and the client
	// can be asked (MCP elicitation); they are asked whatever Wait is.
	// Default 50s (gateway.DefaultSelfApproveTimeout), at most 10m.
	SelfApproveTimeout time.Duration
	// MaxPending caps one caller's pending requests (default 16): beyond
	// it a call needing a new request is refused and nothing is created.
	MaxPending int
	// TaskLease is how long the serve running an approved task (the MCP
	// tasks extension) holds its claim unless it renews it, which it does
	// while the call runs: a serve that died is taken for gone that long
	// after (gateway.Options.TaskLease; default 30s, from 1s to 1h).
	TaskLease time.Duration
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

// Schema returns the limits schemas are compiled and arguments validated
// under: the gateway's, and the schema tooling's when given a configuration.
func (l Limits) Schema() inputschema.Limits {
	return inputschema.Limits{MaxArgumentBytes: l.MaxArgumentBytes}
}

// Log configures the audit log (package assemble opens it).
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string
	// File receives the audit events as JSON lines, appended; "" leaves
	// the choice to package assemble (audit.log in the store folder).
	File string
	// MaxSize is the size in bytes past which the file is rotated (at
	// least 1 MiB, in whole MiB); 0 means the default, 100 MiB.
	MaxSize int64
	// MaxFiles is how many rotated files are kept; 0 means the default,
	// 10.
	MaxFiles int
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
	// Dir is the absolute folder the program runs in. Default: Config.Workspace.
	Dir string
	// Timeout bounds one call. Default: Limits.Timeout.
	Timeout time.Duration
	// MaxOutputBytes caps the program's stdout. Default: Limits.MaxResultBytes.
	MaxOutputBytes int
	Safety         tool.Safety
	// MainArg names the argument TOOL(PATTERN) policy entries match
	// (main_arg); nil: none, and such entries are refused.
	MainArg *policy.MainArg
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
		Approvals: Approvals{Expire: DefaultApprovalExpire},
		Retention: Retention{Keep: DefaultRetentionKeep, Every: DefaultRetentionEvery},
		Limits: Limits{
			MaxArgumentBytes: inputschema.DefaultMaxArgumentBytes,
			MaxResultBytes:   DefaultMaxResultBytes,
			Timeout:          DefaultTimeout,
		},
		Log:       Log{Level: "info"},
		Workspace: ".",
	}
	if err := p.parse(c); err != nil {
		return nil, err
	}
	return c, nil
}

// ApprovalCommands are the CLI commands that decide request id, naming this
// configuration by its absolute path so that they work from any folder.
func (c *Config) ApprovalCommands(id string) []string {
	path := c.Path
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	// With operators, the CLI acts as the owner of the operator's token
	// ($BACKPLANE_OPERATOR_TOKEN or --operator-token-file), never as a
	// name typed on the command line: no --as to suggest. Without, the
	// decider must name themselves: the login name of whoever runs the
	// gateway, a real value rather than a placeholder an agent would pass
	// on as it stands (issue 26, item 6).
	as := ""
	if len(c.Operators) == 0 {
		if name := loginName(); name != "" {
			as = " --as " + name
		}
	}
	return []string{
		fmt.Sprintf("backplane approvals show %s --config %s", id, path),
		fmt.Sprintf("backplane approvals approve %s --config %s%s", id, path, as),
		fmt.Sprintf("backplane approvals deny %s --config %s%s", id, path, as),
	}
}

// loginName is the user running this process, when it is a plain word a
// shell takes as it is ("" otherwise).
func loginName() string {
	u, err := user.Current()
	if err != nil || u.Username == "" {
		return ""
	}
	for _, r := range u.Username {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return ""
		}
	}
	return u.Username
}
