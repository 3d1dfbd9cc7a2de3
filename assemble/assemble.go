// Package assemble builds a running gateway from a parsed configuration
// (*config.Config) and takes it down again.
//
// What it promises:
//
//   - [Open] opens, in this order, the audit log, the store (the embedded
//     SQLite store for a folder, the shared PostgreSQL store for a
//     postgres:// URL, as config parsed the store's kind), a gateway with
//     the configuration's policy, budgets, approvals and limits, the command
//     tools (package backend/command), the enabled built-in tools (package
//     backend/builtin), and last every upstream MCP server (package
//     backend/upstream), whose tools collide with any registered before. It fails
//     with a *config.Error naming the file and, where one applies, the line,
//     and then leaves nothing open or running.
//   - One audit log ([Runtime.Audit]): [Options.Logger] when given; else
//     the file [Options.AuditLog] names ("-" for [Options.Stderr]); else
//     the configuration's log.file; else audit.log in the store folder, or
//     Options.Stderr for a store that is not a folder. A file is written
//     through package internal/auditlog: records are buffered for at most
//     200ms (Close writes them all), appended whole (concurrent processes
//     never split one another's records) and the file is rotated past
//     log.max_size, log.max_files rotated files kept. The configuration's
//     log.level applies.
//   - One operational log ([Runtime.Log], [Options.Log], default text lines
//     on Options.Stderr, or with [Options.OperationalLogFile] in
//     backplane.log beside the audit log file), apart from the audit log: the store's own events
//     (recovery, lease, contention), the upstreams' (starts, outages,
//     catalog changes), the tracer's, and a failed write of the audit log.
//     No audit event goes there and no operational event goes to the audit
//     log (docs/audit.md).
//   - A tracing key opens a tracer provider (package tracing) whose tracer
//     the gateway opens its spans with ([Runtime.Tracing]).
//   - The policy is compiled once (config.Config.CompiledPolicy) and live
//     ([Runtime.Policy]): [Runtime.ReloadPolicy] re-reads the configuration
//     file and puts its policy in force for calls authorized from then on,
//     through the gateway's operator action (gateway.Gateway.ReloadPolicy,
//     which audits it); an invalid file changes nothing.
//   - Each tool process's sandbox is decided here ([Runtime.Sandbox]): the
//     configuration's sandbox sections applied to what the kernel can do,
//     probed once per process (package config only parses them).
//   - [OpenServer] is what "backplane serve" runs, as one library call: the
//     listener (bound before anything else is opened), the runtime, the
//     OAuth verifier, TLS, the console, the hook endpoints and the MCP
//     server, background retention, the pending-approval announcer and the
//     control socket of reloads ([ControlSocket], [RequestReload]); a
//     [Serving] serves them ([Serving.Run] or [Serving.Handler]) and
//     [Serving.Close] takes them down, the runtime last.
//   - [Runtime.Close] closes the upstream connections (their programs are
//     stopped), the built-in tools' workspace, the tracer provider (what is
//     queued is exported, for at most 5s), the store, and the audit log
//     file last, since the others may still log.
package assemble

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/backend/builtin"
	"github.com/agentbackplane/backplane/backend/command"
	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/auditlog"
	"github.com/agentbackplane/backplane/internal/credstore"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
	"github.com/agentbackplane/backplane/tracing"
	"github.com/agentbackplane/backplane/validator/draft2020"
	"go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// AuditLogName is the file, in the store folder, that receives the audit
// events when nothing else names where they go.
const AuditLogName = "audit.log"

// OperationalLogName is the file, beside the audit log file, of the
// operational log of a one-shot command (Options.OperationalLogFile).
const OperationalLogName = "backplane.log"

