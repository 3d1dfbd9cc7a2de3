package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Path rules are decided on the file a path leads to, not on its text
// (issue 22, finding 6): with deny "read(**/.env)" and allow
// "read(src/**)", src/envlink (a symbolic link to .env) returned .env, also
// absolutely, as src/./envlink and as src//envlink. Each of these is now
// forbidden at authorization, the secret never printed; the same holds for
// write through a linked folder, and glob and grep walks leave out what a
// deny names by its real path.
func TestPathRulesDecideOnTheRealFile(t *testing.T) {
	g := newGWDir(t, `
workspace: .
builtin:
  enable: [read, write, glob, grep]
  safety:
    write: {requires_approval: false}
policy:
  - caller: alice
    allow: ["read(src/**)", "write(src/**)", "glob(src/**)", "grep(src/**)"]
    deny: ["read(**/.env)", "write(conf/**)", "glob(**/.env)", "grep(**/.env)"]
`)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const secret = "TOKEN=s3cret"
	must(os.WriteFile(filepath.Join(g.dir, ".env"), []byte(secret+"\n"), 0o600))
	must(os.MkdirAll(filepath.Join(g.dir, "src"), 0o755))
	must(os.MkdirAll(filepath.Join(g.dir, "conf"), 0o755))
	must(os.WriteFile(filepath.Join(g.dir, "src", "main.go"), []byte("package main // s3cret\n"), 0o644))
	must(os.Symlink("../.env", filepath.Join(g.dir, "src", "envlink")))
	must(os.Symlink("..", filepath.Join(g.dir, "src", "up")))
	must(os.Symlink("../conf", filepath.Join(g.dir, "src", "conflink")))

	for _, p := range []string{"src/envlink", filepath.Join(g.dir, "src", "envlink"), "src/./envlink", "src//envlink"} {
		t.Run("read "+p, func(t *testing.T) {
			r := g.run(t, "", "call", "--caller", "alice", "read", `{"path":"`+p+`"}`, "--json")
			if strings.Contains(r.stdout+r.stderr, "s3cret") {
				t.Errorf("read %s printed the secret:\n%s%s", p, r.stdout, r.stderr)
			}
			e := callError(t, decodeObject(t, r.stdout), "forbidden")
			if msg, _ := e["message"].(string); !strings.Contains(msg, "leads to .env") || !strings.Contains(msg, "read(**/.env)") {
				t.Errorf("read %s: the refusal does not name the real path and the rule: %v", p, e)
			}
		})
	}
	// policy explain resolves as serve does, and says so.
	ex := g.run(t, "", "policy", "explain", "--caller", "alice", "read", `{"path":"src/envlink"}`, "--json")
	if !strings.Contains(ex.stdout, `"decision":"deny"`) || !strings.Contains(ex.stdout, "src/envlink leads to .env") {
		t.Errorf("policy explain read src/envlink: %s", ex.stdout)
	}
	// The allowed file itself still reads.
	ok := g.runJSON(t, 0, "", "call", "--caller", "alice", "read", `{"path":"src/main.go"}`)
	if !strings.Contains(ok["result"].(map[string]any)["content"].(string), "package main") {
		t.Errorf("read src/main.go: %v", ok)
	}

	// write through a linked folder into a denied one.
	t.Run("write", func(t *testing.T) {
		r := g.run(t, "", "call", "--caller", "alice", "write", `{"path":"src/conflink/x.yaml","content":"planted"}`, "--json")
		if _, err := os.Stat(filepath.Join(g.dir, "conf", "x.yaml")); !os.IsNotExist(err) {
			t.Errorf("write through src/conflink created conf/x.yaml (%v)", err)
		}
		callError(t, decodeObject(t, r.stdout), "forbidden")
	})

	// Walks: src/envlink is .env by its real path, which a deny names;
	// src/up is a link to the workspace, so grep in it is a grep of the
	// workspace, which no allow names.
	gl := g.runJSON(t, 0, "", "call", "--caller", "alice", "glob", `{"path":"src","pattern":"*"}`)
	if s := strings.Join(toStrings(gl["result"].(map[string]any)["paths"]), " "); strings.Contains(s, "envlink") || !strings.Contains(s, "src/main.go") {
		t.Errorf("glob src/*: %s, want src/main.go and not src/envlink (.env by another name)", s)
	}
	// grep in src walks past src/.env, which a deny names: not searched.
	must(os.WriteFile(filepath.Join(g.dir, "src", ".env"), []byte("TOKEN=inner-s3cret\n"), 0o600))
	gs := g.runJSON(t, 0, "", "call", "--caller", "alice", "grep", `{"path":"src","pattern":"s3cret"}`)
	if out := fmt.Sprint(gs["result"]); strings.Contains(out, "TOKEN=") || !strings.Contains(out, "src/main.go") {
		t.Errorf("grep src: %s, want src/main.go and nothing of src/.env", out)
	}
	gr := g.run(t, "", "call", "--caller", "alice", "grep", `{"path":"src/up","pattern":"s3cret"}`, "--json")
	if strings.Contains(gr.stdout, "TOKEN=") {
		t.Errorf("grep through src/up found .env's content:\n%s", gr.stdout)
	}
}

func toStrings(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
