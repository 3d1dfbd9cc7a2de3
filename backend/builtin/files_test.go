package builtin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/tool"
)

func TestReadNumberedWindow(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("five.txt"), "one\ntwo\nthree\nfour\nfive\n")
	var r readResult
	mustOK(t, f.set, "read", args("path", "five.txt"), &r)
	want := "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n     5\tfive\n"
	if r.Content != want || r.StartLine != 1 || r.EndLine != 5 || r.Truncated || r.Size != 24 {
		t.Errorf("whole file: %+v", r)
	}
	mustOK(t, f.set, "read", args("path", "five.txt", "offset", 2, "limit", 2), &r)
	if r.Content != "     2\ttwo\n     3\tthree\n" || r.StartLine != 2 || r.EndLine != 3 ||
		!r.Truncated || r.Reason != "limit" || r.NextOffset != 4 {
		t.Errorf("offset 2 limit 2: %+v", r)
	}
	// A window that ends exactly at the last line is not truncated.
	mustOK(t, f.set, "read", args("path", "five.txt", "offset", 4, "limit", 2), &r)
	if r.Content != "     4\tfour\n     5\tfive\n" || r.Truncated || r.NextOffset != 0 {
		t.Errorf("offset 4 limit 2: %+v", r)
	}
	e := mustFail(t, f.set, "read", args("path", "five.txt", "offset", 7), tool.ClassValidation)
	if !strings.Contains(e.Message, "past the end") || !strings.Contains(e.Message, "5 lines") {
		t.Errorf("offset past the end: %q", e.Message)
	}
	// No final newline; CRLF kept as it is (edit needs the exact text).
	writeFile(t, f.path("nofinal.txt"), "a\r\nb")
	mustOK(t, f.set, "read", args("path", "nofinal.txt"), &r)
	if r.Content != "     1\ta\r\n     2\tb\n" || r.EndLine != 2 {
		t.Errorf("no final newline: %q", r.Content)
	}
	writeFile(t, f.path("empty.txt"), "")
	mustOK(t, f.set, "read", args("path", "empty.txt"), &r)
	if r.Content != "" || r.EndLine != 0 || r.Truncated {
		t.Errorf("empty file: %+v", r)
	}
	mustFail(t, f.set, "read", args("path", "."), tool.ClassValidation)
}

func TestReadHugeFileIsCapped(t *testing.T) {
	f := newFixture(t, &Options{Read: ReadOptions{MaxBytes: 64 << 10}})
	// 16 MiB of 100-byte lines.
	line := strings.Repeat("x", 99) + "\n"
	var b bytes.Buffer
	for b.Len() < 16<<20 {
		b.WriteString(line)
	}
	writeFile(t, f.path("huge.txt"), b.String())
	start := time.Now()
	var r readResult
	mustOK(t, f.set, "read", args("path", "huge.txt"), &r)
	elapsed := time.Since(start)
	if len(r.Content) > 64<<10 {
		t.Errorf("content is %d bytes, over the 64 KiB cap", len(r.Content))
	}
	// Each line shows as 7 bytes of number and tab plus 100: 612 lines fit
	// in 65536 bytes (612*107 = 65484).
	if r.EndLine != 612 || !r.Truncated || r.Reason != "max_bytes" || r.NextOffset != 613 || r.LineCut {
		t.Errorf("huge file: end %d truncated %v by %q next %d cut %v", r.EndLine, r.Truncated, r.Reason, r.NextOffset, r.LineCut)
	}
	if r.Size != int64(b.Len()) {
		t.Errorf("size %d, want %d", r.Size, b.Len())
	}
	if elapsed > 5*time.Second {
		t.Errorf("reading the start of a 16 MiB file took %v", elapsed)
	}
	// Continue where it stopped.
	mustOK(t, f.set, "read", args("path", "huge.txt", "offset", r.NextOffset, "limit", 1), &r)
	if r.Content != fmt.Sprintf("%6d\t%s", 613, line) {
		t.Errorf("next window: %q", r.Content)
	}
	// One line longer than the cap, without a newline: its start is shown.
	writeFile(t, f.path("oneline.txt"), strings.Repeat("é", 100_000)) // 200,000 bytes
	mustOK(t, f.set, "read", args("path", "oneline.txt"), &r)
	if !r.LineCut || !r.Truncated || r.EndLine != 1 || len(r.Content) > 64<<10 || len(r.Content) < 60<<10 {
		t.Errorf("one huge line: cut %v truncated %v end %d, %d bytes", r.LineCut, r.Truncated, r.EndLine, len(r.Content))
	}
	if !strings.HasPrefix(r.Content, "     1\téé") || !strings.HasSuffix(r.Content, "é\n") {
		t.Errorf("one huge line is not cut at a character boundary: ...%q", r.Content[len(r.Content)-8:])
	}
}