// Options configure Open. A nil *Options means the defaults.
type Options struct {
	// NoUpstreams leaves the MCP upstreams unconnected (their tools are not
	// registered): for commands that only read or decide on the store, such
	// as journal, approvals and budget, which must not start servers.
	NoUpstreams bool
	// Degraded lets a server not marked required fail at start without
	// failing Open: the gateway runs without it and retries it in the
	// background (upstreams.go). For serve, which runs for long; a
	// one-shot command fails instead, naming the server.
	Degraded bool
	// Logger, when set, receives the audit events, and no log file is
	// opened.
	Logger *slog.Logger
	// Log, when set, is the operational log (see the package doc).
	// Default: text lines on Stderr, or in OperationalLogName beside the
	// audit log file with OperationalLogFile.
	Log *slog.Logger
	// OperationalLogFile sends the default operational log to the file
	// OperationalLogName in the audit log file's folder (the store folder
	// by default) rather than Stderr: for one-shot commands, whose stderr
	// is their own. No effect when the audit log is not a file.
	OperationalLogFile bool
	// AuditLog, when set, overrides the configuration's log.file: a file
	// (appended to), or "-" for Stderr.
	AuditLog string
	// Stderr is where "-" and the default of a store that is not a folder
	// send the audit events. Default os.Stderr.
	Stderr io.Writer
	// Approver, when set, is asked for decisions interactively.
	Approver gateway.Approver
	// Asker is the interaction channel of ask_user_question (a terminal
	// prompt); nil means none. A call may carry its own.
	Asker tool.Asker
	// ApprovalHints, when set, lists the ways to decide an approval request
	// (serve adds its console URL). Default: the CLI commands, with
	// --config naming this configuration by its absolute path.
	ApprovalHints func(id string) []string
	// UpstreamCallback is the public URL of serve's upstream login
	// callback (server.PathUpstreamCallback), where a per_caller server's
	// authorization server sends a caller's browser back; "" (not serve):
	// a caller's login cannot complete in this process.
	UpstreamCallback string
	// Version is Backplane's version, the service.version of its traces.
	Version string
	// AuditWith are attributes every audit event of this runtime carries
	// (slog key-value pairs), last in each event, after the event's own
	// (whose order readers rely on): the CLI adds the OS user who ran it,
	// so that an operator action records the account behind it, not only
	// the operator's name.
	AuditWith []any
}

// Runtime is an opened configuration: its store, its gateway, its audit
// log and its upstreams.
type Runtime struct {
	Gateway *gateway.Gateway
	Store   store.Store
	Config  *config.Config
	// Audit receives the audit events (the gateway's and an operator's).
	Audit *slog.Logger
	// Log is the operational log: what is not an audit event.
	Log *slog.Logger
	// Policy is the policy in force; [Runtime.ReloadPolicy] replaces it.
	// It also grants the upstreams' resources and prompts.
	Policy *policy.Live
	// Content is the upstreams' resources and prompts (nil without
	// upstreams): a resource URI or prompt name two servers list is
	// refused at Open.
	Content *upstream.Content

	// Sandbox is the sandbox decision of each tool process, by tool name
	// (a server by its name); SandboxNotes the distinct reasons tools run
	// unsandboxed, for the start to say once.
	Sandbox      map[string]SandboxDecision
	SandboxNotes []string

	// Tracing, when the configuration has a tracing key, is the tracer
	// provider the gateway's spans go to; Close flushes and stops it.
	Tracing *tracing.Provider

	// Tokens is where every upstream's OAuth tokens are kept: sealed in
	// the store with secrets: set (shared by the replicas), else in this
	// process's memory (tokens.go).
	Tokens upstream.TokenStore
	sealed *credstore.Tokens // Tokens when sealed; nil otherwise
	// The service mode's logins started from the console, completed at
	// serve's callback (tokens.go).
	serviceLogins *upstream.ServiceLogins

	version   string // Options.Version
	closers   []io.Closer
	upstreams []*upstream.Upstream // also in closers
	late      *lateUpstreams       // servers that failed at start, retried (upstreams.go)
	// The per_caller servers' logins in progress (upstream_callers.go);
	// their tokens are kept in Tokens, as the service mode's are.
	logins *upstream.Logins
	// loginStore keeps them: sealed in the store with secrets: set (so a
	// callback may reach any replica), else nil (this process's memory).
	loginStore upstream.LoginStore
}

// Close closes what Open opened, in the reverse order. It may be called
// more than once.
func (r *Runtime) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i].Close())
	}
	r.closers = nil
	return errors.Join(errs...)
}

