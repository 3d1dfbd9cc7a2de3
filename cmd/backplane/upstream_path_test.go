package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Paths are paths, whoever owns the tool (issue 25): with main_arg: path
// on the reference filesystem server (from npm, pinned in
// testdata/mcp-peers), deny "fs.read_text_file(**/.env)" refuses .env
// however it is spelled, relative (which the server resolves against its
// root, the workspace) or absolute, as "read(**/.env)" does on the
// built-in read; a file no deny names is read through both.
func TestUpstreamPathDenyMatchesEverySpelling(t *testing.T) {
	bin, err := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-filesystem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("server-filesystem is not installed (npm ci in testdata/mcp-peers): %v", err)
	}
	g := newGWDir(t, "")
	ws, err := filepath.EvalSymlinks(g.dir)
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`
workspace: %[1]q
servers:
  - name: fs
    command: [%[2]q, %[1]q]
    validator: draft2020-12
    main_arg: path
builtin:
  enable: [read]
policy:
  - caller: alice
    allow: ["fs.*", read]
    deny: ["fs.read_text_file(**/.env)", "read(**/.env)"]
`, ws, bin)
	if err := os.WriteFile(filepath.Join(g.dir, "backplane.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{".env": "TOKEN=secret-e2e\n", "README.md": "hello from the readme\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"fs.read_text_file", "read"} {
		for _, p := range []string{".env", "./.env", "src/../.env", filepath.Join(ws, ".env")} {
			r := g.run(t, "", "call", "--caller", "alice", tool, fmt.Sprintf(`{"path":%q}`, p), "--json")
			if r.code != exitNegative || strings.Contains(r.stdout, "secret-e2e") {
				t.Errorf("%s %q: exit %d, want %d with nothing of the file\n%s%s", tool, p, r.code, exitNegative, r.stdout, r.stderr)
				continue
			}
			m := decodeObject(t, r.stdout)
			if e := callError(t, m, "forbidden"); !strings.Contains(fmt.Sprint(e["message"]), "**/.env") {
				t.Errorf("%s %q: %v, want the deny naming **/.env", tool, p, e)
			}
		}
		for _, p := range []string{"README.md", filepath.Join(ws, "README.md")} {
			r := g.run(t, "", "call", "--caller", "alice", tool, fmt.Sprintf(`{"path":%q}`, p), "--json")
			if r.code != exitOK || !strings.Contains(r.stdout, "hello from the readme") {
				t.Errorf("%s %q: exit %d, want the file's content\n%s%s", tool, p, r.code, r.stdout, r.stderr)
			}
		}
	}
	// policy check says nothing of a path matched as a path.
	if r := g.run(t, "", "policy", "check"); strings.Contains(r.stdout, "path_matched_as_text") {
		t.Errorf("policy check: %s", r.stdout)
	}
}

// With match: text, asked for, the spelling decides again, and policy
// check says so.
func TestPolicyCheckWarnsOfAPathMatchedAsText(t *testing.T) {
	g := newGWDir(t, `
workspace: .
tools:
  - name: show
    input_schema: {type: object, properties: {file: {type: string}}}
    command: [cat]
    main_arg: {name: file, match: text}
policy:
  - caller: alice
    allow: [show]
    deny: ["show(**/.env)"]
`)
	r := g.run(t, "", "policy", "check")
	if r.code != exitNegative || !strings.Contains(r.stdout, "path_matched_as_text") || !strings.Contains(r.stdout, `"**/.env"`) {
		t.Errorf("policy check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
