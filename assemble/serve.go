package assemble

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/console"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/opauth"
	"github.com/agentbackplane/backplane/internal/sandbox"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/internal/tlsreload"
	"github.com/agentbackplane/backplane/oauth"
	"github.com/agentbackplane/backplane/server"
)

// DefaultShutdownGrace is how long calls in flight may take to finish
// when a Serving stops before they are cancelled.
const DefaultShutdownGrace = 10 * time.Second

// ServeOptions configure OpenServer. A nil *ServeOptions means the
// defaults: HTTP on serve.http, the log on os.Stderr.
type ServeOptions struct {
	// Open are the runtime's options (nil: the defaults). OpenServer sets
	// Degraded (a server that fails to start is retried, not fatal) and,
	// over HTTP when ApprovalHints is nil, adds the console's page of a
	// request to the ways to decide it.
	Open *Options
	// Stdio serves one client on Stdin and Stdout as serve.stdio_caller:
	// no listener, no console, no OAuth and no TLS.
	Stdio  bool
	Stdin  io.ReadCloser
	Stdout io.WriteCloser
	// HTTPAddr, when set, is listened on instead of serve.http. It is the
	// caller's to check (config.CheckServeAddr): a flag, not the file.
	HTTPAddr string
	// Logger is serve's own log (the server's, the console's, reloads,
	// start-up warnings). Default: text lines on Open.Stderr.
	Logger *slog.Logger
	// Announce, when set, receives a line per new pending approval
	// request: id, caller, tool, short arguments and how to decide it.
	Announce io.Writer
	// NoControlSocket leaves out the control socket of "backplane reload"
	// (ControlSocket).
	NoControlSocket bool
	// ShutdownGrace bounds how long Run and Close let calls in flight
	// finish. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
}

// Serving is a configuration being served, what "backplane serve" runs:
// the runtime ([Open]), the MCP server over it (package server) with its
// OAuth verifier, TLS and hook endpoints, the operators' console at /ui,
// background retention, the announcer of pending approvals and the
// control socket of reloads. Run serves it; Close takes it all down.
type Serving struct {
	Runtime *Runtime
	Server  *server.Server

	cfg       *config.Config
	log       *slog.Logger
	stdio     bool
	stdin     io.ReadCloser
	stdout    io.WriteCloser
	ln        net.Listener
	addr      string // the address listened on, as configured (or HTTPAddr)
	tls       *tlsreload.Reloader
	base      string // where clients reach it: serve.public_url, else the listener's URL
	listening string // the listener's own URL
	grace     time.Duration

	stop     context.CancelFunc // the background work
	bg       sync.WaitGroup
	stopAnn  func()
	ran      atomic.Bool
	once     sync.Once
	closeErr error
}

// OpenServer opens what cfg serves: it binds the HTTP listener first (a
// port already taken fails before the store is opened or any upstream
// started), opens the runtime, the OAuth verifier (serve.oauth), TLS
// (serve.tls), the console and the server, says once in the log why tools
// run unsandboxed if some do, and starts the background work: retention
// (cfg.Retention), the announcer (ServeOptions.Announce) and the control
// socket. It fails with nothing left open. Close the Serving when done.
func OpenServer(ctx context.Context, cfg *config.Config, opts *ServeOptions) (_ *Serving, err error) {
	if cfg == nil {
		return nil, errors.New("assemble: no configuration")
	}
	var so ServeOptions
	if opts != nil {
		so = *opts
	}
	var o Options
	if so.Open != nil {
		o = *so.Open
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if so.Logger == nil {
		so.Logger = slog.New(slog.NewTextHandler(o.Stderr, nil))
	}
	if so.ShutdownGrace <= 0 {
		so.ShutdownGrace = DefaultShutdownGrace
	}
	if so.Stdio && cfg.Serve.StdioCaller == "" {
		return nil, fmt.Errorf("%s: serve.stdio_caller is not set: --stdio needs the caller its calls are made as", cfg.Path)
	}
	s := &Serving{cfg: cfg, log: so.Logger, stdio: so.Stdio, stdin: so.Stdin, stdout: so.Stdout, grace: so.ShutdownGrace}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if !so.Stdio {
		addr := cfg.Serve.HTTP
		if so.HTTPAddr != "" {
			addr = so.HTTPAddr
		}
		s.addr = addr
		if s.ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listening on %s: %w", addr, err)
		}
		s.listening = "http://" + s.ln.Addr().String()
		if cfg.Serve.TLS != nil {
			s.listening = "https://" + s.ln.Addr().String()
		}
		s.base = s.listening
		if pub := cfg.Serve.PublicURL; pub != "" {
			// Where clients and browsers reach it: the proxy in front,
			// not the loopback listener behind it.
			s.base = pub
		}
		if o.UpstreamCallback == "" {
			o.UpstreamCallback = strings.TrimSuffix(s.base, "/") + server.PathUpstreamCallback
		}
		if o.ApprovalHints == nil {
			base := s.base
			o.ApprovalHints = func(id string) []string {
				return append(cfg.ApprovalCommands(id), base+"/ui/approvals/"+id)
			}
		}
	}
	o.Degraded = true
	rt, err := Open(ctx, cfg, &o)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", cfg.Path, err)
	}
	s.Runtime = rt
	if err := s.openServer(); err != nil {
		return nil, err
	}
	// Once at startup: why tools run unsandboxed, if some do.
	for _, note := range rt.SandboxNotes {
		s.log.Warn("tool processes run unsandboxed", "reason", note)
	}
	sandboxAtStart(rt, s.log)

	bctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	// Retention: prune in the background for the life of the server
	// (keep 0 is for ever), stopped before the store closes.
	s.bg.Go(func() { rt.Gateway.KeepPruning(bctx, cfg.Retention.Keep, cfg.Retention.Every) })
	if so.Announce != nil {
		s.stopAnn = announcePending(so.Announce, rt.Gateway)
	}
	if path := ControlSocket(cfg); path != "" && !so.NoControlSocket {
		ln, err := listenControl(path)
		if err != nil {
			s.log.Warn("no control socket: backplane reload will not reach this serve (SIGHUP still reloads)", "error", err)
		} else {
			s.bg.Go(func() { serveControl(bctx, ln, func(via string) error { return s.ReloadPolicy(bctx, via) }, s.log) })
		}
	}
	return s, nil
}

