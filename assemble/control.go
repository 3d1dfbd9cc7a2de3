package assemble

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbackplane/backplane/config"
)

// Reloading the policy of a running serve from another process. SIGHUP
// re-reads the configuration file (the caller of [Serving.ReloadPolicy]
// handles signals). For "backplane reload", a Serving listens on a Unix
// socket in its state folder (ControlSocketName, mode 0600, so only the
// user who runs serve, and root, can connect): a pid file could name a
// process that has since died and whose pid was reused, and a signal
// cannot carry the answer back, while the socket returns whether the file
// was taken or why it was refused (with its line). A store that is not a
// folder (postgres://) has no state folder: there, SIGHUP only.

// ControlSocketName is the control socket's file in the store folder.
const ControlSocketName = "serve.sock"

// reloadAnswer is the control socket's answer to "reload".
type reloadAnswer struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// ControlSocket is the path of cfg's control socket: in the store folder;
// "" for a store that is not a folder.
func ControlSocket(cfg *config.Config) string {
	if cfg.StoreKind != config.StoreSQLite {
		return ""
	}
	return filepath.Join(cfg.Store, ControlSocketName)
}

// ReloadRefusedError is a running serve's refusal of a reload: its reason
// (the configuration's error, with its line). The running policy stays.
type ReloadRefusedError struct{ Reason string }

func (e *ReloadRefusedError) Error() string { return "refused: " + e.Reason }

// RequestReload asks the serve running on cfg's store folder, through its
// control socket, to reload its policy, and waits for the answer: nil when
// the new policy is in force, a *ReloadRefusedError when serve refused the
// file, any other error when no serve could be asked.
func RequestReload(cfg *config.Config) error {
	path := ControlSocket(cfg)
	if path == "" {
		return errors.New("the store postgres://... is not a folder: send SIGHUP to the serve process instead")
	}
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return fmt.Errorf("no serve is running on %s: %v", filepath.Dir(path), err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte("reload\n")); err != nil {
		return fmt.Errorf("asking serve: %v", err)
	}
	var ans reloadAnswer
	if err := json.NewDecoder(c).Decode(&ans); err != nil {
		return fmt.Errorf("reading serve's answer: %v", err)
	}
	if !ans.OK {
		return &ReloadRefusedError{Reason: ans.Error}
	}
	return nil
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
