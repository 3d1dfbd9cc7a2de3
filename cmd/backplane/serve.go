package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/oauth"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/tool"
)

// serveGCPercent is serve's garbage collection target (GOGC), unless the
// environment sets GOGC. Most of what serve allocates lives for one message
// (the MCP SDK's decoder alone takes 32 KiB per message) while the live
// heap is small, so Go's default of 100 collects all the time: in the HTTP
// benchmark against mcp-proxy (docs/benchmarks.md) 400 took a third off the
// CPU per call for ~26 MB more peak RSS (64 to 90 MB; mcp-proxy's: 222 MB).
const serveGCPercent = 400

// shutdownGrace is how long calls in flight may take to finish after
// SIGINT or SIGTERM before they are cancelled.
const shutdownGrace = 10 * time.Second

const serveLong = `serve serves the configured gateway to MCP clients: every tool the caller's
policy allows, with its schema unchanged; every call through the whole
pipeline (validation, authorization, approval, budget, the journal).

Over streamable HTTP (the default), at http://ADDR/mcp, each request needs a
bearer token from serve.tokens, which names its caller; /metrics (Prometheus)
needs one too; /healthz does not. The address is serve.http (default
127.0.0.1:8787) or --http, and must be loopback unless serve.allow_remote is
true. With --stdio, one client speaks MCP on stdin and stdout as
serve.stdio_caller; the requests it sent before closing stdin are answered
(for up to 10s) before serve exits.

Each caller's requests draw on a token bucket (serve.rate_limit, default
100 a second, burst 200): past it, HTTP answers 429 with Retry-After and
stdio a JSON-RPC error -32029. A session holds at most
serve.max_subscriptions_per_session (256) resource subscriptions, a caller
serve.max_subscriptions_per_caller (1024). Refusals are counted in /metrics
and sampled in the audit log.

A call that needs an approval asks the person at the client through MCP
elicitation where a policy rule sets self_approve and the client supports
it (bounded by approvals.self_approve_timeout, default 50s); it waits up to
serve.approval_wait (else approvals.wait; default 0s: not at all) for
"backplane approvals approve" from another terminal, sending progress
notifications, then returns approval_required with the request id.

SIGHUP (or "backplane reload") re-reads the configuration file and puts its
policy in force; an invalid file is refused with its line and the running
policy stays; the audit log records each reload. Only the policy changes:
tools, servers, budgets and the store need a restart. With serve.tls, SIGHUP
also re-reads the certificate files (changed files are picked up by
themselves within seconds); a pair that does not load keeps the old one.

serve binds its HTTP listener first: a port already taken fails before the
store is opened or any upstream server started. A server that cannot start
does not refuse the start: serve says so, runs without it (degraded:
/healthz and /readyz say which server is down) and retries it in the
background, unless the server is marked required: true (then serve refuses
to start, and /readyz answers 503 while it is down).

serve runs until SIGINT or SIGTERM, then lets the calls in flight finish for
up to 10s, cancels the rest and closes the store. Its own log goes to stderr;
the audit log goes where the other verbs send it.

With BACKPLANE_PPROF_ADDR set to a loopback address (127.0.0.1:6060), serve
also serves Go's profiles (net/http/pprof) at http://ADDR/debug/pprof/, with
no authentication: for measuring, off by default. serve sets Go's GOGC to
400 unless the environment sets GOGC: it trades some memory for less time
collecting garbage.`

