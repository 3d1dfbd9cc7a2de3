package assemble

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/store"
)

// ReloadPolicy puts a valid file's policy in force and refuses an invalid
// one with its line, leaving the running policy as it was.
func TestReloadPolicy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bp.yaml")
	tools := "tools:\n  - name: echo\n    command: [sh, -c, 'cat > /dev/null; echo {}']\n    input_schema: {type: object}\n"
	write := func(policy string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(policy+tools), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("policy:\n  - caller: a\n    allow: [echo]\n")
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if _, err := call(rt, "a", "echo", `{}`); err != nil {
		t.Fatalf("before: %v", err)
	}

	write("policy:\n  - caller: a\n    allow: [\"echo[\"]\n")
	err = rt.ReloadPolicy(context.Background(), "test")
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != 3 || !strings.Contains(err.Error(), "bad pattern") {
		t.Fatalf("an invalid file: %v, want a *config.Error at line 3", err)
	}
	if _, err := call(rt, "a", "echo", `{}`); err != nil {
		t.Fatalf("after a refused reload: %v", err)
	}

	write("policy:\n  - caller: b\n    allow: [echo]\n")
	if err := rt.ReloadPolicy(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := call(rt, "a", "echo", `{}`); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a is no longer named: %v, want not_found", err)
	}
	if _, err := call(rt, "b", "echo", `{}`); err != nil {
		t.Fatalf("b after the reload: %v", err)
	}
}