// openServer builds the server's options from the configuration: tokens,
// operators, limits, OAuth, TLS, the console, the hooks, the content.
func (s *Serving) openServer() error {
	cfg, rt := s.cfg, s.Runtime
	// Over stdio there are no tokens: the issuer's keys are not read.
	var verifier *oauth.Verifier
	if !s.stdio && cfg.Serve.OAuth != nil {
		o := cfg.Serve.OAuth
		v, err := oauth.New(&oauth.Options{
			Issuer: o.Issuer, Audience: o.Audience, KeySetFile: o.JWKSFile, KeySetURL: o.JWKSURL,
			CallerClaim: o.CallerClaim, AuthorizationServers: o.AuthorizationServers, Logger: s.log,
		})
		if err != nil {
			return fmt.Errorf("%s: serve.oauth: %w", cfg.Path, err)
		}
		verifier = v
	}
	var served atomic.Pointer[server.Server] // for the console's sessions page
	// One table of tokens and one count of wrong ones for /mcp, /metrics
	// and the console.
	tokens := opauth.New(cfg.OperatorTokens(), cfg.Serve.Tokens, nil)
	opts := &server.Options{
		Operators:    cfg.OperatorTokens(),
		Tokens:       cfg.Serve.Tokens,
		TokenAuth:    tokens,
		StdioCaller:  cfg.Serve.StdioCaller,
		ApprovalWait: cfg.Serve.ApprovalWait,
		Logger:       s.log,
		Version:      rt.version,
		// Zero: the server's defaults.
		SessionIdleTimeout:   cfg.Serve.SessionIdleTimeout,
		MaxSessionsPerCaller: cfg.Serve.MaxSessionsPerCaller,
		RateLimit:            cfg.Serve.RatePerSecond,
		RateBurst:            cfg.Serve.RateBurst,

		MaxSubscriptionsPerSession: cfg.Serve.MaxSubscriptionsPerSession,
		MaxSubscriptionsPerCaller:  cfg.Serve.MaxSubscriptionsPerCaller,
		ResumeBytes:                cfg.Serve.ResumeBytes,
		ResumeGrace:                cfg.Serve.ResumeGrace,
		AllowedOrigins:             publicOrigins(cfg),
		Collectors:                 runtimeCollectors(rt),

		// Besides the static tokens (serve.oauth, serve.anonymous_caller).
		OAuth:           verifier,
		AnonymousCaller: cfg.Serve.AnonymousCaller,
	}
	if !s.stdio {
		opts.Console = s.newConsole(consoleSessions(&served), tokens)
		opts.UpstreamCallback = rt.loginCallback() // tokens.go
	}
	// The agents' hook endpoints (backplane hook --url) only decide, never
	// run a tool, and take the callers' tokens as /mcp does.
	opts.Hooks = &server.HookOptions{Workspace: cfg.Workspace, MCPTool: cfg.MCPToolOf, MCPServer: cfg.MCPServerOf}
	if rt.Content != nil {
		opts.Content, opts.ContentPolicy = rt.Content, rt.Policy
	}
	// The key that signs a self-approval's request state (2026-07-28):
	// replicas must share it, else one's state is refused by another.
	if env := cfg.Serve.RequestStateKeyEnv; env != "" {
		key := os.Getenv(env)
		if len(key) < 32 {
			return fmt.Errorf("%s: serve.request_state_key_env: $%s must hold a key of at least 32 bytes (it holds %d)", cfg.Path, env, len(key))
		}
		opts.RequestStateKey = []byte(key)
	}
	if t := cfg.Serve.TLS; t != nil && !s.stdio {
		r, err := tlsreload.New(tlsreload.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}, s.log)
		if err != nil {
			return fmt.Errorf("%s: serve.tls: %w", cfg.Path, err)
		}
		s.tls = r
		opts.TLS = r.Config()
		opts.CertCaller = t.CallerFrom
	}
	s.Server = server.New(rt.Gateway, opts)
	served.Store(s.Server)
	return nil
}

