package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentbackplane/backplane/tool"
)

// Resolution for the policy (tool.PathResolver). A path rule is about a
// file, not about the text that names it: "src/envlink", a link to ".env",
// is ".env" to a deny "read(**/.env)". So before the gateway decides, the
// path argument is resolved inside the root, link by link, to its real
// workspace-relative path, and the identity (device, inode) of what it
// names is recorded: for read, ls, glob and grep the file or folder
// itself, for write and edit the folder the file is renamed into (the
// file itself is replaced, and a final link is refused). The tool then
// compares what it opened with that record before using it: a file or
// folder swapped in between (another link, a rename) is refused, never
// used. Where nothing existed to record (a file or folder created since),
// the path is resolved again and must lead to the same real path and to
// what was opened.

// maxLinks bounds the symbolic links one resolution follows (Linux's own
// bound is 40).
const maxLinks = 40

// resolved is the backend's record in a tool.ResolvedPath.
type resolved struct {
	real   string // relative to the workspace, OS separators, "." itself
	key    fileKey
	has    bool // key was recorded: what it names existed
	parent bool // key is of the folder that holds real (write, edit)
	// err is why the path could not be resolved when the policy decided:
	// nothing may be used then.
	err error
}

// ResolvePath implements tool.PathResolver for the path-taking tools.
func (b *toolBackend) ResolvePath(raw json.RawMessage) (*tool.ResolvedPath, error) {
	var a struct {
		Path string `json:"path"`
	}
	// The other members are the tool's; only the path matters here.
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("the arguments cannot be read: %w", err)
	}
	s := b.s
	parent := b.name == "write" || b.name == "edit"
	rel, err := s.rel(a.Path)
	if err != nil {
		return nil, resolveError(err)
	}
	real, fi, err := s.resolveRel(rel)
	if err != nil {
		return nil, resolveError(fsError(orDot(a.Path), err))
	}
	r := &resolved{real: real, parent: parent}
	if parent {
		fi = nil
		if pfi, err := s.root.Stat(filepath.Dir(real)); err == nil {
			fi = pfi
		}
	}
	if fi != nil {
		r.key, _, r.has = fileID(fi)
	}
	return &tool.ResolvedPath{Field: "path", Real: filepath.ToSlash(real), ID: r}, nil
}

// resolveError makes a tool-level refusal an error for the gateway: a
// forbidden one wraps tool.ErrPathRefused.
func resolveError(err error) error {
	var te *toolError
	if errors.As(err, &te) {
		if te.class == tool.ClassForbidden {
			return fmt.Errorf("%w: %s", tool.ErrPathRefused, te.msg)
		}
		return errors.New(te.msg)
	}
	return err
}

// resolveRel resolves rel (a name for the root) component by component:
// each symbolic link is read and its text put in its place, ".." goes up
// one resolved component. It returns the real path and what it names
// (nil when it does not exist: the rest of the path is then taken by
// name). A link or ".." that leads out of the workspace, and an absolute
// link, are escapes, as os.Root has them.
func (s *Set) resolveRel(rel string) (string, fs.FileInfo, error) {
	todo := splitRel(rel)
	var done []string
	links := 0
	var last fs.FileInfo
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", nil, &fs.PathError{Op: "resolve", Path: rel, Err: escapeError()}
			}
			done = done[:len(done)-1]
			last = nil
			continue
		}
		cand := filepath.Join(append(done, c)...)
		fi, err := s.root.Lstat(cand)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			// Nothing there: the rest is a name (write creates it; the
			// other tools will find nothing). Cleaned lexically, it must
			// not climb out either.
			rest := path.Clean(strings.Join(append(append(append([]string{}, done...), c), todo...), "/"))
			if rest == ".." || strings.HasPrefix(rest, "../") {
				return "", nil, &fs.PathError{Op: "resolve", Path: rel, Err: escapeError()}
			}
			return filepath.FromSlash(rest), nil, nil
		}
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return "", nil, &fs.PathError{Op: "resolve", Path: rel, Err: syscall.ELOOP}
			}
			target, err := s.root.Readlink(cand)
			if err != nil {
				return "", nil, err
			}
			if filepath.IsAbs(target) || filepath.VolumeName(target) != "" {
				return "", nil, &fs.PathError{Op: "resolve", Path: rel, Err: escapeError()}
			}
			todo = append(splitRel(target), todo...)
			continue
		}
		done = append(done, c)
		last = fi
	}
	real := "."
	if len(done) > 0 {
		real = filepath.Join(done...)
	}
	// What real names is opened once more and, where the kernel says where
	// a descriptor is (Linux), must be there: a component swapped for a
	// link while the walk looked elsewhere would give another file's
	// identity under this path. The identity recorded is the descriptor's.
	if f, err := s.root.OpenFile(real, resolveOpenFlags, 0); err == nil {
		where, known := realPath(f)
		fi, serr := f.Stat()
		f.Close()
		if known && where != filepath.Join(s.wsReal, real) {
			return "", nil, &fs.PathError{Op: "resolve", Path: rel, Err: errors.New("the path changed while it was resolved")}
		}
		if serr == nil {
			last = fi
		}
	}
	if last == nil {
		fi, err := s.root.Stat(real)
		if err != nil {
			return "", nil, err
		}
		last = fi
	}
	return real, last, nil
}

