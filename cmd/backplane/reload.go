package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/termtext"
)

// Reloading the policy of a running serve. SIGHUP re-reads the
// configuration file. For "backplane reload", serve listens on a Unix
// socket in its state folder (serve.sock, mode 0600, so only the user who
// runs serve, and root, can connect): a pid file could name a process that
// has since died and whose pid was reused, and a signal cannot carry the
// answer back, while the socket returns whether the file was taken or why
// it was refused (with its line). A store that is not a folder (postgres://)
// has no state folder: there, SIGHUP only.

const controlSocketName = "serve.sock"

// reloadAnswer is the control socket's answer to "reload".
type reloadAnswer struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// reloader reloads the policy of one serve, one reload at a time, and
// records each in the audit log and serve's own log.
type reloader struct {
	mu    sync.Mutex
	s     *gatewaySession
	log   *slog.Logger
	audit *slog.Logger
}

func (r *reloader) reload(via string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.s.rt.ReloadPolicy()
	path := r.s.rt.Config.Path
	if err != nil {
		r.audit.Warn("policy", "event", "reload", "outcome", "refused", "via", via, "config", path, "error", err.Error())
		r.log.Warn("configuration refused; the running policy stays", "via", via, "error", err)
		return err
	}
	r.audit.Info("policy", "event", "reload", "outcome", "ok", "via", via, "config", path)
	r.log.Info("policy reloaded", "via", via, "config", path)
	return nil
}

// watchReload reloads on SIGHUP and on "reload" through the control socket
// until ctx is done; the returned function waits for both to stop.
func watchReload(ctx context.Context, s *gatewaySession, log *slog.Logger) func() {
	r := &reloader{s: s, log: log, audit: s.rt.Audit}
	var wg sync.WaitGroup
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	wg.Go(func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = r.reload("SIGHUP")
			}
		}
	})
	if dir := stateDir(s.rt.Config); dir != "" {
		ln, err := listenControl(filepath.Join(dir, controlSocketName))
		if err != nil {
			log.Warn("no control socket: backplane reload will not reach this serve (SIGHUP still reloads)", "error", err)
		} else {
			wg.Go(func() { serveControl(ctx, ln, r.reload, log) })
		}
	}
	return wg.Wait
}

// stateDir is the store folder, where the control socket lives; "" for a
// store that is not a folder.
func stateDir(cfg *config.Config) string {
	if cfg.StoreKind != config.StoreSQLite {
		return ""
	}
	return cfg.Store
}

// listenControl listens on the socket at path, replacing a stale one (left
// by a serve that died) but never one that a running serve answers on.
func listenControl(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s: another serve answers there", path)
	}
	_ = os.Remove(path)
	// The umask decides the mode at bind time; the folder is 0700 already
	// (the store creates it so), and the socket is narrowed to 0600.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// serveControl answers "reload" requests on ln until ctx is done. Only a
// peer running as serve's own user is answered (SO_PEERCRED): the socket's
// mode keeps other users out where the folder's does, and this holds where
// it does not (root connects regardless of modes, and a store folder may be
// opened up by its operator). A sandboxed tool runs as that user too: the
// sandbox keeps it from Unix sockets (package internal/sandbox).
func serveControl(ctx context.Context, ln net.Listener, reload func(via string) error, log *slog.Logger) {
	go func() {
		<-ctx.Done()
		ln.Close() // removes the socket file too
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if err := peerIsServesUser(c); err != nil {
				log.Warn("control socket: connection refused", "error", err)
				_ = json.NewEncoder(c).Encode(reloadAnswer{Error: err.Error()})
				return
			}
			line, err := bufio.NewReader(&limitedConn{c, 64}).ReadString('\n')
			if err != nil || line != "reload\n" {
				_ = json.NewEncoder(c).Encode(reloadAnswer{Error: "unknown request: send \"reload\\n\""})
				return
			}
			ans := reloadAnswer{OK: true}
			if err := reload("backplane reload"); err != nil {
				ans = reloadAnswer{Error: err.Error()}
			}
			_ = json.NewEncoder(c).Encode(ans)
		}()
	}
}

// limitedConn reads at most n bytes of a request.
type limitedConn struct {
	c net.Conn
	n int
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.c.Read(p)
	l.n -= n
	return n, err
}

func newReloadCmd() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "reload [--config F]",
		Short: "Make a running local serve re-read its configuration's policy",
		Long: `reload asks the serve running on this configuration's store folder (through
the socket serve.sock there) to re-read the configuration file and put its
policy in force. An invalid file is refused with the line at fault and the
running policy stays. Calls already authorized keep their decision. Only the
policy takes effect: changes to tools, servers, budgets or the store need a
restart. SIGHUP to the serve process does the same.

Exit 0 when the new policy is in force, 1 when serve refused the file, 2 when
there is no serve to ask or the file cannot be read here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := findConfig(configPath)
			if err != nil {
				return fmt.Errorf("%w (no serve was asked: its policy stays)", err)
			}
			dir := stateDir(cfg)
			if dir == "" {
				return inputErrorf("the store %s is not a folder: send SIGHUP to the serve process instead", "postgres://...")
			}
			c, err := net.DialTimeout("unix", filepath.Join(dir, controlSocketName), 5*time.Second)
			if err != nil {
				return inputErrorf("no serve is running on %s: %v", dir, err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			if _, err := c.Write([]byte("reload\n")); err != nil {
				return inputErrorf("asking serve: %v", err)
			}
			var ans reloadAnswer
			if err := json.NewDecoder(c).Decode(&ans); err != nil {
				return inputErrorf("reading serve's answer: %v", err)
			}
			out := cmd.OutOrStdout()
			if !ans.OK {
				fmt.Fprintf(out, "refused: %s\nthe running policy stays\n", termtext.Block(ans.Error))
				return errNegative
			}
			fmt.Fprintln(out, "ok: the policy of", cfg.Path, "is in force")
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", configFlagHelp)
	return cmd
}
