package builtin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentbackplane/backplane/tool"
)

// journalText is in every hidden file; a result holding it leaked one.
const journalText = "SECRET-JOURNAL caller=bob arguments={\"token\":\"hunter2\"}\n"

// hideFixture is a workspace holding the gateway's state the way the
// default configuration lays it out (.backplane/ with the journal, an
// audit log and a lock file; backplane.yaml beside it), hidden, plus
// every link into it a tool might be handed:
//
//	x -> .backplane                   (relative link to the hidden folder)
//	y -> .backplane/backplane.db      (relative link to a hidden file)
//	xabs -> <ws>/.backplane           (absolute link: refused as leading out anyway)
//	sub/z -> ../.backplane            (from a subfolder)
//	cfg -> backplane.yaml             (link to the hidden configuration file)
//
// and look-alike names that are not hidden (.backplane2/, backplane.yaml.bak)
// and a visible file holding the same text as the journal.
type hideFixture struct {
	ws, state string // the workspace as given to New; ws/.backplane
	set       *Set
	// before is the hidden folder's content when the tools were opened.
	before map[string]string
}

func newHideFixture(t *testing.T, throughLink bool) *hideFixture {
	t.Helper()
	base := t.TempDir()
	real := filepath.Join(base, "ws")
	mkdir(t, real)
	ws := real
	if throughLink {
		// The workspace is named through a link: hidden paths given under
		// that name must be recognised by their real location too.
		ws = filepath.Join(base, "wslink")
		symlink(t, real, ws)
	}
	h := &hideFixture{ws: ws, state: filepath.Join(ws, ".backplane")}
	for _, name := range []string{"backplane.db", "backplane.db-wal", "audit.log", "inner/incarnation.lock"} {
		writeFile(t, filepath.Join(h.state, name), journalText)
	}
	writeFile(t, filepath.Join(ws, "backplane.yaml"), "store: .backplane\n# "+journalText)
	writeFile(t, filepath.Join(ws, "notes.txt"), "visible\n"+journalText)
	writeFile(t, filepath.Join(ws, "sub", "file.txt"), "sub file\n")
	writeFile(t, filepath.Join(ws, ".backplane2", "file.txt"), "look-alike folder\n")
	writeFile(t, filepath.Join(ws, "backplane.yaml.bak"), "look-alike file\n")
	symlink(t, ".backplane", filepath.Join(ws, "x"))
	symlink(t, ".backplane/backplane.db", filepath.Join(ws, "y"))
	symlink(t, h.state, filepath.Join(ws, "xabs"))
	symlink(t, "../.backplane", filepath.Join(ws, "sub", "z"))
	symlink(t, "backplane.yaml", filepath.Join(ws, "cfg"))
	h.before = contents(t, h.state)

	s, err := New(&Options{Workspace: ws, Hide: []string{h.state, filepath.Join(ws, "backplane.yaml")}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	h.set = s
	return h
}

// contents maps every file under dir to its content.
func contents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		if info.IsDir() {
			out[r+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		out[r] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (h *hideFixture) assertStateUntouched(t *testing.T) {
	t.Helper()
	after := contents(t, h.state)
	if len(after) != len(h.before) {
		t.Errorf("the hidden folder now holds %v, want %v", keys(after), keys(h.before))
	}
	for name, was := range h.before {
		if after[name] != was {
			t.Errorf("hidden %s now reads %q, want %q", name, after[name], was)
		}
	}
	if got := readString(t, filepath.Join(h.ws, "backplane.yaml")); got != "store: .backplane\n# "+journalText {
		t.Errorf("the hidden configuration file now reads %q", got)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// hiddenFilePaths name a hidden file, each a different way.
func hiddenFilePaths(h *hideFixture) map[string]string {
	return map[string]string{
		"direct":             ".backplane/backplane.db",
		"dot-slash":          "./.backplane/backplane.db",
		"dotdot":             "sub/../.backplane/backplane.db",
		"absolute":           filepath.Join(h.ws, ".backplane", "backplane.db"),
		"deeper":             ".backplane/inner/incarnation.lock",
		"missing-inside":     ".backplane/not-there.txt",
		"symlink-to-dir":     "x/backplane.db",
		"symlink-to-file":    "y",
		"symlink-in-subdir":  "sub/z/audit.log",
		"config-file":        "backplane.yaml",
		"symlink-to-config":  "cfg",
		"absolute-config":    filepath.Join(h.ws, "backplane.yaml"),
		"symlink-deeper-dir": "x/inner/incarnation.lock",
	}
}

// hiddenDirPaths name the hidden folder (or a hidden file, where a folder
// is expected), each a different way.
func hiddenDirPaths(h *hideFixture) map[string]string {
	return map[string]string{
		"direct":            ".backplane",
		"dot-slash":         "./.backplane",
		"trailing-slash":    ".backplane/",
		"dotdot":            "sub/../.backplane",
		"absolute":          h.state,
		"inside":            ".backplane/inner",
		"symlink-to-dir":    "x",
		"symlink-inside":    "x/inner",
		"symlink-in-subdir": "sub/z",
		"symlink-to-file":   "y",
		"config-file":       "backplane.yaml",
	}
}

func TestHiddenPathsAreForbidden(t *testing.T) {
	for _, throughLink := range []bool{false, true} {
		name := "workspace"
		if throughLink {
			name = "workspace-through-a-link"
		}
		t.Run(name, func(t *testing.T) {
			h := newHideFixture(t, throughLink)
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
					return args("path", p, "old_content", "SECRET", "content", "pwned")
				}},
				{"grep", true, func(p string) json.RawMessage { return args("pattern", "SECRET", "path", p) }},
				{"ls", false, func(p string) json.RawMessage { return args("path", p) }},
				{"glob", false, func(p string) json.RawMessage { return args("pattern", "**", "path", p) }},
				{"grep", false, func(p string) json.RawMessage { return args("pattern", "SECRET", "path", p) }},
			}
			for _, tc := range tools {
				paths := hiddenDirPaths(h)
				if tc.file {
					paths = hiddenFilePaths(h)
				}
				for pname, p := range paths {
					a := tc.args(p)
					res, err := call(t, h.set, tc.tool, a)
					e := errorOf(t, tc.tool, a, res, err)
					if e.Class != string(tool.ClassForbidden) {
						t.Errorf("%s %s (%s): class %s (%s), want forbidden", tc.tool, a, pname, e.Class, e.Message)
						continue
					}
					if strings.Contains(string(res.Content), "SECRET-JOURNAL") || strings.Contains(string(res.Content), "hunter2") {
						t.Errorf("%s %s: the refusal leaks the state: %s", tc.tool, a, res.Content)
					}
					// The refusal says why, unless the path also leads out
					// of the workspace (an absolute link), which is refused
					// as such first.
					if !strings.Contains(e.Message, "private state") && !strings.Contains(e.Message, "outside the workspace") {
						t.Errorf("%s %s: message %q says neither private state nor outside the workspace", tc.tool, a, e.Message)
					}
				}
			}
			// Creating inside the hidden folder, through every way in.
			for _, p := range []string{".backplane/new.txt", "x/new.txt", "x/newdir/new.txt", "sub/z/new.txt",
				"sub/z/a/b/new.txt", "xabs/new.txt", filepath.Join(h.state, "new.txt"), ".backplane/inner/new.txt"} {
				mustFail(t, h.set, "write", args("path", p, "content", "x"), tool.ClassForbidden)
			}
			h.assertStateUntouched(t)
		})
	}
}

// Names that only look like the hidden ones are ordinary files.
func TestLookAlikesAreNotHidden(t *testing.T) {
	h := newHideFixture(t, false)
	var r readResult
	mustOK(t, h.set, "read", args("path", ".backplane2/file.txt"), &r)
	if r.Content != "     1\tlook-alike folder\n" {
		t.Errorf(".backplane2/file.txt: %q", r.Content)
	}
	mustOK(t, h.set, "read", args("path", "backplane.yaml.bak"), &r)
	if r.Content != "     1\tlook-alike file\n" {
		t.Errorf("backplane.yaml.bak: %q", r.Content)
	}
	var w writeResult
	mustOK(t, h.set, "write", args("path", ".backplane2/new/file.txt", "content", "ok"), &w)
	if got := readString(t, filepath.Join(h.ws, ".backplane2/new/file.txt")); got != "ok" {
		t.Errorf("written %q", got)
	}
	var e editResult
	mustOK(t, h.set, "edit", args("path", "backplane.yaml.bak", "old_content", "file", "content", "FILE"), &e)
	if got := readString(t, filepath.Join(h.ws, "backplane.yaml.bak")); got != "look-alike FILE\n" {
		t.Errorf("edited %q", got)
	}
	h.assertStateUntouched(t)
}

func TestListingsLeaveHiddenEntriesOut(t *testing.T) {
	for _, throughLink := range []bool{false, true} {
		h := newHideFixture(t, throughLink)
		var l lsResult
		mustOK(t, h.set, "ls", args(), &l)
		var names []string
		for _, e := range l.Entries {
			names = append(names, e.Name)
		}
		want := []string{".backplane2", "backplane.yaml.bak", "cfg", "notes.txt", "sub", "x", "xabs", "y"}
		if strings.Join(names, ",") != strings.Join(want, ",") || l.Total != len(want) || l.Truncated {
			t.Errorf("ls of the workspace: %v (total %d), want %v: without .backplane and backplane.yaml", names, l.Total, want)
		}
		// The links themselves are listed, unfollowed: a name and the
		// link's text, nothing of what is behind.
		for _, e := range l.Entries {
			if e.Name == "x" && (e.Kind != "symlink" || e.Target != ".backplane") {
				t.Errorf("x listed as %+v", e)
			}
		}

		// glob: nothing hidden, by any pattern, though "**" sees the rest.
		var g globResult
		mustOK(t, h.set, "glob", args("pattern", "**"), &g)
		for _, p := range g.Paths {
			if strings.HasPrefix(p, ".backplane/") || p == "backplane.yaml" || strings.HasPrefix(p, "x/") || strings.HasPrefix(p, "sub/z/") {
				t.Errorf("glob ** lists %s", p)
			}
		}
		for _, p := range []string{"notes.txt", "sub/file.txt", ".backplane2/file.txt", "backplane.yaml.bak"} {
			if !slices.Contains(g.Paths, p) {
				t.Errorf("glob ** does not list %s: %v", p, g.Paths)
			}
		}
		for _, pattern := range []string{".backplane/*", ".backplane/**", "**/backplane.db", "**/*.lock", "x/*", "x/backplane.db",
			"x/**", "sub/z/*", ".backplane/backplane.db", "backplane.yaml", "*.yaml", "*/backplane.db", "{x,.backplane}/*"} {
			mustOK(t, h.set, "glob", args("pattern", pattern), &g)
			if len(g.Paths) != 0 {
				t.Errorf("glob %q lists %v, want nothing", pattern, g.Paths)
			}
		}

		// grep over the workspace: the journal text is found in the one
		// visible file that holds it, never in the hidden ones.
		var gr grepResult
		mustOK(t, h.set, "grep", args("pattern", "SECRET-JOURNAL"), &gr)
		var found []string
		for _, m := range gr.Matches {
			found = append(found, m.Path)
		}
		if strings.Join(found, ",") != "notes.txt" {
			t.Errorf("grep over the workspace matched in %v, want only notes.txt", found)
		}
		if gr.UnreadableSkipped != 0 {
			t.Errorf("grep counted %d unreadable files; hidden ones are not part of the workspace", gr.UnreadableSkipped)
		}
		mustOK(t, h.set, "grep", args("pattern", "SECRET", "glob", "*.db"), &gr)
		if len(gr.Matches) != 0 {
			t.Errorf("grep with glob *.db matched %v", gr.Matches)
		}
		mustOK(t, h.set, "grep", args("pattern", "SECRET", "path", "sub"), &gr)
		if len(gr.Matches) != 0 {
			t.Errorf("grep over sub (with sub/z -> ../.backplane) matched %v", gr.Matches)
		}
		h.assertStateUntouched(t)
	}
}

// A hidden path that does not exist yet is refused by name, and nothing is
// created there, even through a link made before it existed.
func TestHiddenPathThatDoesNotExistYet(t *testing.T) {
	ws := t.TempDir()
	state := filepath.Join(ws, ".state")
	symlink(t, ".state", filepath.Join(ws, "later"))
	s, err := New(&Options{Workspace: ws, Hide: []string{state}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustFail(t, s, "write", args("path", ".state/x.txt", "content", "x"), tool.ClassForbidden)
	mustFail(t, s, "read", args("path", ".state/x.txt"), tool.ClassForbidden)
	res, err := call(t, s, "write", args("path", "later/x.txt", "content", "x"))
	if err != nil || !res.IsError {
		t.Errorf("write through a dangling link to the hidden path: %s, %v", res.Content, err)
	}
	if _, err := os.Lstat(state); !os.IsNotExist(err) {
		t.Errorf("the hidden path was created: %v", err)
	}
	// Once it exists, the link leads into it and is refused.
	writeFile(t, filepath.Join(state, "journal"), journalText)
	mustFail(t, s, "read", args("path", "later/journal"), tool.ClassForbidden)
	mustFail(t, s, "write", args("path", "later/x.txt", "content", "x"), tool.ClassForbidden)
	if _, err := os.Lstat(filepath.Join(state, "x.txt")); !os.IsNotExist(err) {
		t.Errorf("a file was created in the hidden path: %v", err)
	}
}

func TestNewRefusesBadHidePaths(t *testing.T) {
	ws := t.TempDir()
	for name, hide := range map[string][]string{
		"relative":             {".backplane"},
		"empty":                {""},
		"the workspace":        {ws},
		"a parent":             {filepath.Dir(ws)},
		"the workspace, dirty": {ws + "/sub/.."},
	} {
		if s, err := New(&Options{Workspace: ws, Hide: hide}); err == nil {
			s.Close()
			t.Errorf("%s (%v): accepted", name, hide)
		}
	}
	// Outside the workspace is allowed (and changes nothing).
	s, err := New(&Options{Workspace: ws, Hide: []string{filepath.Join(filepath.Dir(ws), "elsewhere")}})
	if err != nil {
		t.Fatalf("a hidden path outside the workspace: %v", err)
	}
	s.Close()
}

// The hidden folder flips between a real folder and a link into the
// hidden state while reads and overwrites go through its name: whatever
// the interleaving, the state is neither read nor written.
func TestHiddenSwapRace(t *testing.T) {
	h := newHideFixture(t, false)
	ws := h.ws
	writeFile(t, filepath.Join(ws, "real", "backplane.db"), "harmless\n")
	symlink(t, ".backplane", filepath.Join(ws, "link"))
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }() // also on a failure
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < 5000; i++ {
			os.Rename(filepath.Join(ws, "real"), filepath.Join(ws, "race"))
			os.Rename(filepath.Join(ws, "race"), filepath.Join(ws, "real"))
			os.Rename(filepath.Join(ws, "link"), filepath.Join(ws, "race"))
			os.Rename(filepath.Join(ws, "race"), filepath.Join(ws, "link"))
		}
	}()
	counts := map[string]int{}
	for i := 0; i < 300; i++ {
		for _, c := range []struct {
			tool string
			a    json.RawMessage
		}{
			{"read", args("path", "race/backplane.db")},
			{"edit", args("path", "race/backplane.db", "content", "harmless\n")},
			{"grep", args("pattern", "SECRET", "path", "race")},
			{"ls", args("path", "race")},
		} {
			res, err := call(t, h.set, c.tool, c.a)
			if err != nil {
				t.Fatalf("%s: Go error %v", c.tool, err)
			}
			// (grep's result repeats its pattern, "SECRET": the journal's
			// text is longer.)
			if strings.Contains(string(res.Content), "SECRET-JOURNAL") || strings.Contains(string(res.Content), "audit.log") {
				t.Fatalf("%s %s through the swapped name leaked the state: %s", c.tool, c.a, res.Content)
			}
			if res.IsError {
				var r struct{ Error errBody }
				json.Unmarshal(res.Content, &r)
				counts[c.tool+":"+r.Error.Class]++
				// os.Root opens each component with O_NOFOLLOW and reads a
				// link it meets; when the name flips back to a folder in
				// between, it reports ELOOP. A clear error, no leak.
				if r.Error.Class == string(tool.ClassExecutionFailure) && !strings.Contains(r.Error.Message, "symbolic link loop") {
					t.Errorf("%s: execution_failure %q", c.tool, r.Error.Message)
				}
			} else {
				counts[c.tool+":ok"]++
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("outcomes under the race: %v", counts)
	for k := range counts {
		class := k[strings.IndexByte(k, ':')+1:]
		if class != "ok" && class != "forbidden" && class != "not_found" && class != "execution_failure" {
			t.Errorf("unexpected outcome %s", k)
		}
	}
	h.assertStateUntouched(t)
}
