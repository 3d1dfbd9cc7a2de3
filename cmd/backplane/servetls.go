package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/agentbackplane/backplane/config"
)

// serve.tls is opened and re-read by package assemble (Serving.ReloadTLS,
// on SIGHUP: serve.go); here is what serve prints of it.

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