// Open builds the gateway cfg describes. Close the Runtime when done.
func Open(ctx context.Context, cfg *config.Config, opts *Options) (_ *Runtime, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("assemble: no configuration")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	rt := &Runtime{Config: cfg, Log: o.Log, version: o.Version}
	if rt.Log == nil {
		rt.Log = slog.New(slog.NewTextHandler(o.Stderr, nil))
	}
	userLog := o.Log != nil
	defer func() {
		if err != nil {
			rt.Close() // what was opened before the failure
		}
	}()

	// Parse compiled the policy (once: CompiledPolicy); a Config built by
	// hand is compiled now, and its budgets are checked rather than trusted.
	rules, err := cfg.CompiledPolicy()
	if err != nil {
		return nil, err
	}
	rt.Policy = policy.NewLive(rules)
	for _, q := range cfg.Budgets {
		if err := q.Check(); err != nil {
			return nil, &config.Error{File: cfg.Path, Msg: err.Error()}
		}
	}
	kind := cfg.StoreKind
	if kind == "" { // a Config built by hand
		kind = config.StoreKindOf(cfg.Store)
	}
	if kind != config.StoreSQLite && kind != config.StorePostgres {
		return nil, &config.Error{File: cfg.Path, Msg: fmt.Sprintf("store kind %q: only %s and %s are known", kind, config.StoreSQLite, config.StorePostgres)}
	}

	auditPath, exposed := "", false
	if rt.Audit, auditPath, exposed, err = rt.openAuditLog(cfg, kind, &o); err != nil {
		return nil, err
	}
	if len(o.AuditWith) > 0 {
		rt.Audit = slog.New(trailingAttrs{rt.Audit.Handler(), slog.Group("", o.AuditWith...).Value.Group()})
	}
	if !userLog && o.OperationalLogFile && auditPath != "" {
		path := filepath.Join(filepath.Dir(auditPath), OperationalLogName)
		maxSize := cfg.Log.MaxSize
		if exposed {
			maxSize = -1
		}
		w, err := auditlog.Open(path, &auditlog.Options{MaxSize: maxSize, MaxFiles: cfg.Log.MaxFiles})
		if err != nil {
			return nil, &config.Error{File: cfg.Path, Msg: "operational log: " + err.Error(), Err: err}
		}
		rt.closers = append(rt.closers, w)
		rt.Log = slog.New(slog.NewTextHandler(w, nil))
	}
	if exposed {
		rt.Log.Info("the audit log lies in the workspace: it is not rotated, since rotated files there would be visible to the built-in tools; put log.file in the store folder or outside the workspace to rotate it", "file", auditPath)
	}
	st, err := openStore(cfg, kind, rt.Log)
	if err != nil {
		return nil, err
	}
	rt.Store = st
	rt.closers = append(rt.closers, st)
	if err := rt.openTokens(); err != nil {
		return nil, err
	}
	rt.openCallerAuth(&o)    // upstream_callers.go: after openTokens, for its store
	rt.openServiceLogins(&o) // tokens.go

	// Tracing before the gateway (which takes its tracer); closed after
	// the upstreams, whose calls end spans, and before the store.
	var tracer trace.Tracer
	if cfg.Tracing != nil {
		tp, err := tracing.New(ctx, &tracing.Options{
			Endpoint: cfg.Tracing.Endpoint, Protocol: cfg.Tracing.Protocol,
			Sample: cfg.Tracing.Sample, Headers: cfg.Tracing.Headers,
			ServiceVersion: o.Version, Logger: rt.Log,
		})
		if err != nil {
			return nil, &config.Error{File: cfg.Path, Line: cfg.Tracing.Line, Msg: err.Error(), Err: err}
		}
		rt.Tracing = tp
		rt.closers = append(rt.closers, tp)
		tracer = tp.Tracer()
	}

	hints := o.ApprovalHints
	if hints == nil {
		hints = cfg.ApprovalCommands
	}
	g := gateway.New(&gateway.Options{
		Store:   st,
		Policy:  rt.Policy,
		Budgets: cfg.Budgets,
		Approvals: gateway.ApprovalOptions{
			Expire:     cfg.Approvals.Expire,
			Wait:       cfg.Approvals.Wait,
			MaxPending: cfg.Approvals.MaxPending,
			// Zero: the default (gateway.DefaultSelfApproveTimeout).
			SelfApproveTimeout: cfg.Approvals.SelfApproveTimeout,
			Approver:           o.Approver,
			Hints:              hints,
		},
		TaskLease:      cfg.Approvals.TaskLease,
		Operators:      cfg.OperatorNames(),
		Logger:         rt.Audit,
		Timeout:        cfg.Limits.Timeout,
		MaxResultBytes: cfg.Limits.MaxResultBytes,
		Limits:         cfg.Limits.Schema(),
		Tracer:         tracer,
	})
	g.SetConnections(&connections{rt: rt})
	for _, t := range cfg.Tools {
		sb, err := sandboxFor(cfg, kindCommand, t.Sandbox)
		if err != nil {
			return nil, &config.Error{File: cfg.Path, Line: t.Line, Msg: fmt.Sprintf("tool %s: %v", t.Name, err)}
		}
		rt.noteSandbox(t.Name, sb)
		cb, err := command.New(command.Spec{Argv: t.Command, Env: t.Env, Dir: t.Dir, MaxOutputBytes: t.MaxOutputBytes, Sandbox: sb.Policy})
		if err != nil {
			return nil, &config.Error{File: cfg.Path, Line: t.Line, Msg: fmt.Sprintf("tool %s: %v", t.Name, err)}
		}
		err = g.Register(ctx, tool.Tool{
			Name:        t.Name,
			Description: t.Description,
			InputSchema: t.InputSchemaJSON,
			Safety:      t.Safety,
			Timeout:     t.Timeout,
			Backend:     cb,
			Source:      tool.SourceTools,
			MainArg:     mainArgField(t.MainArg),
		})
		if err != nil {
			return nil, &config.Error{File: cfg.Path, Line: t.Line, Msg: err.Error()}
		}
	}
	if err := rt.registerBuiltins(ctx, g, o.Asker); err != nil {
		return nil, err
	}
	// Last: a server's tools collide with any tool registered before.
	if !o.NoUpstreams {
		if err := rt.connectServers(ctx, g, o.Stderr, o.Degraded); err != nil {
			return nil, err
		}
		if len(rt.upstreams) > 0 {
			if rt.Content, err = upstream.NewContent(ctx, rt.upstreams); err != nil {
				return nil, &config.Error{File: cfg.Path, Msg: err.Error(), Err: err}
			}
		}
	}
	rt.Gateway = g
	return rt, nil
}