func TestReadBinaryFilesAreNotDumped(t *testing.T) {
	f := newFixture(t, nil)
	cases := map[string][]byte{
		"nul.bin":    append([]byte("looks like text\n"), 0, 1, 2, 3),
		"latin1.txt": []byte("caf\xe9 cr\xe8me\n"), // ISO-8859-1, not UTF-8
		"png.bin":    []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
	}
	for name, content := range cases {
		if err := os.WriteFile(f.path(name), content, 0o644); err != nil {
			t.Fatal(err)
		}
		var r binaryResult
		mustOK(t, f.set, "read", args("path", name), &r)
		if !r.Binary || r.Size != int64(len(content)) || r.Path != name {
			t.Errorf("%s: %+v", name, r)
		}
		res, _ := call(t, f.set, "read", args("path", name))
		if bytes.Contains(res.Content, []byte("looks like")) || bytes.Contains(res.Content, []byte("PNG")) || bytes.Contains(res.Content, []byte("caf")) {
			t.Errorf("%s: the content is in the result: %s", name, res.Content)
		}
	}
	// A multi-byte character cut by the 8 KiB sniff window is still text.
	text := strings.Repeat("a", sniffBytes-1) + "é and more\n"
	writeFile(t, f.path("boundary.txt"), text)
	var r readResult
	mustOK(t, f.set, "read", args("path", "boundary.txt"), &r)
	if r.Content != "     1\t"+text {
		t.Errorf("text with a character across the sniff boundary was not read as text")
	}
	// A NUL byte after the first 8 KiB: read as text (only the start decides).
	late := strings.Repeat("b", 9000) + "\x00tail\n"
	writeFile(t, f.path("late.txt"), late)
	mustOK(t, f.set, "read", args("path", "late.txt"), &r)
	if r.EndLine != 1 {
		t.Errorf("late NUL: %+v", r)
	}
}

func TestWriteCreatesAtomically(t *testing.T) {
	f := newFixture(t, nil)
	var w writeResult
	mustOK(t, f.set, "write", args("path", "a/b/c/new.txt", "content", "hello\n"), &w)
	if w.Path != "a/b/c/new.txt" || w.Bytes != 6 || !w.Created {
		t.Errorf("create: %+v", w)
	}
	if got := readString(t, f.path("a/b/c/new.txt")); got != "hello\n" {
		t.Errorf("content %q", got)
	}
	fi, _ := os.Stat(f.path("a/b/c/new.txt"))
	if fi.Mode().Perm()&0o600 != 0o600 {
		t.Errorf("new file mode %v is not readable and writable by its owner", fi.Mode())
	}
	// Replace keeps the mode and leaves no temporary file.
	os.Chmod(f.path("a/b/c/new.txt"), 0o640)
	mustOK(t, f.set, "write", args("path", "a/b/c/new.txt", "content", "again"), &w)
	if w.Created || w.Bytes != 5 {
		t.Errorf("replace: %+v", w)
	}
	if got := readString(t, f.path("a/b/c/new.txt")); got != "again" {
		t.Errorf("content %q", got)
	}
	fi, _ = os.Stat(f.path("a/b/c/new.txt"))
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("replace changed the mode to %v", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(f.path("a/b/c"))
	if len(entries) != 1 {
		t.Errorf("the folder holds %d entries, want just new.txt (no temporary file left)", len(entries))
	}
	mkdir(t, f.path("adir"))
	mustFail(t, f.set, "write", args("path", "adir", "content", "x"), tool.ClassValidation)
	mustFail(t, f.set, "write", args("path", "adir/", "content", "x"), tool.ClassValidation)
	mustFail(t, f.set, "write", args("path", "", "content", "x"), tool.ClassValidation)
	// A file in the way of a parent folder.
	mustFail(t, f.set, "write", args("path", "a/b/c/new.txt/under", "content", "x"), tool.ClassNotFound)
}

// A reader racing a writer sees the old content or the new, never a mix
// or an empty file.
func TestWriteIsAtomicForReaders(t *testing.T) {
	f := newFixture(t, nil)
	old, repl := strings.Repeat("o", 256<<10), strings.Repeat("n", 256<<10)
	writeFile(t, f.path("big.txt"), old)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 10; i++ {
			c := repl
			if i%2 == 1 {
				c = old
			}
			if res, err := call(t, f.set, "write", args("path", "big.txt", "content", c)); err != nil || res.IsError {
				t.Errorf("write: %v", err)
				return
			}
		}
	}()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			t.Logf("%d reads during 10 writes", reads)
			return
		default:
		}
		b, err := os.ReadFile(f.path("big.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); s != old && s != repl {
			t.Fatalf("a reader saw %d bytes that are neither the old content nor the new", len(b))
		}
	}
}

