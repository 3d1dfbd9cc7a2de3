package assemble

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestControlSocketPeerCheck: serve's control socket answers only its own
// user (SO_PEERCRED), whatever the socket's mode lets in. uid 65534
// connects to a socket it may open (mode 0777, folder 0755) and is refused
// without a reload; serve's own user gets one. The reload counter proves
// the refusal.
func TestControlSocketPeerCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to connect as another user (uid 65534)")
	}
	// The system's python (a user's, under /root, is not uid 65534's).
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("/usr/bin/python3 is the other user's client here: " + err.Error())
	}
	dir, err := os.MkdirTemp("", "backplane-ctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ControlSocketName)
	ln, err := listenControl(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o777); err != nil { // the mode no longer keeps anyone out
		t.Fatal(err)
	}
	var reloads atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveControl(ctx, ln, func(string) error { reloads.Add(1); return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { cancel(); <-done })

	client := exec.Command(python, "-c", `import socket,sys
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f=s.makefile()
try: s.sendall(b"reload\n")
except OSError: pass  # refused before the request was read
print(f.readline())`, path)
	client.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := client.CombinedOutput()
	if err != nil {
		t.Fatalf("the other user's client: %v\n%s", err, out)
	}
	var ans reloadAnswer
	if err := json.Unmarshal(out, &ans); err != nil || ans.OK || !strings.Contains(ans.Error, "uid 65534") {
		t.Errorf("uid 65534 was answered %q (%v), want a refusal naming its uid", out, err)
	}
	if n := reloads.Load(); n != 0 {
		t.Fatalf("uid 65534 made %d reloads", n)
	}

	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("reload\n")); err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(c).Decode(&ans); err != nil || !ans.OK {
		t.Fatalf("serve's own user: %+v %v", ans, err)
	}
	if n := reloads.Load(); n != 1 {
		t.Fatalf("serve's own user: %d reloads, want 1", n)
	}
}
