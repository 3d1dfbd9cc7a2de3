package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/agentbackplane/backplane/tool"
)

type globArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
	Limit   *int   `json:"limit"`
}

type globResult struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
	// Paths are relative to the workspace, sorted; directories are not
	// listed (symbolic links are, unfollowed).
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated"`
}

func (s *Set) glob(ctx context.Context, raw json.RawMessage) (*tool.Result, error) {
	var a globArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	limit, err := limitArg(a.Limit, DefaultListLimit)
	if err != nil {
		return nil, err
	}
	rel, err := s.rel(a.Path)
	if err != nil {
		return nil, err
	}
	pattern, err := s.globPattern(a.Pattern, rel)
	if err != nil {
		return nil, err
	}
	dir, where, err := s.openDir(ctx, a.Path, rel)
	if err != nil {
		return nil, err
	}
	defer dir.Close()

	prefix := display(rel)
	var found []string
	truncated := false
	// Matches are kept sorted and cut to limit as they come, so memory stays
	// proportional to limit whatever the tree.
	compact := func() {
		slices.Sort(found)
		if len(found) > limit {
			found, truncated = found[:limit], true
		}
	}
	// The walk does not follow symbolic links (WithNoFollow) below the
	// pattern's literal part, which is looked up through walkFS like the
	// rest: hidden entries are neither listed nor matched, whatever the
	// name or link leading to them.
	walkErr := globWalk(ctx, walkFS{ctx, s, dir, where}, pattern, func(p string) {
		if s.globDenied(ctx, rel, prefix, p) {
			return // a deny rule names it: not listed
		}
		found = append(found, path.Join(prefix, p))
		if len(found) >= 4*limit+64 {
			compact()
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("glob %s: %w", a.Pattern, err)
	}
	if walkErr != nil {
		return nil, fail(tool.ClassValidation, "pattern %q: %v", a.Pattern, walkErr)
	}
	compact()
	if found == nil {
		found = []string{}
	}
	return ok(globResult{Pattern: a.Pattern, Path: prefix, Paths: found, Truncated: truncated})
}

// globPattern checks a pattern and makes it relative to the search folder.
// A pattern cannot climb out with ".." (the file system under the root has
// no such names anyway; refusing says so); an absolute one must lie under
// the search folder.
func (s *Set) globPattern(p, rel string) (string, error) {
	if p == "" {
		return "", fail(tool.ClassValidation, "pattern is empty")
	}
	if filepath.IsAbs(p) {
		prel, err := s.rel(p)
		if err != nil {
			return "", err
		}
		base := display(rel)
		switch {
		case base == ".":
			p = prel
		case prel == base:
			p = "."
		case strings.HasPrefix(prel, base+"/"):
			p = prel[len(base)+1:]
		default:
			return "", fail(tool.ClassValidation, "the absolute pattern %q is not under the search path %s", p, base)
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fail(tool.ClassForbidden, "pattern %q climbs out with \"..\"; patterns are matched inside the search path", p)
		}
	}
	p = collapseGlobstars(strings.TrimPrefix(path.Clean(p), "./"))
	if !doublestar.ValidatePattern(p) {
		return "", fail(tool.ClassValidation, "%q is not a valid glob pattern", p)
	}
	return p, nil
}

// openDir opens the folder rel names as a root of its own, for a listing
// or a walk, and returns where it is (see locate). A hidden path is
// refused before anything says whether it is a folder.
func (s *Set) openDir(ctx context.Context, p, rel string) (*os.Root, string, error) {
	f, err := s.openChecked(p, rel)
	if err != nil {
		return nil, "", err
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return nil, "", fsError(p, err)
	}
	if !fi.IsDir() {
		return nil, "", fail(tool.ClassValidation, "%s is not a directory (it is a %s)", orDot(p), kind(fi.Mode())).with("path", p)
	}
	dir, err := s.root.OpenRoot(rel)
	if err != nil {
		return nil, "", fsError(p, err)
	}
	// Checked again: the root is what is used, and the name may have been
	// swapped for a link since the look above; and it must be the folder
	// the policy decided on.
	if fi, err := dir.Stat("."); err != nil {
		dir.Close()
		return nil, "", fsError(p, err)
	} else if err := s.verify(ctx, p, rel, fi, false); err != nil {
		dir.Close()
		return nil, "", err
	}
	return s.checkedRoot(p, dir, filepath.Join(s.ws, rel))
}

// collapseGlobstars replaces runs of "**" segments with one: "**/**/x"
// means what "**/x" means (any number of folders, then x), and each extra
// "**" would multiply the work of a walk and repeat its matches.
func collapseGlobstars(p string) string {
	segs := strings.Split(p, "/")
	out := segs[:0]
	for i, seg := range segs {
		if seg == "**" && i > 0 && len(out) > 0 && out[len(out)-1] == "**" {
			continue
		}
		out = append(out, seg)
	}
	return strings.Join(out, "/")
}

// globWalk calls found with each path under fsys that matches pattern,
// folders left out, symbolic links listed and never followed, each path
// once. A pattern without "**" is walked by doublestar, which reads only
// the folders its segments can match; one with "**" is one walk of the
// tree below its literal prefix, each entry visited once and matched
// against the whole pattern, so the work is linear in the tree whatever
// the number of "**" (doublestar's GlobWalk descends once per "**" and
// repeats matches).
func globWalk(ctx context.Context, fsys walkFS, pattern string, found func(p string)) error {
	if !slices.Contains(strings.Split(pattern, "/"), "**") {
		return doublestar.GlobWalk(fsys, pattern, func(p string, d fs.DirEntry) error {
			found(p)
			return nil
		}, doublestar.WithNoFollow(), doublestar.WithFilesOnly())
	}
	base, _ := doublestar.SplitPattern(pattern)
	err := fs.WalkDir(fsys, base, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			// An unreadable or vanished folder is left out, as doublestar
			// leaves it out; so is a missing literal prefix.
			if d != nil && d.IsDir() && p != base {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if ok, _ := doublestar.Match(pattern, p); ok {
			found(p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
