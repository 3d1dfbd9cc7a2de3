package builtin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnifiedDiffMatchesGNUDiff: the preview's diff is what GNU diff -u
// writes, from the first hunk on, for a table of cases: a new file shows
// "@@ -0,0 +1,N @@", a missing newline at the end is diff's marker, not
// one more line (issue 26, item 5). It skips when diff is not GNU diff.
func TestUnifiedDiffMatchesGNUDiff(t *testing.T) {
	diffCmd, err := exec.LookPath("diff")
	if err != nil {
		t.Skip("diff is not installed: nothing to compare with")
	}
	if out, err := exec.Command(diffCmd, "--version").Output(); err != nil || !strings.Contains(string(out), "GNU diffutils") {
		t.Skip("diff is not GNU diffutils: its output is the reference")
	}
	long := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"
	cases := []struct{ name, old, updated string }{
		{"new file", "", "a\nb\nc\nd\ne\nf\n"},
		{"new file, one line", "", "only\n"},
		{"new file without a newline", "", "a\nb"},
		{"deleted content", "a\nb\nc\n", ""},
		{"no trailing newline before", "a\nb", "a\nb\n"},
		{"no trailing newline after", "a\nb\n", "a\nb"},
		{"no trailing newline on both, changed", "a\nb", "a\nc"},
		{"both: no newline, and a line added", "x\ny", "x\nnew\ny"},
		{"middle change", long, strings.Replace(long, "6\n", "six\n", 1)},
		{"two hunks", long, strings.Replace(strings.Replace(long, "1\n", "one\n", 1), "12\n", "twelve\n", 1)},
		{"lines removed", long, strings.Replace(long, "4\n5\n", "", 1)},
		{"blank lines", "\n\n\n", "\n\nx\n\n"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(a, []byte(c.old), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b, []byte(c.updated), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(diffCmd, "-u", a, b).Output()
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
				t.Fatalf("diff -u: %v", err)
			}
			want := hunks(string(out))
			got := unifiedDiff("f.txt", c.old, c.updated)
			if hunks(got) != want {
				t.Errorf("diff of %q to %q:\n%s\nwant (diff -u):\n%s", c.old, c.updated, got, want)
			}
			from := "--- a/f.txt\n"
			if c.old == "" {
				from = "--- /dev/null\n"
			}
			if !strings.HasPrefix(got, from+"+++ b/f.txt\n@@ ") {
				t.Errorf("headers: %q", got)
			}
		})
	}
	if got := unifiedDiff("f.txt", "same\n", "same\n"); got != "(no change)" {
		t.Errorf("no change: %q", got)
	}
}

// hunks is a diff from its first hunk on (the file headers of diff -u
// carry times).
func hunks(d string) string {
	if i := strings.Index(d, "@@ "); i >= 0 {
		return d[i:]
	}
	return d
}