// newConsole is the operators' web console, served at /ui over HTTP:
// operators (operators:) get in, callers (serve.tokens) are refused with
// 403. sessions lists the server's MCP sessions for the sessions page.
func (s *Serving) newConsole(sessions func() []console.Session, tokens *opauth.Tokens) http.Handler {
	cfg, rt := s.cfg, s.Runtime
	operators := cfg.OperatorTokens()
	if len(operators) == 0 {
		s.log.Warn("no operators are configured (operators:): the web console at /ui lets no one in")
	}
	b := console.GatewayBackend(rt.Gateway, &console.GatewayOptions{
		Budgets: cfg.Budgets,
		Facts: []console.Fact{
			{Name: "Version", Value: rt.version},
			{Name: "Configuration", Value: cfg.Path},
		},
		Refused: func() []console.RefusedServer { return consoleRefused(rt) },
	})
	var hosts []string
	if cfg.Serve.AllowRemote && !loopbackAddr(s.addr) {
		// Served beyond loopback on purpose: the names it is reached by
		// are not known here.
		hosts = []string{"*"}
	}
	return console.New(b, console.TokenAuthOf(tokens), &console.Options{
		Logger:       s.log,
		AllowedHosts: hosts,
		// Browsers behind a proxy name its origin and host (public_url).
		TrustedOrigins: publicOrigins(cfg),
		// Behind a TLS proxy serve sees plain HTTP: the cookie must be
		// Secure all the same, or a browser would send it over http.
		// serve.tls: every request comes over TLS; said here too so that
		// nothing depends on each request's r.TLS alone.
		SecureCookies: strings.HasPrefix(cfg.Serve.PublicURL, "https://") || cfg.Serve.TLS != nil,
		Sessions:      sessions,
	})
}

// Handler is the HTTP face of the server (MCP at /mcp, /metrics, /healthz,
// /readyz, the hooks and the console at /ui), for an embedder that serves
// it on its own listener instead of calling Run.
func (s *Serving) Handler() http.Handler { return s.Server.Handler() }

// URL is where clients reach the server (serve.public_url, else the
// listener's own URL); "" over stdio.
func (s *Serving) URL() string { return s.base }

// ListenURL is the listener's own URL, http:// or https:// (serve.tls);
// "" over stdio.
func (s *Serving) ListenURL() string { return s.listening }

// Remote reports whether the listener is bound beyond loopback.
func (s *Serving) Remote() bool { return s.ln != nil && !loopbackAddr(s.ln.Addr().String()) }

// Run serves (over HTTP on the listener, or the one stdio client) until
// ctx is done or the stdio client leaves; then it shuts the server down,
// giving the calls in flight ShutdownGrace to finish, and returns. Close
// the Serving after.
func (s *Serving) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("assemble: Serving.Run called twice")
	}
	serve := func() error { return s.Server.ServeHTTP(s.ln) }
	if s.stdio {
		s.log.Info("serving MCP over stdio", "caller", s.cfg.Serve.StdioCaller, "config", s.cfg.Path)
		serve = func() error { return s.Server.ServeStdio(s.stdin, s.stdout) }
	}
	served := make(chan error, 1)
	go func() { served <- serve() }()
	var err error
	select {
	case err = <-served:
		// Nothing to wait for: close the sessions that may remain.
		sctx, cancel := context.WithTimeout(context.Background(), s.grace)
		err = errors.Join(err, s.Server.Shutdown(sctx))
		cancel()
	case <-ctx.Done():
		s.log.Info("shutting down: draining the calls in flight", "grace", s.grace)
		sctx, cancel := context.WithTimeout(context.Background(), s.grace)
		err = s.Server.Shutdown(sctx)
		cancel()
		err = errors.Join(err, <-served)
	}
	s.log.Info("stopped")
	return err
}