func TestEditMatches(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("code.go"), "func a() {}\nfunc b() {}\nfunc a2() {}\n")
	os.Chmod(f.path("code.go"), 0o600)

	e := mustFail(t, f.set, "edit", args("path", "code.go", "old_content", "func c()", "content", "x"), tool.ClassValidation)
	if !strings.Contains(e.Message, "not found") || e.Details["occurrences"] != float64(0) {
		t.Errorf("zero matches: %q %v", e.Message, e.Details)
	}
	e = mustFail(t, f.set, "edit", args("path", "code.go", "old_content", "func a", "content", "x"), tool.ClassValidation)
	if !strings.Contains(e.Message, "occurs 2 times") || e.Details["occurrences"] != float64(2) {
		t.Errorf("two matches: %q %v", e.Message, e.Details)
	}
	e = mustFail(t, f.set, "edit", args("path", "code.go", "old_content", "() {}\n", "content", "x"), tool.ClassValidation)
	if !strings.Contains(e.Message, "occurs 3 times") {
		t.Errorf("three matches: %q", e.Message)
	}
	if got := readString(t, f.path("code.go")); got != "func a() {}\nfunc b() {}\nfunc a2() {}\n" {
		t.Fatalf("a refused edit changed the file: %q", got)
	}
	mustFail(t, f.set, "edit", args("path", "code.go", "old_content", "", "content", "x"), tool.ClassValidation)

	var r editResult
	mustOK(t, f.set, "edit", args("path", "code.go", "old_content", "func b() {}", "content", "func b() { return }"), &r)
	want := "func a() {}\nfunc b() { return }\nfunc a2() {}\n"
	if got := readString(t, f.path("code.go")); got != want {
		t.Errorf("after one replacement: %q", got)
	}
	if r.Replaced != 1 || r.Overwritten || r.Bytes != len(want) {
		t.Errorf("result %+v", r)
	}
	fi, _ := os.Stat(f.path("code.go"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("edit changed the mode to %v", fi.Mode().Perm())
	}
	// Replacement text holding $ or \ is taken literally.
	mustOK(t, f.set, "edit", args("path", "code.go", "old_content", "return", "content", `return "$1\n"`), &r)
	if got := readString(t, f.path("code.go")); !strings.Contains(got, `return "$1\n"`) {
		t.Errorf("literal replacement: %q", got)
	}
	// Without old_content the file is overwritten.
	mustOK(t, f.set, "edit", args("path", "code.go", "content", "package x\n"), &r)
	if got := readString(t, f.path("code.go")); got != "package x\n" || !r.Overwritten || r.Replaced != 0 {
		t.Errorf("overwrite: %q %+v", got, r)
	}
	entries, _ := os.ReadDir(f.ws)
	if len(entries) != 1 {
		t.Errorf("the workspace holds %d entries (a temporary file left?)", len(entries))
	}
}

