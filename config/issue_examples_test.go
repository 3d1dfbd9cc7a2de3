package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The configuration blocks the issues say "must be accepted as written",
// together with the gateway issue's file (testdata/example.yaml), parse
// and mean what their comments say.
func TestIssueExamplesTogether(t *testing.T) {
	var all []byte
	for _, f := range []string{"example.yaml", "issue4-builtin.yaml", "issue5-mcp.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	dir := t.TempDir()
	c, err := Parse(all, filepath.Join(dir, "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Issue 4: the workspace, all nine enabled, write re-flagged, bash limits.
	if c.Workspace != dir || len(c.Builtin.Enable) != 9 {
		t.Errorf("workspace %s, enabled %v", c.Workspace, c.Builtin.Enable)
	}
	if o := c.Builtin.Safety["write"]; o.RequiresApproval == nil || *o.RequiresApproval {
		t.Errorf("write re-flag: %+v", o)
	}
	if b := c.Builtin.Bash; b.Timeout.String() != "2m0s" || b.MaxTimeout.String() != "10m0s" || !slices.Equal(b.Env, []string{"PATH", "HOME"}) {
		t.Errorf("bash: %+v", b)
	}
	if len(c.Builtin.URLFetchAllow) != 0 {
		t.Errorf("url_fetch allow: %v, want none", c.Builtin.URLFetchAllow)
	}
	// Issue 5: two upstreams, their validators, and serve.
	if len(c.Servers) != 2 {
		t.Fatalf("servers: %+v", c.Servers)
	}
	every, remote := c.Servers[0], c.Servers[1]
	if every.Name != "everything" || every.Command[0] != "npx" || every.Validator != "subset" {
		t.Errorf("everything: %+v", every)
	}
	if remote.URL != "http://127.0.0.1:9000/mcp" || remote.Headers["Authorization"] != "Bearer upstream-secret" || remote.Validator != "draft2020-12" {
		t.Errorf("remote: %+v", remote)
	}
	if c.Serve.HTTP != "127.0.0.1:8787" || c.Serve.Tokens["local-dev-token"] != "alice" || c.Serve.StdioCaller != "alice" {
		t.Errorf("serve: %+v", c.Serve)
	}
	// The gateway issue's own keys are still there.
	if len(c.Tools) != 1 || c.Tools[0].Name != "note" || len(c.Budgets) != 1 {
		t.Errorf("tools %v, budgets %v", c.Tools, c.Budgets)
	}
}