// ReloadPolicy re-reads the configuration file and puts its policy in
// force ([Runtime.ReloadPolicy], audited by the gateway), via naming how
// it was asked ("SIGHUP", "backplane reload"); serve's log says so too.
func (s *Serving) ReloadPolicy(ctx context.Context, via string) error {
	err := s.Runtime.ReloadPolicy(ctx, via)
	if err != nil {
		s.log.Warn("configuration refused; the running policy stays", "via", via, "error", err)
		return err
	}
	s.log.Info("policy reloaded", "via", via, "config", s.cfg.Path)
	return nil
}

// ReloadTLS re-reads serve.tls's files (changed files are also picked up
// on their own); a pair that does not load keeps the previous one, and is
// said in the log. Nothing to do without serve.tls.
func (s *Serving) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	err := s.tls.Reload()
	if err != nil {
		s.log.Warn("SIGHUP: the TLS files do not load: the previous certificate is still served", "error", err)
	}
	return err
}

// Close stops the background work, the server (if Run did not), the
// listener and the runtime (the store, the audit log last). It may be
// called more than once.
func (s *Serving) Close() error {
	s.once.Do(func() {
		var errs []error
		if s.stopAnn != nil {
			s.stopAnn()
		}
		if s.stop != nil {
			s.stop()
		}
		s.bg.Wait()
		if s.Server != nil && s.ran.CompareAndSwap(false, true) {
			ctx, cancel := context.WithTimeout(context.Background(), s.grace)
			errs = append(errs, s.Server.Shutdown(ctx))
			cancel()
		}
		if s.ln != nil {
			s.ln.Close() // the server has it closed already, but for a failed start
		}
		if s.Runtime != nil {
			errs = append(errs, s.Runtime.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// sandboxAtStart is what serve does once at start when some tool process
// runs sandboxed: it says when sandboxed tools can still reach Unix
// sockets by path (no seccomp filter here), and removes the call cgroups
// a gateway killed with SIGKILL left behind.
func sandboxAtStart(rt *Runtime, log *slog.Logger) {
	some := false
	for _, d := range rt.Sandbox {
		some = some || d.Policy != nil
	}
	if !some {
		return
	}
	if st := sandbox.Probe(); !st.UnixSockets {
		log.Warn("sandboxed tools can connect to Unix sockets by path (the store's, serve's control socket)", "reason", st.UnixReason)
	}
	sandbox.RemoveStale()
}

// announcePending prints one line per new pending approval request: id,
// caller, tool, short arguments and how to decide it.
func announcePending(w io.Writer, g *gateway.Gateway) func() {
	events, stop := g.SubscribeApprovals()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range events {
			if ev.Kind != "pending" {
				continue
			}
			args := ""
			if v, err := g.GetApproval(context.Background(), ev.Approval.ID); err == nil {
				args = shortArgs(v.Arguments)
			}
			how := make([]string, len(ev.HowToDecide))
			for i, h := range ev.HowToDecide {
				how[i] = termtext.Line(h)
			}
			fmt.Fprintf(w, "approval pending: %s caller=%s tool=%s args=%s\n  decide: %s\n",
				termtext.Line(ev.Approval.ID), termtext.Line(ev.Approval.Caller), termtext.Line(ev.Approval.Tool), args, strings.Join(how, "\n          "))
		}
	}()
	return func() { stop(); <-done }
}

// shortArgs is arguments on one line, cut to 120 bytes, with JSON's own
// escapes for what a terminal would act on (termtext.JSON).
func shortArgs(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		buf.Reset()
		buf.Write(b)
	}
	s := buf.String()
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return string(termtext.JSON([]byte(strings.ReplaceAll(s, "\n", " "))))
}

// runtimeCollectors are the runtime's own metrics for /metrics: the trace
// exporter's counters, when tracing is on.
func runtimeCollectors(rt *Runtime) []prometheus.Collector {
	if rt.Tracing == nil {
		return nil
	}
	return []prometheus.Collector{rt.Tracing.Collector()}
}

// publicOrigins are the browser origins served besides the listener's own:
// serve.allowed_origins and serve.public_url's (browsers behind a proxy
// send the proxy's origin).
func publicOrigins(cfg *config.Config) []string {
	out := slices.Clip(cfg.Serve.AllowedOrigins)
	if cfg.Serve.PublicURL != "" {
		out = append(out, cfg.Serve.PublicURL)
	}
	return out
}

// consoleSessions is the console's view of srv's MCP sessions, once srv
// exists (the console is made first: the server serves it).
func consoleSessions(srv *atomic.Pointer[server.Server]) func() []console.Session {
	return func() []console.Session {
		s := srv.Load()
		if s == nil {
			return nil
		}
		var out []console.Session
		for _, si := range s.Sessions() {
			out = append(out, console.Session{Caller: si.Caller, ID: server.SessionIDPrefix(si.ID),
				Opened: si.Opened, LastActive: si.LastActive, InFlight: si.InFlight})
		}
		return out
	}
}

// loopbackAddr reports whether host:port names a loopback address.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
