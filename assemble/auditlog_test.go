package assemble

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/config"
)

// loadIn writes src as bp.yaml in dir and loads it.
func loadIn(t *testing.T, dir, src string) *config.Config {
	t.Helper()
	path := filepath.Join(dir, "bp.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The audit log and the operational log stay apart: a call's event goes
// to the audit file and not to stderr; the store's own warning goes to
// stderr and not to the audit file.
func TestAuditApartFromOperationalLog(t *testing.T) {
	dir := t.TempDir()
	// A store folder others may read: the store tightens it and says so
	// in the operational log.
	st := filepath.Join(dir, "st")
	if err := os.Mkdir(st, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(st, 0o755); err != nil {
		t.Fatal(err)
	}
	c := loadIn(t, dir, "store: ./st\npolicy:\n  - caller: a\n    allow: [echo]\n"+
		"tools:\n  - name: echo\n    command: [cat]\n    input_schema: {type: object}\n")
	var stderr bytes.Buffer
	rt, err := Open(context.Background(), c, &Options{Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	res, err := call(rt, "a", "echo", `{"x":1}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	audit, err := os.ReadFile(filepath.Join(st, AuditLogName))
	if err != nil {
		t.Fatal(err)
	}
	ops := stderr.String()
	if !strings.Contains(ops, "permissions tightened") {
		t.Fatalf("the store's warning is not in the operational log (the test proves nothing):\n%s", ops)
	}
	if strings.Contains(string(audit), "permissions tightened") {
		t.Errorf("the store's warning went to the audit log:\n%s", audit)
	}
	if strings.Contains(ops, res.CallID) {
		t.Errorf("the call's audit event went to the operational log:\n%s", ops)
	}
	n := 0
	for line := range strings.Lines(string(audit)) {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q is not JSON: %v", line, err)
		}
		if ev["msg"] != "call" {
			t.Errorf("an event other than the call's in the audit log: %v", ev)
		}
		if ev["call_id"] == res.CallID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d events of the call in the audit log, want 1:\n%s", n, audit)
	}
}

// log.max_size and log.max_files rotate the audit log in the store folder,
// on disk, keeping the count.
func TestAuditLogRotates(t *testing.T) {
	dir := t.TempDir()
	c := loadIn(t, dir, "store: ./st\nlog: {max_size: 1MB, max_files: 1}\nbuiltin: {enable: []}\n")
	rt, err := Open(context.Background(), c, &Options{Stderr: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 1000)
	for i := range 3000 { // about 3 MiB: two rotations at least
		rt.Audit.Info("probe", "n", i, "pad", pad)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	rotated := func() []string {
		m, err := filepath.Glob(filepath.Join(dir, "st", "audit-*.log"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Old files are removed in the background after a rotation.
	for deadline := time.Now().Add(10 * time.Second); len(rotated()) > 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if r := rotated(); len(r) != 1 {
		t.Fatalf("rotated files %v, want 1 (max_files)", r)
	}
	for _, p := range append(rotated(), filepath.Join(dir, "st", AuditLogName)) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 1<<20 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v; want at most 1 MiB, 0600", p, fi.Size(), fi.Mode().Perm())
		}
	}
	last, err := os.ReadFile(filepath.Join(dir, "st", AuditLogName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(last), `"n":2999,`) {
		t.Error("the last record is not in the current file")
	}
}

// An audit log in the workspace is not rotated (the built-in tools hide it
// by name, and a rotated file's name is new), and the operational log
// says so.
func TestAuditLogInWorkspaceNotRotated(t *testing.T) {
	dir := t.TempDir()
	c := loadIn(t, dir, "store: ./st\nlog: {file: audit.log, max_size: 1MB}\nbuiltin: {enable: [read]}\n")
	var stderr bytes.Buffer
	rt, err := Open(context.Background(), c, &Options{Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 1000)
	for i := range 1500 {
		rt.Audit.Info("probe", "n", i, "pad", pad)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "audit-*.log")); len(m) != 0 {
		t.Errorf("rotated files in the workspace: %v", m)
	}
	if fi, err := os.Stat(filepath.Join(dir, "audit.log")); err != nil || fi.Size() <= 1<<20 {
		t.Errorf("audit.log: %v, %v; want it whole, past 1 MiB", fi, err)
	}
	if !strings.Contains(stderr.String(), "not rotated") {
		t.Errorf("the operational log does not say the audit log is not rotated:\n%s", stderr.String())
	}
}
