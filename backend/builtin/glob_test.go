package builtin

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGlobRepeatedGlobstarIsLinear: on a 26-level tree, patterns with
// repeated "**" return each file once, the same files as one "**", and the
// walk opens a number of entries proportional to the tree, not to the
// number of ways the "**" can split a path (issue 12, finding 6: four "**"
// took 4.6 s with duplicates; eight hit the deadline).
func TestGlobRepeatedGlobstarIsLinear(t *testing.T) {
	f := newFixture(t, nil)
	const depth = 26
	dir := f.ws
	var want []string
	rel := ""
	for i := range depth {
		name := string(rune('a' + i))
		dir = filepath.Join(dir, name)
		rel = strings.TrimPrefix(rel+"/"+name, "/")
		mkdir(t, dir)
		writeFile(t, filepath.Join(dir, "f.txt"), "x")
		writeFile(t, filepath.Join(dir, "g.go"), "x")
		want = append(want, rel+"/f.txt")
	}
	slices.Sort(want)
	entries := 3 * depth // a folder and two files per level

	var r globResult
	for _, pattern := range []string{
		"**/f.txt",
		"**/**/**/**/f.txt",
		"**/**/**/**/**/**/**/**/f.txt",
		"a/**/**/f.txt",
	} {
		before := f.set.walkOpens.Load()
		mustOK(t, f.set, "glob", args("pattern", pattern, "limit", 1000), &r)
		opens := f.set.walkOpens.Load() - before
		got := r.Paths
		if pattern == "a/**/**/f.txt" {
			if len(got) != depth || !slices.Equal(got, want) {
				t.Errorf("%s: %d paths, want %d", pattern, len(got), depth)
			}
		} else if !slices.Equal(got, want) {
			t.Errorf("%s: %d paths (%v...), want the %d files once each", pattern, len(got), got[:min(3, len(got))], len(want))
		}
		if opens > int64(2*entries+8) {
			t.Errorf("%s: %d opens for a tree of %d entries: the work is not linear", pattern, opens, entries)
		}
	}
	// A "**" between literal segments still matches zero or more folders.
	mustOK(t, f.set, "glob", args("pattern", "**/y/**/f.txt"), &r)
	if len(r.Paths) != 2 || r.Paths[0] != "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y/f.txt" {
		t.Errorf("**/y/**/f.txt: %v", r.Paths)
	}
}

func TestCollapseGlobstars(t *testing.T) {
	for in, want := range map[string]string{
		"**/**/f":         "**/f",
		"a/**/**/**/b/**": "a/**/b/**",
		"**":              "**",
		"a/**b/**/**":     "a/**b/**",
		"x/*/*":           "x/*/*",
	} {
		if got := collapseGlobstars(in); got != want {
			t.Errorf("collapseGlobstars(%q) = %q, want %q", in, got, want)
		}
	}
}
