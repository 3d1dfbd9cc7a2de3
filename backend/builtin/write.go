package builtin

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbackplane/backplane/tool"
)

// osCreateExcl creates a new file, refusing to reuse an existing one.
const osCreateExcl = os.O_WRONLY | os.O_CREATE | os.O_EXCL

// MaxEditBytes is the largest file edit reads to replace text in.
const MaxEditBytes = 16 << 20

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type writeResult struct {
	Path    string `json:"path"`
	Bytes   int    `json:"bytes"`
	Created bool   `json:"created"`
}

func (s *Set) write(ctx context.Context, raw json.RawMessage) (*tool.Result, error) {
	var a writeArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	rel, err := s.fileName(a.Path)
	if err != nil {
		return nil, err
	}
	fi, err := s.target(a.Path, rel)
	if err != nil {
		return nil, err
	}
	perm := fs.FileMode(0o644)
	if fi != nil {
		perm = fi.Mode().Perm()
	}
	// replace creates the missing parent folders.
	if err := s.replace(ctx, a.Path, rel, []byte(a.Content), perm, true); err != nil {
		return nil, err
	}
	return ok(writeResult{Path: display(rel), Bytes: len(a.Content), Created: fi == nil})
}

type editArgs struct {
	Path       string  `json:"path"`
	Content    string  `json:"content"`
	OldContent *string `json:"old_content"`
}

type editResult struct {
	Path string `json:"path"`
	// Replaced is 1 when old_content was replaced; Overwritten is set when
	// the whole file was replaced.
	Replaced    int  `json:"replaced"`
	Overwritten bool `json:"overwritten"`
	Bytes       int  `json:"bytes"` // the file's new size
}

func (s *Set) edit(ctx context.Context, raw json.RawMessage) (*tool.Result, error) {
	var a editArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	rel, err := s.fileName(a.Path)
	if err != nil {
		return nil, err
	}
	fi, err := s.target(a.Path, rel)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, fail(tool.ClassNotFound, "%s does not exist; edit changes an existing file (use write to create one)", a.Path).
			with("path", a.Path)
	}
	if a.OldContent == nil {
		if err := s.replace(ctx, a.Path, rel, []byte(a.Content), fi.Mode().Perm(), false); err != nil {
			return nil, err
		}
		return ok(editResult{Path: display(rel), Overwritten: true, Bytes: len(a.Content)})
	}
	old := *a.OldContent
	if old == "" {
		return nil, fail(tool.ClassValidation, "old_content is empty; omit it to replace the whole file")
	}
	if fi.Size() > MaxEditBytes {
		return nil, fail(tool.ClassValidation, "%s is %d bytes, over the %d bytes edit reads; use write to replace it", a.Path, fi.Size(), MaxEditBytes)
	}
	// Checked like read: whether text occurs in a file is a read of it.
	f, err := s.openChecked(a.Path, rel)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxEditBytes+1))
	f.Close()
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if len(data) > MaxEditBytes {
		return nil, fail(tool.ClassValidation, "%s is over the %d bytes edit reads; use write to replace it", a.Path, MaxEditBytes)
	}
	text := string(data)
	switch n := strings.Count(text, old); n {
	case 1:
	case 0:
		return nil, fail(tool.ClassValidation,
			"old_content was not found in %s (0 occurrences; it must occur exactly once, whitespace included); the file was not changed", a.Path).
			with("path", a.Path).with("occurrences", 0)
	default:
		return nil, fail(tool.ClassValidation,
			"old_content occurs %d times in %s; it must occur exactly once: include more of the surrounding text; the file was not changed", n, a.Path).
			with("path", a.Path).with("occurrences", n)
	}
	updated := strings.Replace(text, old, a.Content, 1)
	if err := s.replace(ctx, a.Path, rel, []byte(updated), fi.Mode().Perm(), false); err != nil {
		return nil, err
	}
	return ok(editResult{Path: display(rel), Replaced: 1, Bytes: len(updated)})
}