func TestEditThroughASymlinkNamesItsTarget(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("real.txt"), "x\n")
	symlink(t, "real.txt", f.path("alias.txt"))
	for _, name := range []string{"edit", "write"} {
		e := mustFail(t, f.set, name, args("path", "alias.txt", "content", "y"), tool.ClassValidation)
		if e.Details["link_target"] != "real.txt" {
			t.Errorf("%s: details %v do not name the target", name, e.Details)
		}
	}
	if got := readString(t, f.path("real.txt")); got != "x\n" {
		t.Errorf("the target changed: %q", got)
	}
	if target, _ := os.Readlink(f.path("alias.txt")); target != "real.txt" {
		t.Errorf("the link was replaced")
	}
}

func TestLs(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("b.txt"), "12345")
	writeFile(t, f.path("a.txt"), "")
	mkdir(t, f.path("c"))
	symlink(t, "b.txt", f.path("d"))
	var r lsResult
	mustOK(t, f.set, "ls", args(), &r)
	got := ""
	for _, e := range r.Entries {
		got += fmt.Sprintf("%s:%s:%d:%s ", e.Name, e.Kind, e.Size, e.Target)
	}
	dirSize := func(p string) int64 { fi, _ := os.Lstat(p); return fi.Size() }
	want := fmt.Sprintf("a.txt:file:0: b.txt:file:5: c:dir:%d: d:symlink:5:b.txt ", dirSize(f.path("c")))
	if got != want || r.Total != 4 || r.Truncated || r.Path != "." {
		t.Errorf("ls = %q (total %d, truncated %v), want %q", got, r.Total, r.Truncated, want)
	}
	mustOK(t, f.set, "ls", args("limit", 2), &r)
	if len(r.Entries) != 2 || r.Entries[0].Name != "a.txt" || r.Entries[1].Name != "b.txt" || !r.Truncated || r.Total != 4 {
		t.Errorf("ls limit 2: %+v", r)
	}
	mustOK(t, f.set, "ls", args("path", "c"), &r)
	if len(r.Entries) != 0 || r.Entries == nil || r.Path != "c" {
		t.Errorf("empty folder: %+v", r)
	}
	mustFail(t, f.set, "ls", args("path", "b.txt"), tool.ClassValidation)
}

func TestGlob(t *testing.T) {
	f := newFixture(t, nil)
	for _, p := range []string{"main.go", "a/x.go", "a/b/y.go", "a/b/z.txt", "b/w.go", ".hidden/h.go"} {
		writeFile(t, f.path(p), "package x\n")
	}
	mkdir(t, f.path("dir.go")) // a folder whose name matches is not listed
	symlink(t, "a", f.path("alink"))
	var r globResult
	mustOK(t, f.set, "glob", args("pattern", "**/*.go"), &r)
	want := ".hidden/h.go,a/b/y.go,a/x.go,b/w.go,main.go"
	if got := strings.Join(r.Paths, ","); got != want || r.Truncated {
		t.Errorf("**/*.go = %s (truncated %v), want %s (sorted, no folders, not through alink)", got, r.Truncated, want)
	}
	mustOK(t, f.set, "glob", args("pattern", "**/*.go", "limit", 2), &r)
	if got := strings.Join(r.Paths, ","); got != ".hidden/h.go,a/b/y.go" || !r.Truncated {
		t.Errorf("limit 2: %s (truncated %v)", got, r.Truncated)
	}
	// From a subfolder, results are still relative to the workspace.
	mustOK(t, f.set, "glob", args("pattern", "**/*", "path", "a"), &r)
	if got := strings.Join(r.Paths, ","); got != "a/b/y.go,a/b/z.txt,a/x.go" {
		t.Errorf("path a: %s", got)
	}
	mustOK(t, f.set, "glob", args("pattern", "*.go"), &r)
	if got := strings.Join(r.Paths, ","); got != "main.go" {
		t.Errorf("*.go: %s", got)
	}
	mustOK(t, f.set, "glob", args("pattern", "{a,b}/*.go"), &r)
	if got := strings.Join(r.Paths, ","); got != "a/x.go,b/w.go" {
		t.Errorf("{a,b}/*.go: %s", got)
	}
	mustOK(t, f.set, "glob", args("pattern", "nothing/**"), &r)
	if len(r.Paths) != 0 || r.Paths == nil {
		t.Errorf("no match: %#v", r.Paths)
	}
	mustFail(t, f.set, "glob", args("pattern", "[unclosed"), tool.ClassValidation)
	mustFail(t, f.set, "glob", args("pattern", "*", "path", "main.go"), tool.ClassValidation)
}