// splitRel splits a relative name into its components, at '/' and, where
// it separates too, the OS separator.
func splitRel(p string) []string {
	if filepath.Separator != '/' {
		p = strings.ReplaceAll(p, string(filepath.Separator), "/")
	}
	return strings.Split(p, "/")
}

// escapeError is the error os.Root reports for an escape (isEscape knows
// it), or one with its message.
func escapeError() error {
	if escapeErr != nil {
		return escapeErr
	}
	return errors.New(escapeMessage)
}

// callKey carries the call's resolution and deny check to the tool.
type callKey struct{}

type callPaths struct {
	r      *resolved
	denied func(real string) bool
}

// withPaths puts what the gateway resolved and decided into ctx.
func withPaths(ctx context.Context, call *tool.Call) context.Context {
	if call == nil || call.Path == nil {
		return ctx
	}
	r, _ := call.Path.ID.(*resolved)
	switch {
	case call.Path.Err != nil:
		r = &resolved{err: call.Path.Err}
	case r == nil:
		// A resolution that is not this backend's own: nothing to compare
		// with, so nothing may be used.
		r = &resolved{real: "\x00"}
	}
	return context.WithValue(ctx, callKey{}, &callPaths{r: r, denied: call.PathDenied})
}

func pathsFrom(ctx context.Context) *callPaths {
	cp, _ := ctx.Value(callKey{}).(*callPaths)
	return cp
}

// verify checks that fi, what the tool opened for rel (for write and
// edit, parent: the folder it renames into), is what the policy decided
// on; without a resolution (the tools used without a gateway) there is
// nothing to check.
func (s *Set) verify(ctx context.Context, p, rel string, fi fs.FileInfo, parent bool) error {
	cp := pathsFrom(ctx)
	if cp == nil {
		return nil
	}
	r := cp.r
	changed := func() error {
		return fail(tool.ClassForbidden,
			"%s changed between the policy's decision and its use (a link or folder was swapped); it was not used", orDot(p)).
			with("path", p).with("decided_path", filepath.ToSlash(r.real))
	}
	if r.err != nil {
		return fail(tool.ClassForbidden, "%s could not be resolved when the policy decided (%s); it was not used",
			orDot(p), strings.TrimPrefix(r.err.Error(), tool.ErrPathRefused.Error()+": ")).with("path", p)
	}
	if r.parent != parent {
		return changed()
	}
	k, _, ok := fileID(fi)
	if !ok {
		return changed()
	}
	if r.has {
		if k != r.key {
			return changed()
		}
		return nil
	}
	// Nothing existed when the policy decided: what is there now must lie
	// at the real path decided, and be what was opened.
	want := r.real
	if parent {
		want = filepath.Dir(r.real)
	}
	real, now, err := s.resolveRel(rel)
	if err != nil || now == nil || real != want {
		return changed()
	}
	if k2, _, ok := fileID(now); !ok || k2 != k {
		return changed()
	}
	return nil
}

// globDenied is walkDenied for glob, whose pattern's literal part is looked
// up through links: p is resolved to find its real path, and one that
// cannot be resolved is left out.
func (s *Set) globDenied(ctx context.Context, rel, text, p string) bool {
	cp := pathsFrom(ctx)
	if cp == nil || cp.denied == nil {
		return false
	}
	real, _, err := s.resolveRel(filepath.Join(rel, filepath.FromSlash(p)))
	if err != nil {
		// A link that leads out (listed by name, never followed): its own
		// place in the workspace is what can be decided.
		real = filepath.Join(cp.r.real, filepath.FromSlash(p))
	}
	return cp.denied(filepath.ToSlash(real)) || cp.denied(path.Join(text, p))
}

// walkDenied says whether a walk's entry p (slash-separated, under the
// folder the call named, which the caller wrote as text) is denied by the
// policy, by its real path or by its path as written.
func walkDenied(ctx context.Context, text, p string) bool {
	cp := pathsFrom(ctx)
	if cp == nil || cp.denied == nil {
		return false
	}
	return cp.denied(path.Join(filepath.ToSlash(cp.r.real), p)) || cp.denied(path.Join(text, p))
}
