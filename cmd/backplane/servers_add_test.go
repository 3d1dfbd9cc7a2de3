package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addConfig is a configuration with comments, blank lines and a layout of
// its own, which servers add must leave as they are.
const addConfig = `# my configuration, by hand

store: state      # beside this file

policy:
  - caller: alice
    allow: ["go.*", "files.*", "memory.*", "everything.*"]

servers:
  # a server already there
  - name: first
    url: "http://127.0.0.1:1/mcp"

# the end
`

// TestServersAddWritesTheEntry: servers add reports the validators, writes
// the entry at the end of servers: with validator set, every other byte of
// the file unchanged, and prints the policy line of the read-only tools;
// --dry-run prints it and writes nothing; a name already configured is
// refused.
func TestServersAddWritesTheEntry(t *testing.T) {
	g := newGWDir(t, addConfig)
	file := filepath.Join(g.dir, "backplane.yaml")
	server := mcpTestServer(t)

	r := g.run(t, "", "servers", "add", "go", "--dry-run", "--", server)
	r.wantCode(t, exitOK)
	for _, want := range []string{"validator subset accepts", "validator draft2020-12 accepts", "go.remote_ref: $ref", "go.exact: x-big", "would add to", "- name: go", `allow: ["go.env","go.greet"]`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--dry-run does not say %q:\n%s", want, r.stdout)
		}
	}
	if data, _ := os.ReadFile(file); string(data) != addConfig {
		t.Errorf("--dry-run changed the file:\n%s", data)
	}

	r = g.run(t, "", "servers", "add", "go", "--", server)
	r.wantCode(t, exitOK)
	data, _ := os.ReadFile(file)
	want := strings.Replace(addConfig, "    url: \"http://127.0.0.1:1/mcp\"\n",
		"    url: \"http://127.0.0.1:1/mcp\"\n  - name: go\n    command: [\""+server+"\"]\n    validator: draft2020-12   # written by backplane servers add: schemas checked as JSON Schema 2020-12 in full\n", 1)
	if string(data) != want {
		t.Errorf("the file after servers add:\n%s\nwant:\n%s", data, want)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want the file's own 0644", fi.Mode().Perm())
	}

	r = g.run(t, "", "servers", "add", "go", "--", server)
	r.wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "has a server named go already") {
		t.Errorf("a second add: %s", r.stderr)
	}
	g.run(t, "", "servers", "add", "x").wantCode(t, exitUsage)
}

// TestServersAddReferenceServers: for each npm reference server, servers
// add chooses draft2020-12 (the subset refuses their $schema), after which
// every one of its tools is callable; the file's comments stay.
func TestServersAddReferenceServers(t *testing.T) {
	bin := func(name string) string {
		p, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-"+name))
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed (npm ci in testdata/mcp-peers): %v", p, err)
		}
		return p
	}
	g := newGWDir(t, strings.Replace(addConfig, "  - name: first\n    url: \"http://127.0.0.1:1/mcp\"\n", "", 1)+"\n")
	ws := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"files", []string{bin("filesystem"), ws}},
		{"memory", []string{bin("memory")}},
		{"everything", []string{bin("everything")}},
	} {
		r := g.run(t, "", append([]string{"servers", "add", c.name, "--"}, c.args...)...)
		r.wantCode(t, exitOK)
		if !strings.Contains(r.stdout, "with validator: draft2020-12") || !strings.Contains(r.stdout, "$schema") {
			t.Errorf("servers add %s:\n%s", c.name, r.stdout)
		}
	}
	data, _ := os.ReadFile(filepath.Join(g.dir, "backplane.yaml"))
	for _, comment := range []string{"# my configuration, by hand", "# beside this file", "# a server already there", "# the end"} {
		if !strings.Contains(string(data), comment) {
			t.Errorf("the comment %q is gone:\n%s", comment, data)
		}
	}
	tools := g.toolsByName(t)
	n := 0
	for name, e := range tools {
		if !strings.HasPrefix(name, "files.") && !strings.HasPrefix(name, "memory.") && !strings.HasPrefix(name, "everything.") {
			continue
		}
		n++
		if e["callable"] != true {
			t.Errorf("%s is not callable: %v", name, e["refused"])
		}
	}
	if n < 30 {
		t.Errorf("%d tools of the three servers, want over 30", n)
	}
}

// TestServersAppendEntry: the entry goes after the last item of servers:,
// under a servers: with nothing after it, or at the end with a new
// servers: key; a flow-style list is refused rather than rewritten.
func TestServersAppendEntry(t *testing.T) {
	e := entry{lines: []string{"- name: x", "  url: \"http://127.0.0.1:9/mcp\""}}
	for _, c := range []struct{ name, in, want string }{
		{"no servers key", "store: s # c\n", "store: s # c\nservers:\n  - name: x\n    url: \"http://127.0.0.1:9/mcp\"\n"},
		{"no final newline", "store: s", "store: s\nservers:\n  - name: x\n    url: \"http://127.0.0.1:9/mcp\"\n"},
		{"empty servers", "servers:\n# later\nstore: s\n", "servers:\n  - name: x\n    url: \"http://127.0.0.1:9/mcp\"\n# later\nstore: s\n"},
		{"indented items", "servers:\n    - name: a\n      url: \"http://127.0.0.1:1/mcp\"\n\nstore: s\n",
			"servers:\n    - name: a\n      url: \"http://127.0.0.1:1/mcp\"\n    - name: x\n      url: \"http://127.0.0.1:9/mcp\"\n\nstore: s\n"},
		{"block scalar", "servers:\n  - name: a\n    command:\n      - sh\n      - |\n        echo a\n        echo b\nstore: s\n",
			"servers:\n  - name: a\n    command:\n      - sh\n      - |\n        echo a\n        echo b\n  - name: x\n    url: \"http://127.0.0.1:9/mcp\"\nstore: s\n"},
	} {
		got, _, err := appendServer([]byte(c.in), e)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %v\n%s\nwant\n%s", c.name, err, got, c.want)
		}
	}
	if _, _, err := appendServer([]byte("servers: [{name: a, url: \"http://127.0.0.1:1/mcp\"}]\n"), e); err == nil {
		t.Error("a flow-style servers: was rewritten")
	}
	if _, _, err := appendServer([]byte("- a\n- b\n"), e); err == nil {
		t.Error("a file that is not a mapping was added to")
	}
}

// TestServersAddURL: servers add --url speaks streamable HTTP: here to a
// backplane serve of its own (its anonymous caller may list ls and read,
// whose schemas are in the subset), and writes a url entry.
func TestServersAddURL(t *testing.T) {
	up := newGWDir(t, "store: state\nworkspace: .\npolicy:\n  - caller: guest\n    allow: [ls, read]\nserve:\n  anonymous_caller: guest\n")
	p := startServe(t, up)
	g := newGWDir(t, addConfig)
	r := g.run(t, "", "servers", "add", "up", "--url", p.base+"/mcp")
	r.wantCode(t, exitOK)
	for _, want := range []string{"server up: 2 tools", "validator subset accepts 2 of 2", "with validator: subset", `allow: ["up.ls","up.read"]`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("servers add --url does not say %q:\n%s\n%s", want, r.stdout, r.stderr)
		}
	}
	data, _ := os.ReadFile(filepath.Join(g.dir, "backplane.yaml"))
	if !strings.Contains(string(data), "  - name: up\n    url: \""+p.base+"/mcp\"\n    validator: subset") {
		t.Errorf("the file after servers add --url:\n%s", data)
	}
	g.run(t, "", "servers", "add", "up2", "--url", p.base+"/mcp", "--", "x").wantCode(t, exitUsage)
}