// fileName checks that a path names a file (not the workspace, not a
// folder written with a trailing slash) and returns its name for the root.
func (s *Set) fileName(p string) (string, error) {
	if p == "" {
		return "", fail(tool.ClassValidation, "path is empty")
	}
	rel, err := s.rel(p)
	if err != nil {
		return "", err
	}
	if base := filepath.Base(rel); base == "." || base == ".." || base == "/" || strings.HasSuffix(rel, "/") {
		return "", fail(tool.ClassValidation, "%s does not name a file", p).with("path", p)
	}
	if s.lexHidden(rel) {
		return "", hiddenErr(p)
	}
	return rel, nil
}

// target looks at what rel names now, without following a final symbolic
// link: nil when nothing is there, the file's info when it is a regular
// file. Anything else is refused: writing through a symbolic link would
// replace the link itself (the rename below does not follow it), so a link
// is reported with its target for the caller to name instead; when the link
// leads out of the workspace or into a hidden path the refusal is
// forbidden.
func (s *Set) target(p, rel string) (fs.FileInfo, error) {
	fi, err := s.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fsError(p, err)
	case fi.Mode().IsRegular():
		return fi, nil
	case fi.Mode()&fs.ModeSymlink != 0:
		if _, err := s.root.Stat(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fsError(p, err)
		}
		// A link into a hidden path is refused as such (fileName checked
		// the name; this is where the link leads).
		if f, err := s.root.OpenFile(rel, openFlags, 0); err == nil {
			hidden := s.hides(locate(f, filepath.Join(s.ws, rel)))
			f.Close()
			if hidden {
				return nil, hiddenErr(p)
			}
		}
		dest, _ := s.root.Readlink(rel)
		return nil, fail(tool.ClassValidation, "%s is a symbolic link (to %s); name the file it points to", p, dest).
			with("path", p).with("link_target", dest)
	}
	return nil, notRegular(p, fi.Mode())
}

// replace writes data to a temporary file beside rel, syncs it, and renames
// it over rel: readers see the old file or the new one, never a part. All of
// it goes through one root opened on rel's folder (made first, with
// create, when missing) and checked not to be hidden: no step can land
// outside the workspace or in a hidden folder, even if the folder's name is
// swapped for a link meanwhile. On failure the temporary file is removed
// and rel is unchanged.
func (s *Set) replace(ctx context.Context, p, rel string, data []byte, perm fs.FileMode, create bool) error {
	dir, where, err := s.openParent(p, filepath.Dir(rel), create)
	if err != nil {
		return err
	}
	defer dir.Close()
	// The folder renamed into must be the one the policy decided on.
	if fi, err := dir.Stat("."); err != nil {
		return fsError(p, err)
	} else if err := s.verify(ctx, p, filepath.Dir(rel), fi, true); err != nil {
		return err
	}
	base := filepath.Base(rel)
	if s.hides(filepath.Join(where, base)) {
		return hiddenErr(p)
	}
	tmp := "." + base + ".tmp-" + rand.Text()[:12]
	f, err := dir.OpenFile(tmp, osCreateExcl, 0o600)
	if err != nil {
		return fsError(p, err)
	}
	cleanup := func(err error) error {
		f.Close()
		dir.Remove(tmp)
		e := fsError(p, err)
		var te *toolError
		if errors.As(e, &te) {
			te.msg += "; the file was not changed"
		}
		return e
	}
	if _, err := f.Write(data); err != nil {
		return cleanup(err)
	}
	if err := f.Chmod(perm); err != nil {
		return cleanup(err)
	}
	if err := f.Sync(); err != nil {
		return cleanup(err)
	}
	if err := f.Close(); err != nil {
		dir.Remove(tmp)
		return fsError(p, err)
	}
	if err := dir.Rename(tmp, base); err != nil {
		dir.Remove(tmp)
		e := fsError(p, err)
		var te *toolError
		if errors.As(e, &te) {
			te.msg += "; the file was not changed"
		}
		return e
	}
	// Make the rename itself durable. A failure here does not undo it.
	if d, err := dir.Open("."); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
