package builtin

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/agentbackplane/backplane/tool"
)

// escapeFixture adds, inside the workspace, every way out the tests try:
// symbolic links to the outside (absolute and relative), a link to the
// secret itself, and a loop.
func escapeFixture(t *testing.T) *fixture {
	f := newFixture(t, nil)
	writeFile(t, f.path("inside.txt"), "inside\n")
	writeFile(t, f.path("sub/file.txt"), "sub file\n")
	relOut, err := filepath.Rel(f.ws, f.outside)
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, f.outside, f.path("out"))                                 // absolute, to the outside folder
	symlink(t, relOut, f.path("outrel"))                                 // relative, ../outside
	symlink(t, f.secret, f.path("secretlink"))                           // absolute, to the secret
	symlink(t, filepath.Join(relOut, "secret.txt"), f.path("secretrel")) // relative, to the secret
	symlink(t, filepath.Join("..", "..", relOut), f.path("sub/uplink"))  // climbs from a subfolder
	symlink(t, "loop2", f.path("loop1"))
	symlink(t, "loop1", f.path("loop2"))
	return f
}

// escapePaths are the ways out, for a tool whose path names a file (file)
// or a folder (dir).
func escapePaths(f *fixture, file bool) map[string]string {
	relOut, _ := filepath.Rel(f.ws, f.outside)
	if file {
		return map[string]string{
			"dotdot":             filepath.Join(relOut, "secret.txt"),
			"dotdot-inside-path": "sub/../../" + filepath.Base(f.outside) + "/secret.txt",
			"absolute":           f.secret,
			"symlink-dir-abs":    "out/secret.txt",
			"symlink-dir-rel":    "outrel/secret.txt",
			"symlink-file-abs":   "secretlink",
			"symlink-file-rel":   "secretrel",
			"symlink-in-subdir":  "sub/uplink/secret.txt",
		}
	}
	return map[string]string{
		"dotdot":          "..",
		"dotdot-outside":  relOut,
		"absolute":        f.outside,
		"absolute-root":   "/",
		"symlink-dir-abs": "out",
		"symlink-dir-rel": "outrel",
		"symlink-subdir":  "sub/uplink",
	}
}

func TestEscapesAreForbidden(t *testing.T) {
	f := escapeFixture(t)
	s := f.set
	type tc struct {
		tool string
		file bool
		args func(p string) json.RawMessage
	}
	tools := []tc{
		{"read", true, func(p string) json.RawMessage { return args("path", p) }},
		{"write", true, func(p string) json.RawMessage { return args("path", p, "content", "pwned\n") }},
		{"edit", true, func(p string) json.RawMessage { return args("path", p, "content", "pwned\n") }},
		{"edit", true, func(p string) json.RawMessage {
			return args("path", p, "old_content", "TOPSECRET", "content", "pwned")
		}},
		{"grep", true, func(p string) json.RawMessage { return args("pattern", "TOPSECRET", "path", p) }},
		{"ls", false, func(p string) json.RawMessage { return args("path", p) }},
		{"glob", false, func(p string) json.RawMessage { return args("pattern", "**/*", "path", p) }},
		{"grep", false, func(p string) json.RawMessage { return args("pattern", "TOPSECRET", "path", p) }},
	}
	for _, tc := range tools {
		for name, p := range escapePaths(f, tc.file) {
			t.Run(tc.tool+"/"+name, func(t *testing.T) {
				a := tc.args(p)
				res, err := call(t, s, tc.tool, a)
				e := errorOf(t, tc.tool, a, res, err)
				if e.Class != string(tool.ClassForbidden) {
					t.Fatalf("%s %s: class %s (%s), want forbidden", tc.tool, a, e.Class, e.Message)
				}
				if strings.Contains(string(res.Content), "TOPSECRET") {
					t.Fatalf("the refusal leaks the secret: %s", res.Content)
				}
			})
		}
	}
	f.assertOutsideUntouched(t)
}

func TestWritesThroughEscapesCreateNothingOutside(t *testing.T) {
	f := escapeFixture(t)
	for _, p := range []string{"out/new.txt", "outrel/new.txt", "out/newdir/new.txt", "sub/uplink/new.txt",
		filepath.Join(f.outside, "new.txt")} {
		mustFail(t, f.set, "write", args("path", p, "content", "x"), tool.ClassForbidden)
	}
	f.assertOutsideUntouched(t)
}

