package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/server"
)

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
serve.stdio_caller.

A call that needs an approval asks the person at the client through MCP
elicitation when the client supports it; otherwise it waits up to
serve.approval_wait (default 2m) for "backplane approvals approve" from
another terminal, sending progress notifications, then returns
approval_required with the request id.

serve runs until SIGINT or SIGTERM, then lets the calls in flight finish for
up to 10s, cancels the rest and closes the store. Its own log goes to stderr;
the audit log goes where the other verbs send it.`

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
			s, err := f.open(ctx, cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			return runServe(ctx, cmd, s, stdio, httpAddr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.configPath, "config", defaultConfigFile, "the configuration file (YAML)")
	fl.StringVar(&f.auditLog, "audit-log", "",
		`where audit events go, as JSON lines: a file (appended) or "-" for stderr (default: audit.log in the store folder)`)
	fl.BoolVar(&stdio, "stdio", false, "serve one client on stdin and stdout, as serve.stdio_caller")
	fl.StringVar(&httpAddr, "http", "", "listen on this host:port instead of serve.http")
	return cmd
}

func runServe(ctx context.Context, cmd *cobra.Command, s *gatewaySession, stdio bool, httpAddr string) error {
	cfg := s.rt.Config
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	srv := server.New(s.rt.Gateway, &server.Options{
		Tokens:       cfg.Serve.Tokens,
		StdioCaller:  cfg.Serve.StdioCaller,
		ApprovalWait: approvalWaitOption(cfg.Serve.ApprovalWait),
		Logger:       log,
		Version:      buildVersion(),
	})
	// Once at startup: why tools run unsandboxed, if some do.
	for _, note := range s.rt.SandboxNotes {
		log.Warn("tool processes run unsandboxed", "reason", note)
	}

	if stdio {
		if cfg.Serve.StdioCaller == "" {
			return &inputError{fmt.Errorf("%s: serve.stdio_caller is not set: --stdio needs the caller its calls are made as", cfg.Path)}
		}
		log.Info("serving MCP over stdio", "caller", cfg.Serve.StdioCaller, "config", cfg.Path)
		err := srv.ServeStdio(ctx, stdinOf(cmd), nopWriteCloser{cmd.OutOrStdout()}, shutdownGrace)
		log.Info("stopped")
		return err
	}

	addr := cfg.Serve.HTTP
	if httpAddr != "" {
		addr = httpAddr
		if err := config.CheckServeAddr(addr, cfg.Serve.AllowRemote); err != nil {
			return fmt.Errorf("--http: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &inputError{fmt.Errorf("listening on %s: %w", addr, err)}
	}
	err = srv.ServeHTTP(ctx, ln, shutdownGrace)
	log.Info("stopped")
	return err
}

// approvalWaitOption maps the configuration's wait (0 returns at once) to
// server.Options' (0 is the default, negative returns at once).
func approvalWaitOption(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// stdinOf is the command's input, closable when it is a file (closing it
// ends the read that a shutdown would otherwise leave blocked).
func stdinOf(cmd *cobra.Command) io.ReadCloser {
	in := cmd.InOrStdin()
	if rc, ok := in.(io.ReadCloser); ok {
		return rc
	}
	return io.NopCloser(in)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