// openAuditLog opens the one audit log (see the package doc).
// It returns the file's path ("" when it is not a file) and whether it
// lies in the workspace, where it is not rotated (see exposedRotation).
func (rt *Runtime) openAuditLog(cfg *config.Config, kind config.StoreKind, o *Options) (_ *slog.Logger, path string, exposed bool, _ error) {
	if o.Logger != nil {
		return o.Logger, "", false, nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Log.Level)); err != nil {
		return nil, "", false, &config.Error{File: cfg.Path, Msg: "log level: " + err.Error()}
	}
	hopts := &slog.HandlerOptions{Level: level}
	path = o.AuditLog
	if path == "" {
		path = cfg.Log.File
	}
	if path == "" {
		if kind != config.StoreSQLite {
			path = "-"
		} else {
			// As the store would create it.
			if err := os.MkdirAll(cfg.Store, 0o700); err != nil {
				return nil, "", false, &config.Error{File: cfg.Path, Msg: "audit log: " + err.Error(), Err: err}
			}
			path = filepath.Join(cfg.Store, AuditLogName)
		}
	}
	if path == "-" {
		// stderr is often a terminal: the events' strings (commands,
		// tool names) with their controls and bidi characters escaped.
		return slog.New(slog.NewJSONHandler(jsonEscaping{o.Stderr}, hopts)), "", false, nil
	}
	maxSize := cfg.Log.MaxSize
	if exposed = exposedRotation(cfg, kind, path); exposed {
		// The built-in tools and sandboxes hide the file by its name; the
		// rotated files' names are new at each rotation.
		maxSize = -1
	}
	w, err := auditlog.Open(path, &auditlog.Options{
		MaxSize: maxSize, MaxFiles: cfg.Log.MaxFiles,
		OnError: func(err error) {
			rt.Log.Error("audit log write failed: its records of the last interval are lost", "error", err)
		},
	})
	if err != nil {
		return nil, "", false, &config.Error{File: cfg.Path, Msg: "audit log: " + err.Error(), Err: err}
	}
	rt.closers = append(rt.closers, w)
	return slog.New(slog.NewJSONHandler(w, hopts)), path, exposed, nil
}

