package builtin

import (
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// diffContext is the lines of context around each change, as diff -u's.
const diffContext = 3

// noNewline is diff's marker after a line that ends its file without a
// newline.
const noNewline = `\ No newline at end of file`

// unifiedDiff is the unified diff from old to updated, as GNU diff -u
// writes it from the first hunk on (the file names on the --- and +++
// lines, /dev/null for a file that does not exist yet): hunk ranges
// "-0,0" on the side with no lines, and a last line without a newline
// followed by the "\ No newline at end of file" marker, never shown as
// one more line. (difflib.SplitLines appends a newline to the last line
// whatever it was, which made an empty file one empty line and hid a
// missing newline: issue 26, item 5.)
func unifiedDiff(name, old, updated string) string {
	a, b := diffLines(old), diffLines(updated)
	// No junk heuristic: diff(1) has none, and with it a file of many
	// similar lines (blank ones) diffs worse.
	groups := difflib.NewMatcherWithJunk(a, b, false, nil).GetGroupedOpCodes(diffContext)
	if len(groups) == 0 {
		return "(no change)"
	}
	from := "a/" + name
	if old == "" {
		from = "/dev/null"
	}
	var w strings.Builder
	fmt.Fprintf(&w, "--- %s\n+++ b/%s\n", from, name)
	for _, g := range groups {
		first, last := g[0], g[len(g)-1]
		fmt.Fprintf(&w, "@@ -%s +%s @@\n", hunkRange(first.I1, last.I2), hunkRange(first.J1, last.J2))
		for _, op := range g {
			switch op.Tag {
			case 'e':
				writeLines(&w, ' ', a[op.I1:op.I2])
			case 'd':
				writeLines(&w, '-', a[op.I1:op.I2])
			case 'i':
				writeLines(&w, '+', b[op.J1:op.J2])
			case 'r':
				writeLines(&w, '-', a[op.I1:op.I2])
				writeLines(&w, '+', b[op.J1:op.J2])
			}
		}
	}
	return w.String()
}

// diffLines splits s into lines, each with its newline but a last one
// that has none: "b" and "b\n" are different lines, as they are to diff.
// An empty s has no lines.
func diffLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// hunkRange is one side's range in a hunk header: "START,COUNT", "START"
// for one line, and for no lines the line before ("0,0" at the start).
func hunkRange(start, stop int) string {
	switch n := stop - start; n {
	case 1:
		return fmt.Sprint(start + 1)
	case 0:
		return fmt.Sprintf("%d,0", start)
	default:
		return fmt.Sprintf("%d,%d", start+1, n)
	}
}

func writeLines(w *strings.Builder, prefix byte, lines []string) {
	for _, l := range lines {
		w.WriteByte(prefix)
		if text, ok := strings.CutSuffix(l, "\n"); ok {
			w.WriteString(text)
			w.WriteByte('\n')
		} else {
			w.WriteString(l)
			w.WriteString("\n" + noNewline + "\n")
		}
	}
}
