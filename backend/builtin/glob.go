package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/agentbackplane/backplane/backend"
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

func (s *Set) glob(ctx context.Context, raw json.RawMessage) (*backend.Result, error) {
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
	dir, where, err := s.openDir(a.Path, rel)
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
	walkErr := doublestar.GlobWalk(walkFS{ctx, s, dir, where}, pattern, func(p string, d fs.DirEntry) error {
		found = append(found, path.Join(prefix, p))
		if len(found) >= 4*limit+64 {
			compact()
		}
		return nil
	}, doublestar.WithNoFollow(), doublestar.WithFilesOnly())
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
	p = strings.TrimPrefix(path.Clean(p), "./")
	if !doublestar.ValidatePattern(p) {
		return "", fail(tool.ClassValidation, "%q is not a valid glob pattern", p)
	}
	return p, nil
}

// openDir opens the folder rel names as a root of its own, for a listing
// or a walk, and returns where it is (see locate). A hidden path is
// refused before anything says whether it is a folder.
func (s *Set) openDir(p, rel string) (*os.Root, string, error) {
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
	// swapped for a link since the look above.
	return s.checkedRoot(p, dir, filepath.Join(s.ws, rel))
}