func TestGlobLimitOverManyFiles(t *testing.T) {
	f := newFixture(t, nil)
	for i := 0; i < 300; i++ {
		writeFile(t, f.path(fmt.Sprintf("d%d/f%03d.txt", i%7, i)), "")
	}
	var r globResult
	mustOK(t, f.set, "glob", args("pattern", "**/*.txt", "limit", 5), &r)
	// The 5 smallest paths in byte order: folder d0 holds f000, f007, f014...
	want := "d0/f000.txt,d0/f007.txt,d0/f014.txt,d0/f021.txt,d0/f028.txt"
	if got := strings.Join(r.Paths, ","); got != want || !r.Truncated {
		t.Errorf("limit 5 over 300: %s (truncated %v), want %s", got, r.Truncated, want)
	}
}

func TestGrep(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("a.go"), "package a\n\nfunc Alpha() {}\n// TODO: beta\nfunc Beta() {}\n")
	writeFile(t, f.path("sub/b.go"), "package sub\nfunc alpha() {}\n")
	writeFile(t, f.path("sub/notes.md"), "Alpha notes\n")
	if err := os.WriteFile(f.path("blob.bin"), []byte("Alpha\x00\x01binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	var r grepResult
	mustOK(t, f.set, "grep", args("pattern", `func [A-Z]\w*`), &r)
	got := ""
	for _, m := range r.Matches {
		got += fmt.Sprintf("%s:%d:%s|", m.Path, m.Line, m.Text)
	}
	if want := "a.go:3:func Alpha() {}|a.go:5:func Beta() {}|"; got != want {
		t.Errorf("grep = %s, want %s", got, want)
	}
	if r.BinarySkipped != 1 || r.FilesSearched != 3 || r.Truncated {
		t.Errorf("binary skipped %d, files %d, truncated %v", r.BinarySkipped, r.FilesSearched, r.Truncated)
	}

	mustOK(t, f.set, "grep", args("pattern", "alpha", "ignore_case", true, "glob", "*.go"), &r)
	if len(r.Matches) != 2 || r.Matches[0].Path != "a.go" || r.Matches[1].Path != "sub/b.go" {
		t.Errorf("ignore_case with glob *.go: %+v", r.Matches)
	}
	mustOK(t, f.set, "grep", args("pattern", "alpha", "ignore_case", true, "glob", "sub/*.md"), &r)
	if len(r.Matches) != 1 || r.Matches[0].Path != "sub/notes.md" {
		t.Errorf("glob sub/*.md: %+v", r.Matches)
	}
	mustOK(t, f.set, "grep", args("pattern", "alpha", "path", "sub"), &r)
	if len(r.Matches) != 1 || r.Matches[0].Path != "sub/b.go" || r.Matches[0].Line != 2 {
		t.Errorf("path sub: %+v", r.Matches)
	}
	// A file named explicitly, glob ignored.
	mustOK(t, f.set, "grep", args("pattern", "eta", "path", "a.go", "glob", "*.md"), &r)
	if len(r.Matches) != 2 || r.Matches[0].Line != 4 || r.Matches[1].Line != 5 {
		t.Errorf("explicit file: %+v", r.Matches)
	}

	mustOK(t, f.set, "grep", args("pattern", "TODO", "context", 1), &r)
	if len(r.Matches) != 1 {
		t.Fatalf("context: %+v", r.Matches)
	}
	m := r.Matches[0]
	if len(m.Before) != 1 || m.Before[0] != (grepLine{3, "func Alpha() {}"}) ||
		len(m.After) != 1 || m.After[0] != (grepLine{5, "func Beta() {}"}) {
		t.Errorf("context 1 around line 4: before %v after %v", m.Before, m.After)
	}
	mustOK(t, f.set, "grep", args("pattern", "^func", "path", "a.go", "context", 2), &r)
	if len(r.Matches) != 2 || len(r.Matches[0].Before) != 2 || len(r.Matches[0].After) != 2 ||
		r.Matches[0].After[1] != (grepLine{5, "func Beta() {}"}) ||
		len(r.Matches[1].Before) != 2 || len(r.Matches[1].After) != 0 {
		t.Errorf("overlapping context: %+v", r.Matches)
	}

	mustFail(t, f.set, "grep", args("pattern", "("), tool.ClassValidation)
	mustFail(t, f.set, "grep", args("pattern", `\1`), tool.ClassValidation) // RE2 has no backreferences
	mustFail(t, f.set, "grep", args("pattern", "x", "glob", "[bad"), tool.ClassValidation)
}

func TestGrepLimit(t *testing.T) {
	f := newFixture(t, nil)
	var b strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&b, "hit %d\nmiss\n", i)
	}
	writeFile(t, f.path("a.txt"), b.String())
	writeFile(t, f.path("b.txt"), "hit b\n")
	var r grepResult
	mustOK(t, f.set, "grep", args("pattern", "hit", "limit", 3, "context", 1), &r)
	if len(r.Matches) != 3 || !r.Truncated || r.Matches[2].Line != 5 || len(r.Matches[2].After) != 1 {
		t.Errorf("limit 3: %d matches, truncated %v, %+v", len(r.Matches), r.Truncated, r.Matches)
	}
	// Exactly as many matches as the limit: not truncated.
	mustOK(t, f.set, "grep", args("pattern", "hit", "limit", 51), &r)
	if len(r.Matches) != 51 || r.Truncated {
		t.Errorf("limit 51 over 51 matches: %d, truncated %v", len(r.Matches), r.Truncated)
	}
	mustOK(t, f.set, "grep", args("pattern", "hit", "limit", 50), &r)
	if len(r.Matches) != 50 || !r.Truncated {
		t.Errorf("limit 50 over 51 matches: %d, truncated %v", len(r.Matches), r.Truncated)
	}
}

