package assemble

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/config"
)

// OpenServer is what serve runs, in one call: it serves HTTP (health, the
// console, metrics for operators only), reloads through the control
// socket with the gateway's audit event, and stops when Run's context
// ends.
func TestOpenServerServesAndReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, config.DefaultFile)
	yaml := func(caller string) string {
		return "policy:\n  - caller: " + caller + "\n    allow: [read]\n" +
			"operators:\n  - name: ops\n    token: ops-token\n" +
			"serve:\n  http: 127.0.0.1:0\n  tokens: {\"alice-token\": alice}\n"
	}
	if err := os.WriteFile(path, []byte(yaml("alice")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// The audit log and serve's log are files, read once Close has
	// written them out.
	auditPath, logPath := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "serve.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	s, err := OpenServer(context.Background(), cfg, &ServeOptions{
		Open:   &Options{AuditLog: auditPath, Stderr: io.Discard},
		Logger: slog.New(slog.NewTextHandler(logFile, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || s.URL() != s.ListenURL() || s.Remote() {
		t.Fatalf("URL %q, listening %q, remote %v", s.URL(), s.ListenURL(), s.Remote())
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()

	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/healthz", ""); code != 200 || !strings.Contains(body, `"state":"ok"`) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, _ := get("/metrics", "alice-token"); code != http.StatusForbidden {
		t.Errorf("/metrics with a caller's token: %d, want 403", code)
	}
	if code, _ := get("/metrics", "ops-token"); code != 200 {
		t.Errorf("/metrics with an operator's token: %d", code)
	}
	if code, _ := get("/ui/api/tools", "ops-token"); code != 200 {
		t.Errorf("the console with an operator's token: %d", code)
	}
	if hints := s.Runtime.Gateway.ApprovalHints("apr-1"); len(hints) == 0 || hints[len(hints)-1] != s.URL()+"/ui/approvals/apr-1" {
		t.Errorf("the ways to decide do not end with the console's page: %q", hints)
	}

	// backplane reload, through the control socket: refused, then taken.
	if err := os.WriteFile(path, []byte(yaml("alice")+"  bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var refused *ReloadRefusedError
	if err := RequestReload(cfg); !errors.As(err, &refused) || !strings.Contains(refused.Reason, "bogus") {
		t.Fatalf("reloading an invalid file: %v", err)
	}
	if err := os.WriteFile(path, []byte(yaml("bob")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RequestReload(cfg); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if !s.Runtime.Gateway.Visible("bob", "read") || s.Runtime.Gateway.Visible("alice", "read") {
		t.Error("the reloaded policy is not in force")
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after its context ended")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stat(ControlSocket(cfg)); !os.IsNotExist(err) {
		t.Errorf("the control socket is left after Close: %v", err)
	}
	audit, _ := os.ReadFile(auditPath)
	for _, want := range []string{`"event":"reload","outcome":"refused","via":"backplane reload"`, `"event":"reload","outcome":"ok","via":"backplane reload"`} {
		if !bytes.Contains(audit, []byte(want)) {
			t.Errorf("the audit log lacks %s:\n%s", want, audit)
		}
	}
	if log, _ := os.ReadFile(logPath); !bytes.Contains(log, []byte("policy reloaded")) {
		t.Errorf("serve's log does not say the policy was reloaded:\n%s", log)
	}
}

// Over stdio, serve.stdio_caller is required, and nothing is opened
// without it.
func TestOpenServerStdioNeedsCaller(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, config.DefaultFile)
	if err := os.WriteFile(path, []byte("policy: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenServer(context.Background(), cfg, &ServeOptions{Stdio: true, Open: &Options{Stderr: io.Discard}})
	if err == nil || !strings.Contains(err.Error(), "serve.stdio_caller is not set") {
		t.Fatalf("stdio without a caller: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".backplane")); !os.IsNotExist(err) {
		t.Errorf("the store was opened before the refusal: %v", err)
	}
}