func TestWalksDoNotFollowSymlinksOut(t *testing.T) {
	f := escapeFixture(t)
	var g grepResult
	mustOK(t, f.set, "grep", args("pattern", "TOPSECRET"), &g)
	if len(g.Matches) != 0 {
		t.Errorf("grep over the workspace found the outside secret: %+v", g.Matches)
	}
	var gl globResult
	mustOK(t, f.set, "glob", args("pattern", "**/*.txt"), &gl)
	if want := []string{"inside.txt", "sub/file.txt"}; strings.Join(gl.Paths, ",") != strings.Join(want, ",") {
		t.Errorf("glob **/*.txt = %v, want %v (nothing through the links)", gl.Paths, want)
	}
	mustOK(t, f.set, "glob", args("pattern", "**/secret*"), &gl)
	for _, p := range gl.Paths {
		if strings.Contains(p, "/") {
			t.Errorf("glob went through a link: %s", p)
		}
	}
	mustOK(t, f.set, "glob", args("pattern", "out*/**"), &gl)
	for _, p := range gl.Paths {
		if strings.HasPrefix(p, "out/") || strings.HasPrefix(p, "outrel/") {
			t.Errorf("glob listed %s, inside a link to the outside", p)
		}
	}
}

func TestGlobPatternCannotClimbOut(t *testing.T) {
	f := escapeFixture(t)
	relOut, _ := filepath.Rel(f.ws, f.outside)
	for _, p := range []string{"../*", "../**/*.txt", relOut + "/*", "sub/../../*", f.outside + "/*"} {
		res, err := call(t, f.set, "glob", args("pattern", p))
		e := errorOf(t, "glob", args("pattern", p), res, err)
		if e.Class != string(tool.ClassForbidden) && e.Class != string(tool.ClassValidation) {
			t.Errorf("glob %q: class %s, want forbidden or validation", p, e.Class)
		}
		if strings.Contains(string(res.Content), "secret.txt") {
			t.Errorf("glob %q lists the outside: %s", p, res.Content)
		}
	}
	// An absolute pattern inside the workspace is fine.
	var gl globResult
	mustOK(t, f.set, "glob", args("pattern", f.ws+"/**/*.txt"), &gl)
	if want := "inside.txt,sub/file.txt"; strings.Join(gl.Paths, ",") != want {
		t.Errorf("absolute pattern: %v, want %s", gl.Paths, want)
	}
}

func TestSymlinkLoopIsAClearError(t *testing.T) {
	f := escapeFixture(t)
	for _, c := range []struct {
		tool string
		a    json.RawMessage
	}{
		{"read", args("path", "loop1")},
		{"read", args("path", "loop1/x")},
		{"write", args("path", "loop1", "content", "x")},
		{"write", args("path", "loop1/x", "content", "x")},
		{"edit", args("path", "loop2", "content", "x")},
		{"ls", args("path", "loop1")},
		{"glob", args("pattern", "*", "path", "loop1")},
		{"grep", args("pattern", "x", "path", "loop1")},
	} {
		res, err := call(t, f.set, c.tool, c.a)
		e := errorOf(t, c.tool, c.a, res, err)
		if e.Class != string(tool.ClassExecutionFailure) || !strings.Contains(e.Message, "symbolic link loop") {
			t.Errorf("%s %s: %s %q, want execution_failure naming the symbolic link loop", c.tool, c.a, e.Class, e.Message)
		}
	}
	// The loop's links are still there, untouched.
	if target, err := os.Readlink(f.path("loop1")); err != nil || target != "loop2" {
		t.Errorf("loop1 -> %q, %v", target, err)
	}
}

