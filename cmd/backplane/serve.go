package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/internal/termtext"
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
			f.serving = true
			cfg, opts, closeTTY, err := f.load(cmd)
			if err != nil {
				return err
			}
			defer closeTTY()
			if !stdio {
				if err := checkHTTPFlag(cfg, httpAddr); err != nil {
					return err
				}
			}
			// Everything serve runs, from the configuration: package
			// assemble (the listener is bound first: a busy port fails
			// before the store is opened or any upstream started).
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			so := &assemble.ServeOptions{Open: opts, Stdio: stdio, HTTPAddr: httpAddr, Logger: log,
				Announce: cmd.ErrOrStderr(), ShutdownGrace: shutdownGrace}
			if stdio {
				// stdout is the protocol: the operator's lines go to stderr.
				so.Stdin, so.Stdout = stdinOf(cmd), stdoutOf(cmd)
			}
			s, err := assemble.OpenServer(ctx, cfg, so)
			if err != nil {
				return &inputError{err}
			}
			defer s.Close()
			return runServe(ctx, cmd, s, log)
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

// runServe is what serve adds to assemble's Serving: Go's settings and
// profiles, SIGHUP, the start-up summary, and the exit.
func runServe(ctx context.Context, cmd *cobra.Command, s *assemble.Serving, log *slog.Logger) error {
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
	// SIGHUP re-reads the policy (each reload audited by the gateway) and
	// serve.tls's files.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	hctx, stopHUP := context.WithCancel(ctx)
	var hupDone sync.WaitGroup
	hupDone.Go(func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-hctx.Done():
				return
			case <-hup:
				_ = s.ReloadTLS()
				_ = s.ReloadPolicy(hctx, "SIGHUP")
			}
		}
	})
	defer func() { stopHUP(); hupDone.Wait() }()

	if u := s.URL(); u != "" {
		w := cmd.ErrOrStderr()
		printSummary(w, s.Runtime, u)
		printTLS(w, s.Runtime.Config, s.Remote())
		if l := s.ListenURL(); u != l {
			fmt.Fprintf(w, "  listening on %s, behind serve.public_url\n", l)
		}
	}
	if err := s.Run(ctx); err != nil {
		// A failure to stop cleanly is no usage error: no usage text.
		return &inputError{err}
	}
	return nil
}

// checkHTTPFlag checks --http as serve.http is checked when the file is
// parsed.
func checkHTTPFlag(cfg *config.Config, httpAddr string) error {
	if httpAddr == "" {
		return nil
	}
	if err := config.CheckServeAddr(httpAddr, cfg.Serve.AllowRemote); err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	if cfg.Serve.AnonymousCaller != "" {
		if err := config.CheckAnonymousAddr(httpAddr); err != nil {
			return &inputError{fmt.Errorf("--http: serve.anonymous_caller: %w", err)}
		}
	}
	return nil
}

// printSummary tells the person who started serve where things are: the
// MCP URL, where the callers' and operators' tokens are configured, the
// console, and the tools by source.
func printSummary(w io.Writer, rt *assemble.Runtime, base string) {
	cfg := rt.Config
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
	for _, t := range rt.Gateway.Tools() {
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
	printRefused(w, "  ", refusedServers(rt))
}

// stdinOf is the command's input, closable when it is a file (closing it
// ends the read that a shutdown would otherwise leave blocked). A pipe or
// socket is read through the runtime's poller (mcpstream.Polled): Go
// 1.26's runtime can stall a stop-the-world behind a goroutine entering a
// blocking read (issue 14's stall, docs/mcp.md; the reproducer is
// internal/mcpbench's TestGoStdinStall), and the connection reads a polled
// stream itself, without a goroutine handing it each line.
func stdinOf(cmd *cobra.Command) io.ReadCloser {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		return mcpstream.Polled(f)
	}
	if rc, ok := in.(io.ReadCloser); ok {
		return rc
	}
	return io.NopCloser(in)
}

// stdoutOf is the command's output, which closing the session leaves open.
// A pipe is written through a polled description of its own
// (mcpstream.PolledOutput): a write waits in the poller, and it is made
// without waking the runtime's sysmon as a blocking write does; a write
// its reader refuses still ends serve with SIGPIPE, as a write of stdout
// does.
func stdoutOf(cmd *cobra.Command) io.WriteCloser {
	if f, ok := cmd.OutOrStdout().(*os.File); ok {
		return mcpstream.PolledOutput(f)
	}
	return nopWriteCloser{cmd.OutOrStdout()}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
