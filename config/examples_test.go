package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The README's main command serves examples/serve.yaml: it must load and
// mean what its comments say.
func TestServeExample(t *testing.T) {
	path := filepath.Join("..", "examples", "serve.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := filepath.Abs("..")
	if c.Workspace != repo || c.Store != filepath.Join(filepath.Dir(repo), "backplane-example-state") {
		t.Errorf("workspace %s, store %s; want the repository folder and a state folder beside it", c.Workspace, c.Store)
	}
	// The state is outside the workspace: neither the path-taking tools
	// nor bash (confined to the workspace when sandboxed) reach it.
	if rel, err := filepath.Rel(c.Workspace, c.Store); err != nil || rel == ".." || !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		t.Errorf("store %s is inside the workspace %s", c.Store, c.Workspace)
	}
	if c.Serve.HTTP != "127.0.0.1:8787" || c.Serve.Tokens["local-dev-token"] != "dev" || c.Serve.StdioCaller != "dev" {
		t.Errorf("serve: %+v", c.Serve)
	}
	if len(c.Policy) != 1 || !slices.Contains(c.Policy[0].Approve, "bash") ||
		!slices.Equal(c.Policy[0].Approvers, []string{"ops"}) || c.Policy[0].SelfApprove {
		t.Errorf("policy: %+v", c.Policy)
	}
	if len(c.Operators) != 1 || c.Operators[0].Name != "ops" || c.Operators[0].Token != "local-ops-token" ||
		c.Approvals.MaxPending != 16 || c.Serve.ApprovalWait != 0 {
		t.Errorf("operators %+v, approvals %+v, wait %s", c.Operators, c.Approvals, c.Serve.ApprovalWait)
	}
	if len(c.Builtin.Enable) != 9 {
		t.Errorf("built-in tools enabled: %v, want all nine", c.Builtin.Enable)
	}
}