func TestMissingFilesAreNotFound(t *testing.T) {
	f := escapeFixture(t)
	for _, c := range []struct {
		tool string
		a    json.RawMessage
	}{
		{"read", args("path", "nope.txt")},
		{"read", args("path", "inside.txt/child")},
		{"edit", args("path", "nope.txt", "content", "x")},
		{"edit", args("path", "nope.txt", "old_content", "a", "content", "x")},
		{"ls", args("path", "nope")},
		{"glob", args("pattern", "*", "path", "nope")},
		{"grep", args("pattern", "x", "path", "nope")},
	} {
		res, err := call(t, f.set, c.tool, c.a)
		e := errorOf(t, c.tool, c.a, res, err)
		if e.Class != string(tool.ClassNotFound) {
			t.Errorf("%s %s: class %s (%s), want not_found", c.tool, c.a, e.Class, e.Message)
		}
	}
	if _, err := os.Stat(f.path("nope.txt")); !os.IsNotExist(err) {
		t.Errorf("edit of a missing file created it")
	}
}

func TestPermissionErrorsAreForbidden(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: file permissions do not apply, so there is no permission error to observe")
	}
	f := newFixture(t, nil)
	writeFile(t, f.path("locked.txt"), "x\n")
	os.Chmod(f.path("locked.txt"), 0)
	mkdir(t, f.path("lockeddir"))
	os.Chmod(f.path("lockeddir"), 0)
	t.Cleanup(func() { os.Chmod(f.path("lockeddir"), 0o755) })
	e := mustFail(t, f.set, "read", args("path", "locked.txt"), tool.ClassForbidden)
	if !strings.Contains(e.Message, "permission denied") {
		t.Errorf("message %q does not say permission denied", e.Message)
	}
	mustFail(t, f.set, "ls", args("path", "lockeddir"), tool.ClassForbidden)
	mustFail(t, f.set, "write", args("path", "lockeddir/x.txt", "content", "x"), tool.ClassForbidden)
}

func TestAbsolutePathsInsideTheWorkspace(t *testing.T) {
	f := escapeFixture(t)
	var r readResult
	mustOK(t, f.set, "read", args("path", f.path("inside.txt")), &r)
	if r.Content != "     1\tinside\n" || r.Path != "inside.txt" {
		t.Errorf("read by absolute path: %+v", r)
	}
	var l lsResult
	mustOK(t, f.set, "ls", args("path", f.ws), &l)
	if l.Path != "." {
		t.Errorf("ls of the workspace's absolute path shows path %q", l.Path)
	}
	var w writeResult
	mustOK(t, f.set, "write", args("path", f.path("abs/new.txt"), "content", "n"), &w)
	if got := readString(t, f.path("abs/new.txt")); got != "n" {
		t.Errorf("written %q", got)
	}
	// A path that climbs out and back in is inside.
	mustOK(t, f.set, "read", args("path", "sub/../inside.txt"), &r)
	if r.Content != "     1\tinside\n" {
		t.Errorf("sub/../inside.txt: %q", r.Content)
	}
	// A symbolic link that stays inside is followed.
	symlink(t, "sub", f.path("sublink"))
	mustOK(t, f.set, "read", args("path", "sublink/file.txt"), &r)
	if r.Content != "     1\tsub file\n" {
		t.Errorf("sublink/file.txt: %q", r.Content)
	}
}

// There is no check separate from the use: each open resolves the path
// through the root at the moment of the open. A folder replaced by a link
// to the outside between two calls (or between anything a caller could
// have checked and the call) is refused.
func TestSymlinkSwappedInIsRefused(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("sub/secret.txt"), "harmless\n")
	writeFile(t, f.path("sub/edit.txt"), "harmless\n")
	var r readResult
	mustOK(t, f.set, "read", args("path", "sub/secret.txt"), &r)
	if !strings.Contains(r.Content, "harmless") {
		t.Fatalf("before the swap: %q", r.Content)
	}
	// The swap: the folder goes, a link to the outside takes its name.
	if err := os.RemoveAll(f.path("sub")); err != nil {
		t.Fatal(err)
	}
	symlink(t, f.outside, f.path("sub"))
	mustFail(t, f.set, "read", args("path", "sub/secret.txt"), tool.ClassForbidden)
	mustFail(t, f.set, "write", args("path", "sub/secret.txt", "content", "pwned"), tool.ClassForbidden)
	mustFail(t, f.set, "edit", args("path", "sub/secret.txt", "old_content", "TOPSECRET", "content", "pwned"), tool.ClassForbidden)
	mustFail(t, f.set, "ls", args("path", "sub"), tool.ClassForbidden)
	mustFail(t, f.set, "grep", args("pattern", "TOP", "path", "sub"), tool.ClassForbidden)
	mustFail(t, f.set, "glob", args("pattern", "*", "path", "sub"), tool.ClassForbidden)
	f.assertOutsideUntouched(t)
}

