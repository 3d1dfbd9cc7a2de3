package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/tool"
)

type lsArgs struct {
	Path  string `json:"path"`
	Limit *int   `json:"limit"`
}

type lsEntry struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // file, dir, symlink, other
	Size int64  `json:"size"` // as lstat reports it
	// Target is a symbolic link's text, shown, never followed.
	Target string `json:"target,omitempty"`
}

type lsResult struct {
	Path      string    `json:"path"`
	Entries   []lsEntry `json:"entries"`
	Total     int       `json:"total"`
	Truncated bool      `json:"truncated"`
}

func (s *Set) ls(ctx context.Context, raw json.RawMessage) (*tool.Result, error) {
	var a lsArgs
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
	// The folder is opened as a root of its own: the entries are then
	// looked at relative to its descriptor, not by a path a concurrent
	// rename could redirect.
	dir, where, err := s.openDir(ctx, a.Path, rel)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	f, err := dir.Open(".")
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	// Hidden entries are not part of the workspace: not listed, not
	// counted.
	names = slices.DeleteFunc(names, func(name string) bool { return s.hides(filepath.Join(where, name)) })
	slices.Sort(names)
	res := lsResult{Path: display(rel), Entries: []lsEntry{}, Total: len(names)}
	if len(names) > limit {
		names, res.Truncated = names[:limit], true
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("ls %s: %w", a.Path, err)
		}
		e := lsEntry{Name: name, Kind: "other"}
		if info, err := dir.Lstat(name); err == nil {
			e.Kind, e.Size = kind(info.Mode()), info.Size()
			if e.Kind == "symlink" {
				e.Target, _ = dir.Readlink(name)
			}
		} // else it went away since the listing: kept, kind unknown
		res.Entries = append(res.Entries, e)
	}
	return ok(res)
}

// limitArg reads an optional positive limit.
func limitArg(p *int, def int) (int, error) {
	if p == nil {
		return def, nil
	}
	if *p < 1 {
		return 0, fail(tool.ClassValidation, "limit %d must be at least 1", *p)
	}
	return *p, nil
}

func orDot(p string) string {
	if strings.TrimSpace(p) == "" {
		return "."
	}
	return p
}
