package builtin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/agentbackplane/backplane/tool"
)

// os.Root reports an escape with an unexported error value. learnEscapeError
// obtains that very value (an absolute name always escapes) so that
// isEscape can match it with errors.Is; the message is the fallback.
var (
	escapeOnce sync.Once
	escapeErr  error
)

const escapeMessage = "path escapes from parent"

func learnEscapeError(root *os.Root) {
	escapeOnce.Do(func() {
		_, err := root.Lstat("/")
		var pe *fs.PathError
		if errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == escapeMessage {
			escapeErr = pe.Err
		}
	})
}

func isEscape(err error) bool {
	if escapeErr != nil && errors.Is(err, escapeErr) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == escapeMessage {
			return true
		}
	}
	return false
}

// rel turns a path argument into a name for the root: "" is the workspace
// itself, an absolute path must lie inside the workspace (lexically), and a
// relative one is passed on unchanged, for os.Root to resolve and refuse
// ("..", symbolic links) component by component.
func (s *Set) rel(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fail(tool.ClassValidation, "the path %q contains a NUL byte", p)
	}
	if !filepath.IsAbs(p) {
		return p, nil
	}
	c := filepath.Clean(p)
	for _, base := range []string{s.ws, s.wsReal} {
		if c == base {
			return ".", nil
		}
		if prefix := strings.TrimSuffix(base, "/") + "/"; strings.HasPrefix(c, prefix) {
			return c[len(prefix):], nil
		}
	}
	return "", fail(tool.ClassForbidden, "%s is outside the workspace %s; paths are confined to it", p, s.ws).
		with("path", p)
}

// display is how a workspace-relative name is shown in results.
func display(rel string) string {
	if rel == "" {
		return "."
	}
	return filepath.Clean(rel)
}

// fsError classifies a file system error met on path p (as the caller
// wrote it) into a tool-level failure.
func fsError(p string, err error) error {
	if p == "" {
		p = "."
	}
	var te *toolError
	if errors.As(err, &te) {
		return te
	}
	reason := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		reason = pe.Err.Error()
	}
	if errors.Is(err, errHidden) {
		return hiddenErr(p)
	}
	var out *toolError
	switch {
	case isEscape(err):
		out = fail(tool.ClassForbidden,
			"%s leads outside the workspace (through \"..\", an absolute path, or a symbolic link that points out of it or is absolute); it is refused, not followed", p)
	case errors.Is(err, syscall.ELOOP):
		out = fail(tool.ClassExecutionFailure, "%s: too many levels of symbolic links (a symbolic link loop)", p)
	case errors.Is(err, fs.ErrNotExist):
		out = fail(tool.ClassNotFound, "%s does not exist", p)
	case errors.Is(err, syscall.ENOTDIR):
		out = fail(tool.ClassNotFound, "%s does not exist: a component of the path is not a directory", p)
	case errors.Is(err, fs.ErrPermission):
		out = fail(tool.ClassForbidden, "%s: permission denied", p)
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EINVAL), errors.Is(err, fs.ErrInvalid):
		out = fail(tool.ClassValidation, "%s: %s", p, reason)
	case errors.Is(err, syscall.EISDIR):
		out = fail(tool.ClassValidation, "%s is a directory", p)
	default:
		out = fail(tool.ClassExecutionFailure, "%s: %s", p, reason)
	}
	return out.with("path", p)
}

// kind names a file mode for results.
func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

func notRegular(p string, m fs.FileMode) error {
	what := "is not a regular file"
	switch kind(m) {
	case "dir":
		what = "is a directory, not a regular file"
	case "other":
		what = "is not a regular file (" + m.Type().String() + ")"
	}
	return fail(tool.ClassValidation, "%s %s", p, what).with("path", p)
}