// RE2 matching is linear: a pattern that makes backtracking engines take
// exponential time finishes at once.
func TestGrepPathologicalPatternIsFast(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("a.txt"), strings.Repeat("a", 1000)+"!\n")
	start := time.Now()
	var r grepResult
	mustOK(t, f.set, "grep", args("pattern", "^(a+)+$"), &r)
	if len(r.Matches) != 0 {
		t.Errorf("matches: %+v", r.Matches)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestGrepLongLinesAreCut(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("min.js"), "needle"+strings.Repeat("é", 5000)+"\nnext\n")
	var r grepResult
	mustOK(t, f.set, "grep", args("pattern", "needle|next"), &r)
	if len(r.Matches) != 2 || r.Matches[1].Line != 2 {
		t.Fatalf("%+v", r.Matches)
	}
	if m := r.Matches[0].Text; len(m) > grepLineBytes+20 || !strings.HasSuffix(m, "…[line cut]") || strings.Contains(m, "\uFFFD") {
		t.Errorf("long line shown as %d bytes ending %q", len(m), m[len(m)-20:])
	}
}

func TestReadOnlyToolsDoNotWrite(t *testing.T) {
	f := newFixture(t, nil)
	writeFile(t, f.path("a/b.txt"), "hello\n")
	before := snapshot(t, f.ws)
	for _, c := range []struct{ tool, a string }{
		{"read", `{"path":"a/b.txt"}`}, {"ls", `{"path":"a"}`}, {"glob", `{"pattern":"**"}`}, {"grep", `{"pattern":"h"}`},
	} {
		var v map[string]any
		mustOK(t, f.set, c.tool, []byte(c.a), &v)
	}
	if after := snapshot(t, f.ws); after != before {
		t.Errorf("the workspace changed:\n%s\n%s", before, after)
	}
}

func snapshot(t *testing.T, dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			fmt.Fprintf(&b, "%s %v %d %v\n", p, info.Mode(), info.Size(), info.ModTime().UnixNano())
		}
		return nil
	})
	return b.String()
}