// exposedRotation reports whether the audit log file lies in the workspace
// and outside the store folder (which is hidden as a whole).
func exposedRotation(cfg *config.Config, kind config.StoreKind, path string) bool {
	inside := func(p, dir string) bool {
		if dir == "" {
			return false
		}
		r, err := filepath.Rel(dir, p)
		return err == nil && r != ".." && !strings.HasPrefix(r, "../")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return true
	}
	if kind == config.StoreSQLite && cfg.Store != "" {
		if st, err := filepath.Abs(cfg.Store); err == nil && inside(abs, st) {
			return false
		}
	}
	return inside(abs, cfg.Workspace)
}

// openStore opens the configured store: a postgres:// URL is the shared
// PostgreSQL store, a folder the embedded SQLite store.
func openStore(cfg *config.Config, kind config.StoreKind, logger *slog.Logger) (store.Store, error) {
	switch kind {
	case config.StorePostgres:
		u, password := "postgres://(a URL that does not parse)", ""
		if pu, err := url.Parse(cfg.Store); err == nil {
			u = pu.Redacted() // never print a password
			password, _ = pu.User.Password()
		}
		if cfg.StoreSource != "" {
			// Read from the environment or a file to keep it out of
			// sight: named by where it came from, not even redacted.
			u = "(" + cfg.StoreSource + ")"
		}
		// Connecting, migrating and recovering; bounded, since Open's
		// context does not reach here.
		const openTimeout = 30 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
		defer cancel()
		st, err := postgres.Open(ctx, cfg.Store, postgresOptions(cfg.Postgres, logger))
		if err != nil {
			msg := err.Error()
			if password != "" {
				// The store's errors do not show it; make sure.
				msg = strings.ReplaceAll(msg, password, "xxxxx")
			}
			return nil, &config.Error{File: cfg.Path, Msg: fmt.Sprintf("store %s: %s", u, msg), Err: err}
		}
		return st, nil
	case config.StoreSQLite:
		st, err := sqlite.Open(cfg.Store, &sqlite.Options{Logger: logger})
		if err != nil {
			return nil, &config.Error{File: cfg.Path, Msg: fmt.Sprintf("store %s: %v", cfg.Store, err), Err: err}
		}
		return st, nil
	}
	return nil, &config.Error{File: cfg.Path, Msg: fmt.Sprintf("store kind %q: only %s and %s are known", kind, config.StoreSQLite, config.StorePostgres)}
}

// postgresOptions are the store options the postgres section sets (zero
// fields: the store's defaults).
func postgresOptions(pc config.PostgresConfig, logger *slog.Logger) *postgres.Options {
	return &postgres.Options{LeaseTTL: pc.LeaseTTL, RenewEvery: pc.RenewEvery, MaxConns: pc.MaxConns, Logger: logger}
}

// registerBuiltins opens the workspace and registers the enabled tools.
func (rt *Runtime) registerBuiltins(ctx context.Context, g *gateway.Gateway, asker tool.Asker) error {
	c := rt.Config
	if len(c.Builtin.Enable) == 0 {
		return nil
	}
	var sb SandboxDecision
	if slices.Contains(c.Builtin.Enable, "bash") {
		var err error
		if sb, err = sandboxFor(c, kindBash, c.Builtin.BashSandbox); err != nil {
			return &config.Error{File: c.Path, Line: c.Builtin.Line, Msg: "bash: " + err.Error()}
		}
		rt.noteSandbox("bash", sb)
	}
	set, err := builtin.New(&builtin.Options{
		Workspace: c.Workspace,
		Bash:      builtin.BashOptions{Timeout: c.Builtin.Bash.Timeout, MaxTimeout: c.Builtin.Bash.MaxTimeout, Env: c.Builtin.Bash.Env, Sandbox: sb.Policy},
		URLFetch:  builtin.URLFetchOptions{Allow: c.Builtin.URLFetchAllow},
		Asker:     asker,
		Hide:      c.PrivatePaths(),
	})
	if err != nil {
		return &config.Error{File: c.Path, Line: c.Builtin.Line, Msg: fmt.Sprintf("workspace %s: %v", c.Workspace, err)}
	}
	rt.closers = append(rt.closers, set)
	for _, name := range c.Builtin.Enable {
		t, ok := set.Tool(name)
		if !ok {
			return &config.Error{File: c.Path, Line: c.Builtin.Line, Msg: "unknown built-in tool " + name}
		}
		t.Safety = c.Builtin.Safety[name].Apply(t.Safety)
		if err := g.Register(ctx, t); err != nil {
			return &config.Error{File: c.Path, Line: c.Builtin.Line, Msg: err.Error()}
		}
	}
	return nil
}

