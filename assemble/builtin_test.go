package assemble

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// With the defaults (workspace ., store .backplane) the state folder lies
// inside the workspace. The built-in tools must not reach it, nor the audit
// log, nor the configuration file, whatever the path or link, while the
// rest of the workspace stays theirs.
func TestBuiltinToolsCannotReachTheGatewaysState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, config.DefaultFile)
	src := "policy:\n  - caller: alice\n    allow: [read, ls, grep, glob]\nlog: {file: audit.log}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".backplane", filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Workspace != dir || c.Store != filepath.Join(dir, config.DefaultStore) {
		t.Fatalf("workspace %s, store %s: the defaults should put the store inside the workspace %s", c.Workspace, c.Store, dir)
	}
	rt, err := Open(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()

	// Another file of the workspace is read as usual.
	res, err := call(rt, "alice", "read", `{"path":"hello.txt"}`)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Content string }
	if err := json.Unmarshal(res.Result, &r); err != nil || res.IsError || r.Content != "     1\thello from alice\n" {
		t.Fatalf("read hello.txt: %s (is_error %v, %v)", res.Result, res.IsError, err)
	}

	// The journal exists where the tools must not look.
	db := filepath.Join(dir, config.DefaultStore, sqlite.DBFile)
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("no journal at %s: %v", db, err)
	}
	for _, p := range []string{
		".backplane/" + sqlite.DBFile,
		"./.backplane/" + sqlite.DBFile,
		db,                        // absolute
		"x/" + sqlite.DBFile,      // through a link to the state folder
		config.DefaultFile,        // the configuration file
		"audit.log",               // the audit log
		".backplane/anything.txt", // inside, even when missing
	} {
		a, _ := json.Marshal(map[string]string{"path": p})
		res, err := call(rt, "alice", "read", string(a))
		if err != nil {
			t.Errorf("read %s: gateway error %v, want a forbidden result", p, err)
			continue
		}
		var e struct {
			Error struct{ Class, Message string }
		}
		if err := json.Unmarshal(res.Result, &e); err != nil || !res.IsError || e.Error.Class != "forbidden" {
			t.Errorf("read %s: %s (is_error %v), want an error result of class forbidden", p, res.Result, res.IsError)
			continue
		}
		if !strings.Contains(e.Error.Message, "private state") {
			t.Errorf("read %s: message %q does not say it is the gateway's private state", p, e.Error.Message)
		}
	}

	// Listings and searches leave the state out. The audit log holds
	// "alice" (every call above is logged): grep must not find it there.
	// The audit file is written in batches (every 200 ms): wait for one.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "audit.log"))
		if err == nil && strings.Contains(string(b), `"alice"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit log does not name alice after 10 s (%v): the grep below would prove nothing", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err = call(rt, "alice", "ls", `{}`)
	if err != nil || res.IsError {
		t.Fatalf("ls: %v %s", err, res.Result)
	}
	var l struct{ Entries []struct{ Name string } }
	json.Unmarshal(res.Result, &l)
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "hello.txt,x" {
		t.Errorf("ls of the workspace lists %v, want [hello.txt x]", names)
	}
	res, err = call(rt, "alice", "grep", `{"pattern":"alice"}`)
	if err != nil || res.IsError {
		t.Fatalf("grep: %v %s", err, res.Result)
	}
	var g struct{ Matches []struct{ Path string } }
	json.Unmarshal(res.Result, &g)
	if len(g.Matches) != 1 || g.Matches[0].Path != "hello.txt" {
		t.Errorf("grep alice over the workspace: %s, want one match in hello.txt", res.Result)
	}
	res, err = call(rt, "alice", "glob", `{"pattern":"**"}`)
	if err != nil || res.IsError {
		t.Fatalf("glob: %v %s", err, res.Result)
	}
	var gl struct{ Paths []string }
	json.Unmarshal(res.Result, &gl)
	if strings.Join(gl.Paths, ",") != "hello.txt,x" {
		t.Errorf("glob ** lists %v, want [hello.txt x] (x unfollowed)", gl.Paths)
	}
}