// The same swap, racing: a folder flips between a real folder and a link to
// the outside while reads and writes go through it. Whatever the
// interleaving, nothing outside is read or written.
func TestSymlinkSwapRace(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("real/secret.txt"), "harmless\n")
	symlink(t, f.outside, f.path("link"))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < 5000; i++ {
			// "race" is the real folder, then nothing, then the link.
			os.Rename(f.path("real"), f.path("race"))
			os.Rename(f.path("race"), f.path("real"))
			os.Rename(f.path("link"), f.path("race"))
			os.Rename(f.path("race"), f.path("link"))
		}
	}()
	counts := map[string]int{}
	for i := 0; i < 400; i++ {
		res, err := call(t, f.set, "read", args("path", "race/secret.txt"))
		if err != nil {
			t.Fatalf("read: Go error %v", err)
		}
		if strings.Contains(string(res.Content), "TOPSECRET") {
			t.Fatalf("a read through the swapped link returned the outside secret: %s", res.Content)
		}
		if res.IsError {
			var r struct{ Error errBody }
			json.Unmarshal(res.Content, &r)
			counts[r.Error.Class]++
		} else {
			counts["ok"]++
		}
		// edit, not write: write would create a missing "race" folder.
		if _, err := call(t, f.set, "edit", args("path", "race/secret.txt", "content", "harmless\n")); err != nil {
			t.Fatalf("edit: Go error %v", err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("read outcomes under the race: %v", counts)
	for class := range counts {
		if class != "ok" && class != "forbidden" && class != "not_found" {
			t.Errorf("unexpected outcome class %s", class)
		}
	}
	f.assertOutsideUntouched(t)
}

// os.Root's escape error is unexported; New learns its identity. If a Go
// release changed how it is reported, this says so before confinement
// refusals silently turn into another class.
func TestEscapeErrorIsRecognised(t *testing.T) {
	f := newFixture(t, nil)
	if escapeErr == nil {
		t.Fatal("New did not learn os.Root's escape error")
	}
	_, err := f.set.root.Open("../x")
	if !isEscape(err) || !errors.Is(err, escapeErr) {
		t.Errorf("os.Root's refusal of ../x (%v) is not recognised as an escape", err)
	}
}

// The classification of file system errors, for the cases a test cannot
// produce on this machine (permissions, when running as root).
func TestFSErrorClasses(t *testing.T) {
	for _, c := range []struct {
		err   error
		class tool.Class
		text  string
	}{
		{&fs.PathError{Op: "open", Path: "p", Err: syscall.EACCES}, tool.ClassForbidden, "permission denied"},
		{&fs.PathError{Op: "open", Path: "p", Err: syscall.EPERM}, tool.ClassForbidden, "permission denied"},
		{&fs.PathError{Op: "open", Path: "p", Err: syscall.ENOENT}, tool.ClassNotFound, "does not exist"},
		{&fs.PathError{Op: "open", Path: "p", Err: syscall.ENOTDIR}, tool.ClassNotFound, "not a directory"},
		{&fs.PathError{Op: "open", Path: "p", Err: syscall.ELOOP}, tool.ClassExecutionFailure, "symbolic link loop"},
		{&fs.PathError{Op: "open", Path: "p", Err: syscall.ENAMETOOLONG}, tool.ClassValidation, "file name too long"},
		{&fs.PathError{Op: "write", Path: "p", Err: syscall.ENOSPC}, tool.ClassExecutionFailure, "no space left"},
		{&fs.PathError{Op: "open", Path: "p", Err: errors.New("path escapes from parent")}, tool.ClassForbidden, "outside the workspace"},
	} {
		var te *toolError
		if err := fsError("p", c.err); !errors.As(err, &te) || te.class != c.class || !strings.Contains(te.msg, c.text) {
			t.Errorf("fsError(%v) = %v, want %s mentioning %q", c.err, err, c.class, c.text)
		}
	}
}