// connectServers starts or connects every configured server and registers
// its tools in g; each connection is closed with the Runtime. While a
// server starts, a line on stderr every few seconds says so. A server
// that fails to start refuses the whole start, unless degraded (serve):
// then only when it is marked required (or its tools collide with
// others: a mistake of the configuration, not an outage); any other is
// retried in the background while the gateway serves without it
// (upstreams.go).
func (rt *Runtime) connectServers(ctx context.Context, g *gateway.Gateway, stderr io.Writer, degraded bool) error {
	c := rt.Config
	rt.late = newLateUpstreams()
	rt.closers = append(rt.closers, rt.late) // closed after the upstreams connected at start
	for _, s := range c.Servers {
		var sb SandboxDecision
		if s.URL == "" {
			var err error
			if sb, err = sandboxFor(c, kindServer, s.Sandbox); err != nil {
				return &config.Error{File: c.Path, Line: s.Line, Msg: fmt.Sprintf("server %s: %v", s.Name, err)}
			}
			rt.noteSandbox(s.Name, sb)
		}
		srv, opts := rt.serverOptions(s, sb, g)
		opts.StartProgress = startProgressLine(stderr, s)
		u, err := upstream.Connect(ctx, srv, opts)
		if err != nil {
			msg := err.Error()
			var ce *upstream.CollisionError
			if errors.As(err, &ce) {
				msg += ": " + rt.whereDefined(g, ce.Tool)
			}
			if !degraded || s.Required || ce != nil || ctx.Err() != nil {
				return &config.Error{File: c.Path, Line: s.Line, Msg: msg, Err: err}
			}
			rt.Log.Warn("upstream failed to start: serving without it (degraded) and retrying in the background; mark it required: true to refuse the start instead",
				"server", s.Name, "error", msg)
			rt.late.retry(s, srv, opts, err, rt.Log)
			continue
		}
		rt.closers = append(rt.closers, u)
		rt.upstreams = append(rt.upstreams, u)
	}
	g.SetUpstreams(rt.upstreamStates)
	return nil
}

// serverOptions is how s is connected, at start and on a retry.
func (rt *Runtime) serverOptions(s config.ServerConfig, sb SandboxDecision, g *gateway.Gateway) (upstream.Server, *upstream.Options) {
	c := rt.Config
	var oauth *upstream.OAuth
	if s.OAuth != nil {
		oauth = &upstream.OAuth{Grant: s.OAuth.Grant, ClientID: s.OAuth.ClientID, ClientSecret: s.OAuth.ClientSecret,
			ClientIDMetadataURL: s.OAuth.ClientIDMetadataURL, Scopes: s.OAuth.Scopes, TokenURL: s.OAuth.TokenURL, Tokens: rt.Tokens}
		callerOAuth(oauth, s.OAuth) // upstream_callers.go
	}
	return upstream.Server{
			Name: s.Name, Prefix: s.Prefix, Command: s.Command, Env: s.Env, Dir: c.Workspace, // started in the workspace, never the configuration's folder
			URL: s.URL, Headers: s.Headers, OAuth: oauth, Validator: s.Validator, Sandbox: sb.Policy,
			Bridge:           &upstream.Bridge{Sampling: s.Bridge.Sampling, Elicitation: s.Bridge.Elicitation, Roots: s.Bridge.Roots},
			AcceptAddedTools: s.AcceptAddedTools,
			MainArg:          mainArgField(s.MainArg),
		}, &upstream.Options{
			Registry:       g,
			Logger:         rt.Log,
			Draft2020:      &draft2020.Options{MaxArgumentBytes: c.Limits.MaxArgumentBytes},
			ConnectTimeout: s.ConnectTimeout,
			Tokens:         rt.Tokens,
			Logins:         rt.logins,
		}
}

