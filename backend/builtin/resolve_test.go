package builtin

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/tool"
)

// resolvePath resolves a tool's path argument as the gateway does.
func resolvePath(t *testing.T, s *Set, name string, a []byte) (*tool.ResolvedPath, error) {
	t.Helper()
	tl, ok := s.Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	pr, ok := tl.Backend.(tool.PathResolver)
	if !ok {
		t.Fatalf("%s is not a tool.PathResolver", name)
	}
	return pr.ResolvePath(a)
}

// ResolvePath returns the real workspace-relative path: links inside the
// workspace followed, "." and "//" and absolute forms taken apart, a
// missing rest by name; escapes wrap tool.ErrPathRefused (issue 22,
// finding 6).
func TestResolvePath(t *testing.T) {
	f := newFixture(t, nil)
	mkdir(t, f.path("src/deep"))
	mkdir(t, f.path("conf"))
	writeFile(t, f.path(".env"), "TOKEN=x\n")
	symlink(t, "../.env", f.path("src/envlink"))
	symlink(t, "..", f.path("src/up"))
	symlink(t, "../conf", f.path("src/conflink"))
	symlink(t, "deep/../../.env", f.path("src/twisty"))
	symlink(t, "loop2", f.path("loop1"))
	symlink(t, "loop1", f.path("loop2"))
	symlink(t, f.secret, f.path("src/out"))
	for _, c := range []struct{ tool, path, want string }{
		{"read", "src/envlink", ".env"},
		{"read", f.path("src/envlink"), ".env"},
		{"read", "src/./envlink", ".env"},
		{"read", "src//envlink", ".env"},
		{"read", "src/up/src/up/.env", ".env"},
		{"read", "src/twisty", ".env"},
		{"read", "src/missing/../x", "src/x"},
		{"ls", "", "."},
		{"ls", "src/up", "."},
		{"grep", "src/conflink", "conf"},
		{"write", "src/conflink/new/x.yaml", "conf/new/x.yaml"},
		{"write", "src/conflink/x.yaml", "conf/x.yaml"},
	} {
		rp, err := resolvePath(t, f.set, c.tool, args("path", c.path))
		if err != nil || rp.Real != c.want || rp.Field != "path" {
			t.Errorf("%s %q: %+v %v, want %s", c.tool, c.path, rp, err, c.want)
		}
	}
	for _, p := range []string{"src/out", "../x", "src/up/..", f.secret} {
		if _, err := resolvePath(t, f.set, "read", args("path", p)); !errors.Is(err, tool.ErrPathRefused) {
			t.Errorf("%q: %v, want an escape", p, err)
		}
	}
	if _, err := resolvePath(t, f.set, "read", args("path", "loop1")); err == nil || errors.Is(err, tool.ErrPathRefused) {
		t.Errorf("a loop: %v, want an error that is not an escape", err)
	}
}

