package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/tlsreload"
	"github.com/agentbackplane/backplane/server"
)

// serveTLS sets serve up for serve.tls: it loads the certificate (a pair
// that does not load fails the start, with its files named), puts the
// TLS configuration in opts, and re-reads the files on SIGHUP until ctx
// is done (the policy's reload listens to the same signal: reload.go).
// Changed files are also picked up on their own (internal/tlsreload).
// Nothing to do without serve.tls or over stdio.
func serveTLS(ctx context.Context, cfg *config.Config, stdio bool, opts *server.Options, log *slog.Logger) error {
	t := cfg.Serve.TLS
	if t == nil || stdio {
		return nil
	}
	r, err := tlsreload.New(tlsreload.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile}, log)
	if err != nil {
		return &inputError{fmt.Errorf("%s: serve.tls: %w", cfg.Path, err)}
	}
	opts.TLS = r.Config()
	opts.CertCaller = t.CallerFrom
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := r.Reload(); err != nil {
					log.Warn("SIGHUP: the TLS files do not load: the previous certificate is still served", "error", err)
				}
			}
		}
	}()
	return nil
}

// printTLS says, at start, what serve.tls means for who may connect.
func printTLS(w io.Writer, cfg *config.Config, remote bool) {
	t := cfg.Serve.TLS
	if t == nil {
		return
	}
	fmt.Fprintf(w, "  tls: certificate %s (re-read on SIGHUP and when it changes)\n", t.CertFile)
	if t.ClientCAFile != "" {
		how := "verified, and only bearer tokens name callers"
		if t.CallerFrom != "" {
			how = "verified; without a bearer token, its " + t.CallerFrom + " names the caller"
		}
		fmt.Fprintf(w, "  client certificates: issued by %s, %s\n", t.ClientCAFile, how)
	}
	if ws := cfg.Workspace; ws != "" && pathWithin(t.KeyFile, ws) {
		// The built-in tools read the workspace: a caller could read the
		// key through them.
		fmt.Fprintf(w, "  warning: the TLS key %s is inside the workspace %s, where the tools can read it: keep it elsewhere\n", t.KeyFile, ws)
	}
	if remote {
		fmt.Fprintf(w, "  listening beyond loopback with TLS: tokens are encrypted in transit, no TLS proxy is needed in front\n")
	}
}

// pathWithin reports whether path is dir or lies under it (lexically).
func pathWithin(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