// upstreamStates is every configured server's state, in the order of the
// configuration, for the gateway's health checks.
func (rt *Runtime) upstreamStates() []opsview.UpstreamState {
	var out []opsview.UpstreamState
	for _, s := range rt.Config.Servers {
		st := opsview.UpstreamState{Name: s.Name, Required: s.Required}
		if u, ok := rt.Upstream(s.Name); ok {
			st.Up, st.Restarts, st.Err = u.State()
			st.Protocol = u.Protocol()
			st.Phase = "up"
			if !st.Up {
				st.Phase = "restarting" // a connected upstream reconnects until closed
			}
		} else if err := rt.late.failure(s.Name); err != nil {
			st.Err = fmt.Errorf("not started: %w", err)
			st.Phase = "starting" // retried in the background (lateUpstreams)
		} else {
			continue // NoUpstreams, or not yet tried
		}
		out = append(out, st)
	}
	return out
}

// whereDefined says which line of the configuration defines the tool
// name, for a collision's message (both lines named), from the source its
// registration recorded.
func (rt *Runtime) whereDefined(g *gateway.Gateway, name string) string {
	c := rt.Config
	t, _, ok := g.Tool(name)
	if srv, isServer := tool.SourceServer(t.Source); ok && isServer {
		for _, s := range c.Servers {
			if s.Name == srv {
				return fmt.Sprintf("a tool of server %s (line %d)", s.Name, s.Line)
			}
		}
	}
	switch {
	case ok && t.Source == tool.SourceTools:
		for _, ct := range c.Tools {
			if ct.Name == name {
				return fmt.Sprintf("the command tool at line %d", ct.Line)
			}
		}
	case ok && t.Source == tool.SourceBuiltin:
		if c.Builtin.Line > 0 {
			return fmt.Sprintf("a built-in tool (builtin, line %d)", c.Builtin.Line)
		}
		return "a built-in tool (enabled by default)"
	}
	return "a tool registered before the servers"
}

// Upstream returns the connection to the named server.
func (rt *Runtime) Upstream(name string) (*upstream.Upstream, bool) {
	for _, u := range rt.allUpstreams() {
		if u.Name() == name {
			return u, true
		}
	}
	return nil, false
}

// startProgressLine is the "still starting" line of a server that takes
// long to start: people should see a first package download at work, and
// how long it may take before the connect timeout gives up.
func startProgressLine(w io.Writer, s config.ServerConfig) func(time.Duration) {
	limit := s.ConnectTimeout
	if limit <= 0 {
		limit = config.DefaultConnectTimeout
	}
	why := ""
	if len(s.Command) > 0 && (filepath.Base(s.Command[0]) == "npx" || filepath.Base(s.Command[0]) == "uvx") {
		why = fmt.Sprintf(" (%s may be downloading the package)", filepath.Base(s.Command[0]))
	}
	return func(waited time.Duration) {
		fmt.Fprintf(w, "still starting server %s%s: %v of connect_timeout %v\n", s.Name, why, waited, limit)
	}
}

// trailingAttrs adds attrs at the end of every record, after the record's
// own attributes (slog's With would put them first).
type trailingAttrs struct {
	slog.Handler
	attrs []slog.Attr
}

func (h trailingAttrs) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	return h.Handler.Handle(ctx, r)
}

func (h trailingAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return trailingAttrs{h.Handler.WithAttrs(as), h.attrs}
}

func (h trailingAttrs) WithGroup(name string) slog.Handler {
	return trailingAttrs{h.Handler.WithGroup(name), h.attrs}
}

// jsonEscaping writes each record of a slog JSON handler (one Write per
// record) through termtext.JSON: the same JSON, safe on a terminal.
type jsonEscaping struct{ w io.Writer }

func (j jsonEscaping) Write(p []byte) (int, error) {
	if _, err := j.w.Write(termtext.JSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// mainArgField is the member a configured main_arg names, "" for none:
// what a tool's registration records (tool.Tool.MainArg).
func mainArgField(m *policy.MainArg) string {
	if m == nil {
		return ""
	}
	return m.Field
}