// The tool uses the file the policy decided on or nothing: a link swapped
// between ResolvePath and Invoke is refused, for a file (read), a folder
// (ls, glob, grep) and the folder a write renames into; a path that could
// not be resolved is never used even if it opens later (fail closed).
func TestResolvedPathSwappedBeforeUse(t *testing.T) {
	f := newFixture(t, nil)
	mkdir(t, f.path("a"))
	mkdir(t, f.path("b"))
	writeFile(t, f.path("a/file.txt"), "a\n")
	writeFile(t, f.path("b/file.txt"), "b\n")
	symlink(t, "a", f.path("link"))
	ctx := context.Background()
	for _, c := range []struct {
		tool string
		args []byte
	}{
		{"read", args("path", "link/file.txt")},
		{"ls", args("path", "link")},
		{"glob", args("path", "link", "pattern", "*")},
		{"grep", args("path", "link", "pattern", "a")},
		{"grep", args("path", "link/file.txt", "pattern", "a")},
		{"write", args("path", "link/new.txt", "content", "x")},
		{"edit", args("path", "link/file.txt", "content", "x")},
	} {
		os.Remove(f.path("link"))
		symlink(t, "a", f.path("link"))
		rp, err := resolvePath(t, f.set, c.tool, c.args)
		if err != nil || !strings.HasPrefix(rp.Real, "a") {
			t.Fatalf("%s %s: %+v %v", c.tool, c.args, rp, err)
		}
		// Used as resolved: fine.
		tl, _ := f.set.Tool(c.tool)
		res, err := tl.Backend.Invoke(ctx, &tool.Call{Tool: c.tool, Arguments: c.args, Path: rp})
		if err != nil || res.IsError {
			t.Errorf("%s as resolved: %v %s", c.tool, err, res.Content)
		}
		// Swapped to b since: refused.
		os.Remove(f.path("link"))
		symlink(t, "b", f.path("link"))
		res, err = tl.Backend.Invoke(ctx, &tool.Call{Tool: c.tool, Arguments: c.args, Path: rp})
		e := errorOf(t, c.tool, c.args, res, err)
		if e.Class != string(tool.ClassForbidden) || !strings.Contains(e.Message, "changed between the policy's decision and its use") {
			t.Errorf("%s after the swap: %+v", c.tool, e)
		}
	}
	if got := readString(t, f.path("b/file.txt")); got != "b\n" {
		t.Errorf("b/file.txt changed to %q", got)
	}
	if _, err := os.Stat(f.path("b/new.txt")); !os.IsNotExist(err) {
		t.Errorf("b/new.txt was written (%v)", err)
	}

	// A file that did not exist when decided: created since as a link
	// elsewhere, it is refused; created where decided, it is used.
	rp, err := resolvePath(t, f.set, "read", args("path", "late.txt"))
	if err != nil || rp.Real != "late.txt" {
		t.Fatalf("late.txt: %+v %v", rp, err)
	}
	symlink(t, "b/file.txt", f.path("late.txt"))
	tl, _ := f.set.Tool("read")
	res, err := tl.Backend.Invoke(ctx, &tool.Call{Tool: "read", Arguments: args("path", "late.txt"), Path: rp})
	if e := errorOf(t, "read", nil, res, err); e.Class != string(tool.ClassForbidden) {
		t.Errorf("late.txt created as a link: %+v", e)
	}
	os.Remove(f.path("late.txt"))
	writeFile(t, f.path("late.txt"), "late\n")
	if res, err := tl.Backend.Invoke(ctx, &tool.Call{Tool: "read", Arguments: args("path", "late.txt"), Path: rp}); err != nil || res.IsError {
		t.Errorf("late.txt created where decided: %v %s", err, res.Content)
	}

	// Not resolved when decided: refused, whatever is there now.
	res, err = tl.Backend.Invoke(ctx, &tool.Call{Tool: "read", Arguments: args("path", "a/file.txt"),
		Path: &tool.ResolvedPath{Field: "path", Err: errors.New("a loop")}})
	if e := errorOf(t, "read", nil, res, err); e.Class != string(tool.ClassForbidden) {
		t.Errorf("unresolved: %+v", e)
	}
}

// glob and grep leave out what PathDenied says is denied, by real path: a
// link's target and a folder reached through a link.
func TestWalksHonourPathDenied(t *testing.T) {
	f := newFixture(t, nil)
	mkdir(t, f.path("src"))
	writeFile(t, f.path(".env"), "TOKEN=x\n")
	writeFile(t, f.path("src/main.go"), "TOKEN=y\n")
	writeFile(t, f.path("src/.env"), "TOKEN=z\n")
	symlink(t, "../.env", f.path("src/envlink"))
	denied := func(real string) bool { return real == ".env" || strings.HasSuffix(real, "/.env") }
	ctx := context.Background()
	for name, a := range map[string][]byte{
		"glob": args("path", "src", "pattern", "*"),
		"grep": args("path", "src", "pattern", "TOKEN"),
	} {
		rp, err := resolvePath(t, f.set, name, a)
		if err != nil {
			t.Fatal(err)
		}
		tl, _ := f.set.Tool(name)
		res, err := tl.Backend.Invoke(ctx, &tool.Call{Tool: name, Arguments: a, Path: rp, PathDenied: denied})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %s", name, err, res.Content)
		}
		got := string(res.Content)
		if strings.Contains(got, ".env") || strings.Contains(got, "envlink") || strings.Contains(got, "TOKEN=z") || !strings.Contains(got, "src/main.go") {
			t.Errorf("%s: %s, want src/main.go alone", name, got)
		}
	}
}
