package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agentbackplane/backplane/tool"
)

// Hidden paths: the gateway's private state (its journal, audit log and
// configuration) may lie inside the workspace, and the tools must treat it
// as if it did not. A lexical check alone is not enough: a symbolic link
// inside the workspace ("x -> .backplane") reaches the same files by
// another name. So every file or folder a tool uses is checked after it is
// opened, by where the kernel says its descriptor really is
// (/proc/self/fd, see locate), and the descriptor that was checked is the
// one used: there is no gap between the check and the use for a swapped
// link to slip through.

// errHidden marks a hidden path. It wraps fs.ErrNotExist so that a walk
// treats a hidden entry as absent and goes on; fsError turns it into a
// forbidden refusal where a tool was asked for it by name.
var errHidden = fmt.Errorf("the gateway's private state, not part of the workspace: %w", fs.ErrNotExist)

// hiddenErr is the refusal of path p, as the caller wrote it.
func hiddenErr(p string) error {
	if p == "" {
		p = "."
	}
	return fail(tool.ClassForbidden,
		"%s is the gateway's private state (its journal, audit log or configuration), not part of the workspace; the built-in tools cannot reach it", p).
		with("path", p)
}

// hidePaths cleans the Hide option and adds, for each entry, its path with
// symbolic links resolved. An entry that does not exist (yet) is resolved
// as far as its nearest existing ancestor, so that a hidden name inside
// the workspace is also known under the workspace's real path.
func hidePaths(hide []string, ws, wsReal string) ([]string, error) {
	var out []string
	for _, h := range hide {
		if h == "" || !filepath.IsAbs(h) {
			return nil, fmt.Errorf("builtin: hidden path %q is not an absolute path", h)
		}
		c := filepath.Clean(h)
		for _, p := range []string{c, resolveExisting(c)} {
			if within(ws, p) || within(wsReal, p) {
				return nil, fmt.Errorf("builtin: the workspace %s lies inside the hidden path %s", ws, h)
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// resolveExisting resolves the symbolic links of p's longest existing
// prefix and appends the rest.
func resolveExisting(p string) string {
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		if q == filepath.Dir(q) {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
}

// within reports whether p is dir or lies inside it (both clean and
// absolute).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// hides reports whether the absolute path p is hidden or inside a hidden
// folder (regardless of case where names ignore it: foldName).
func (s *Set) hides(p string) bool {
	p = foldName(p)
	for _, h := range s.hidden {
		if within(p, foldName(h)) {
			return true
		}
	}
	return false
}

// lexHidden is the check by name alone of rel, a name for the root: it
// refuses ".backplane/x" and "sub/../.backplane" before anything is opened
// (a file about to be created has no descriptor to check yet).
func (s *Set) lexHidden(rel string) bool {
	return len(s.hidden) > 0 && (s.hides(filepath.Join(s.ws, rel)) || s.hides(filepath.Join(s.wsReal, rel)))
}

// locate returns where f really is: its path with every symbolic link
// resolved, as the kernel reports it; where the kernel cannot say (not
// Linux, no /proc), lex, the path the caller derived by name.
func locate(f *os.File, lex string) string {
	if real, ok := realPath(f); ok {
		return real
	}
	return lex
}

// openFlags open a file for reading without blocking on a FIFO (an open
// for reading waits for a writer otherwise); reads of regular files are
// unaffected.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK

// openChecked opens rel for reading and refuses it when it is hidden, by
// name or by where its descriptor really is.
func (s *Set) openChecked(p, rel string) (*os.File, error) {
	if s.lexHidden(rel) {
		return nil, hiddenErr(p)
	}
	f, err := s.root.OpenFile(rel, openFlags, 0)
	if err != nil {
		return nil, fsError(p, err)
	}
	if len(s.hidden) > 0 && (s.hides(locate(f, filepath.Join(s.ws, rel))) || s.sameAsHidden(f)) {
		f.Close()
		return nil, hiddenErr(p)
	}
	return f, nil
}

// checkedRoot locates a folder opened as a root and refuses it when it is
// hidden; it returns the root (closed on failure) and where it is.
func (s *Set) checkedRoot(p string, r *os.Root, lex string) (*os.Root, string, error) {
	if len(s.hidden) == 0 {
		return r, lex, nil
	}
	where, err := locateRoot(r, lex)
	if err != nil {
		r.Close()
		return nil, "", fsError(p, err)
	}
	if s.hides(where) {
		r.Close()
		return nil, "", hiddenErr(p)
	}
	return r, where, nil
}

// openParent opens the folder dir (a name for the root) as a root of its
// own, for write and edit to create and rename in, and refuses it when it
// is hidden. With create, missing folders are made one at a time, each
// relative to the descriptor of a parent already checked, so no folder is
// ever created inside a hidden one, whatever links lie on the way.
func (s *Set) openParent(p, dir string, create bool) (*os.Root, string, error) {
	if s.lexHidden(dir) {
		return nil, "", hiddenErr(p)
	}
	r, err := s.root.OpenRoot(dir)
	if err == nil {
		return s.checkedRoot(p, r, filepath.Join(s.ws, dir))
	}
	if !create || !errors.Is(err, fs.ErrNotExist) {
		return nil, "", fsError(p, err)
	}
	var parts []string
	for _, part := range strings.Split(dir, "/") {
		if part != "" && part != "." {
			parts = append(parts, part)
		}
	}
	// The deepest folder that exists; what follows it is to be made.
	i := len(parts) - 1
	for ; i >= 0; i-- {
		prefix := filepath.Join(append([]string{"."}, parts[:i]...)...)
		if r, err = s.root.OpenRoot(prefix); err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, "", fsError(p, err)
		}
	}
	if r == nil {
		return nil, "", fsError(p, err)
	}
	if slices.Contains(parts[i:], "..") {
		// "new/../x" with new missing: the system refuses such a path, and
		// nothing is created for it.
		r.Close()
		return nil, "", fsError(p, &fs.PathError{Op: "mkdir", Path: dir, Err: fs.ErrNotExist})
	}
	cur, where, err := s.checkedRoot(p, r, filepath.Join(s.ws, filepath.Join(parts[:i]...)))
	if err != nil {
		return nil, "", err
	}
	for _, part := range parts[i:] {
		next := filepath.Join(where, part)
		if s.hides(next) {
			cur.Close()
			return nil, "", hiddenErr(p)
		}
		if err := cur.Mkdir(part, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			cur.Close()
			return nil, "", fsError(p, err)
		}
		nr, err := cur.OpenRoot(part)
		cur.Close()
		if err != nil {
			return nil, "", fsError(p, err)
		}
		if cur, where, err = s.checkedRoot(p, nr, next); err != nil {
			return nil, "", err
		}
	}
	return cur, where, nil
}

// walkFS is a walk's view of a folder opened as a root (r, which is at
// where): hidden entries are left out of listings and cannot be opened or
// looked at, whatever name or link leads to them, and the walk stops when
// ctx is done. Every open goes through r, so nothing outside it is read.
type walkFS struct {
	ctx   context.Context
	s     *Set
	r     *os.Root
	where string
}

// open opens name (a slash-separated path under the root) and returns where
// it really is.
func (w walkFS) open(name string) (*os.File, string, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, "", err
	}
	w.s.walkOpens.Add(1)
	if !fs.ValidPath(name) {
		return nil, "", &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	lex := filepath.Join(w.where, filepath.FromSlash(name))
	if w.s.hides(lex) {
		return nil, "", &fs.PathError{Op: "open", Path: name, Err: errHidden}
	}
	f, err := w.r.OpenFile(name, openFlags, 0)
	if err != nil {
		return nil, "", err
	}
	if len(w.s.hidden) == 0 {
		return f, lex, nil
	}
	where := locate(f, lex)
	if w.s.hides(where) || w.s.sameAsHidden(f) {
		f.Close()
		return nil, "", &fs.PathError{Op: "open", Path: name, Err: errHidden}
	}
	return f, where, nil
}

func (w walkFS) Open(name string) (fs.File, error) {
	f, _, err := w.open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (w walkFS) Stat(name string) (fs.FileInfo, error) {
	f, _, err := w.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// ReadDir lists name, sorted, without its hidden entries.
func (w walkFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f, where, err := w.open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	entries = slices.DeleteFunc(entries, func(e fs.DirEntry) bool {
		return w.s.hides(filepath.Join(where, e.Name()))
	})
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}