func newServeCmd() *cobra.Command {
	var (
		f        gatewayFlags
		stdio    bool
		httpAddr string
	)
	cmd := &cobra.Command{
		Use:   "serve [--config F] [--stdio | --http ADDR]",
		Short: "Serve the gateway to MCP clients (streamable HTTP or stdio)",
		Long:  serveLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if stdio && cmd.Flags().Changed("http") {
				return errors.New("--stdio and --http exclude each other")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var console atomic.Pointer[string]
			f.serving = true
			f.consoleURL = func() string {
				if p := console.Load(); p != nil {
					return *p
				}
				return ""
			}
			// The listener first: a busy port fails before the store
			// is opened or any upstream started (issue 26, item 6).
			var ln net.Listener
			if !stdio {
				f.beforeOpen = func(cfg *config.Config) (err error) {
					ln, err = listenFor(cfg, httpAddr)
					return err
				}
			}
			s, err := f.open(ctx, cmd)
			if ln != nil {
				// Serve takes it over; closing twice is harmless.
				defer ln.Close()
			}
			if err != nil {
				return err
			}
			defer s.Close()
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wait := watchReload(ctx, s, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
			defer wait()
			defer cancel() // stop watching before waiting (defers run last first)
			return runServe(ctx, cmd, s, stdio, ln, httpAddr, &console)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.configPath, "config", "", configFlagHelp)
	fl.StringVar(&f.auditLog, "audit-log", "",
		`where audit events go, as JSON lines: a file (appended) or "-" for stderr (default: audit.log in the store folder)`)
	fl.BoolVar(&stdio, "stdio", false, "serve one client on stdin and stdout, as serve.stdio_caller")
	fl.StringVar(&httpAddr, "http", "", "listen on this host:port instead of serve.http")
	return cmd
}

func runServe(ctx context.Context, cmd *cobra.Command, s *gatewaySession, stdio bool, ln net.Listener, httpAddr string, console *atomic.Pointer[string]) error {
	cfg := s.rt.Config
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
	if addr := os.Getenv(pprofEnv); addr != "" {
		stopPprof, err := startPprof(addr, log)
		if err != nil {
			return &inputError{err}
		}
		defer stopPprof()
	}
	// Over stdio there are no tokens: the issuer's keys are not read.
	var verifier *oauth.Verifier
	if !stdio {
		v, err := newOAuthVerifier(cfg.Serve.OAuth, log)
		if err != nil {
			return &inputError{fmt.Errorf("%s: serve.oauth: %w", cfg.Path, err)}
		}
		verifier = v
	}
	var served atomic.Pointer[server.Server] // for the console's sessions page
	opts := &server.Options{
		Operators:    cfg.OperatorTokens(),
		Tokens:       cfg.Serve.Tokens,
		StdioCaller:  cfg.Serve.StdioCaller,
		ApprovalWait: cfg.Serve.ApprovalWait,
		Logger:       log,
		Version:      readVersion().Version,
		Audit:        s.rt.Audit,
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
		Console:                    newConsole(cfg, s.rt, log, stdio, httpAddr, consoleSessions(&served)),
		Collectors:                 runtimeCollectors(s.rt),

		// Besides the static tokens (serve.oauth, serve.anonymous_caller).
		OAuth:           verifier,
		AnonymousCaller: cfg.Serve.AnonymousCaller,
	}
	// The agents' hook endpoints (backplane hook --url) only decide, never
	// run a tool, and take the callers' tokens as /mcp does.
	opts.Hooks = &server.HookOptions{Workspace: cfg.Workspace, MCPTool: mcpToolOf(cfg)}
	if s.rt.Content != nil {
		opts.Content, opts.ContentPolicy = s.rt.Content, s.rt.Policy
	}
	if err := serveTLS(ctx, cfg, stdio, opts, log); err != nil {
		return err
	}
	srv := server.New(s.rt.Gateway, opts)
	served.Store(srv)
	// Once at startup: why tools run unsandboxed, if some do.
	for _, note := range s.rt.SandboxNotes {
		log.Warn("tool processes run unsandboxed", "reason", note)
	}
	sandboxAtStart(s.rt, log)

	// Retention: prune in the background for the life of the server
	// (cfg.Retention; keep 0 is for ever), stopped before the store closes.
	pctx, stopPruning := context.WithCancel(ctx)
	pruning := make(chan struct{})
	go func() {
		defer close(pruning)
		s.rt.Gateway.KeepPruning(pctx, cfg.Retention.Keep, cfg.Retention.Every)
	}()
	defer func() { stopPruning(); <-pruning }()

	if stdio {
		// stdout is the protocol: the operator's lines go to stderr.
		stopPending := announcePending(cmd.ErrOrStderr(), s.rt.Gateway)
		defer stopPending()
		if cfg.Serve.StdioCaller == "" {
			return &inputError{fmt.Errorf("%s: serve.stdio_caller is not set: --stdio needs the caller its calls are made as", cfg.Path)}
		}
		log.Info("serving MCP over stdio", "caller", cfg.Serve.StdioCaller, "config", cfg.Path)
		return serveUntil(ctx, log, srv, func() error {
			return srv.ServeStdio(stdinOf(cmd), nopWriteCloser{cmd.OutOrStdout()})
		})
	}

	// The listener was bound before the store and the upstreams (listenFor);
	// serve.tls makes it https.
	listening := "http://" + ln.Addr().String()
	if opts.TLS != nil {
		listening = "https://" + ln.Addr().String()
	}
	base := listening
	if pub := s.rt.Config.Serve.PublicURL; pub != "" {
		// What serve prints is where clients and browsers reach it: the
		// proxy in front, not the loopback listener behind it.
		base = pub
	}
	console.Store(&base)
	printSummary(cmd.ErrOrStderr(), s, base)
	printTLS(cmd.ErrOrStderr(), cfg, !loopbackAddr(ln.Addr().String()))
	if base != listening {
		fmt.Fprintf(cmd.ErrOrStderr(), "  listening on %s, behind serve.public_url\n", listening)
	}
	stopPending := announcePending(cmd.ErrOrStderr(), s.rt.Gateway)
	defer stopPending()
	return serveUntil(ctx, log, srv, func() error { return srv.ServeHTTP(ln) })
}

// listenFor binds the HTTP listener the configuration (or --http) names.
func listenFor(cfg *config.Config, httpAddr string) (net.Listener, error) {
	addr := cfg.Serve.HTTP
	if httpAddr != "" {
		addr = httpAddr
		if err := config.CheckServeAddr(addr, cfg.Serve.AllowRemote); err != nil {
			return nil, fmt.Errorf("--http: %w", err)
		}
		if cfg.Serve.AnonymousCaller != "" {
			if err := config.CheckAnonymousAddr(addr); err != nil {
				return nil, &inputError{fmt.Errorf("--http: serve.anonymous_caller: %w", err)}
			}
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &inputError{fmt.Errorf("listening on %s: %w", addr, err)}
	}
	return ln, nil
}

// printSummary tells the person who started serve where things are: the
// MCP URL, where the callers' and operators' tokens are configured, the
// console, and the tools by source.
func printSummary(w io.Writer, s *gatewaySession, base string) {
	cfg := s.rt.Config
	cfgPath, _ := filepath.Abs(cfg.Path)
	fmt.Fprintf(w, "backplane serve: MCP at %s%s (configuration %s)\n", base, server.PathMCP, cfgPath)
	fmt.Fprintf(w, "  caller tokens: serve.tokens in %s (%d)\n", cfgPath, len(cfg.Serve.Tokens))
	if o := cfg.Serve.OAuth; o != nil {
		fmt.Fprintf(w, "  oauth: JWT access tokens from %s for %s (caller: claim %s)\n", o.Issuer, o.Audience, o.CallerClaim)
	}
	if a := cfg.Serve.AnonymousCaller; a != "" {
		fmt.Fprintf(w, "  anonymous caller: %s (requests without a token, loopback only)\n", a)
	}
	if len(cfg.Operators) == 0 {
		fmt.Fprintf(w, "  operators: none configured (operators:): /metrics and the console refuse every token\n")
	}
	for _, o := range cfg.Operators {
		fmt.Fprintf(w, "  operator %s: token from %s\n", o.Name, o.TokenFrom)
	}
	fmt.Fprintf(w, "  console: %s/ui  metrics: %s%s (operators only)\n", base, base, server.PathMetrics)
	bySource := map[string][]string{}
	for _, t := range s.rt.Gateway.Tools() {
		src := "configured"
		switch {
		case t.Pinned:
			src = "upstream"
		case slices.Contains(tool.BuiltinNames(), t.Name):
			src = "built-in"
		}
		bySource[src] = append(bySource[src], t.Name)
	}
	for _, src := range []string{"built-in", "configured", "upstream"} {
		if names := bySource[src]; len(names) > 0 {
			slices.Sort(names)
			for i, n := range names {
				names[i] = termtext.Line(n)
			}
			fmt.Fprintf(w, "  tools (%s): %s\n", src, strings.Join(names, ", "))
		}
	}
	printRefused(w, "  ", refusedServers(s.rt))
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

// serveUntil runs serve until it returns (the stdio client left) or ctx is
// done; then it shuts the server down, giving the calls in flight
// shutdownGrace to finish.
func serveUntil(ctx context.Context, log *slog.Logger, srv *server.Server, serve func() error) error {
	served := make(chan error, 1)
	go func() { served <- serve() }()
	var err error
	select {
	case err = <-served:
		// Nothing to wait for: close the sessions that may remain.
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		err = errors.Join(err, srv.Shutdown(sctx))
		cancel()
	case <-ctx.Done():
		log.Info("shutting down: draining the calls in flight", "grace", shutdownGrace)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		err = srv.Shutdown(sctx)
		cancel()
		err = errors.Join(err, <-served)
	}
	log.Info("stopped")
	if err != nil {
		// A failure to stop cleanly is no usage error: no usage text.
		return &inputError{err}
	}
	return nil
}

// stdinOf is the command's input, closable when it is a file (closing it
// ends the read that a shutdown would otherwise leave blocked).
func stdinOf(cmd *cobra.Command) io.ReadCloser {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		return polledStdin(f)
	}
	if rc, ok := in.(io.ReadCloser); ok {
		return rc
	}
	return io.NopCloser(in)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// runtimeCollectors are the runtime's own metrics for /metrics: the trace
// exporter's counters, when tracing is on.
func runtimeCollectors(rt *assemble.Runtime) []prometheus.Collector {
	if rt.Tracing == nil {
		return nil
	}
	return []prometheus.Collector{rt.Tracing.Collector()}
}

// newOAuthVerifier is the verifier of serve.oauth; nil when it is not set.
func newOAuthVerifier(o *config.OAuthConfig, log *slog.Logger) (*oauth.Verifier, error) {
	if o == nil {
		return nil, nil
	}
	return oauth.New(&oauth.Options{
		Issuer:               o.Issuer,
		Audience:             o.Audience,
		KeySetFile:           o.JWKSFile,
		KeySetURL:            o.JWKSURL,
		CallerClaim:          o.CallerClaim,
		AuthorizationServers: o.AuthorizationServers,
		Logger:               log,
	})
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
