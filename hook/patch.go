package hook

import (
	"fmt"
	"strings"
)

// PatchFile is one file an apply_patch patch touches, with the patch's
// part for it (its header line and hunks), which the edit decision
// carries so that an operator approving it sees the change.
type PatchFile struct {
	Path string
	// Op is "add", "update", "delete" or "move" (the destination of an
	// update's "*** Move to:").
	Op   string
	Text string
	// Added is an added file's content (its + lines).
	Added string
	// Hunks are an update's changes, each as the text it replaces (its
	// context and - lines) and the text it becomes (context and + lines).
	Hunks []Hunk
}

// Hunk is one change of an updated file.
type Hunk struct{ Old, New string }

// parseSection fills an added file's content or an update's hunks from
// its section text (the header line first).
func (f *PatchFile) parseSection() {
	lines := strings.Split(strings.TrimSuffix(f.Text, "\n"), "\n")
	var added strings.Builder
	var cur *Hunk
	for _, l := range lines[1:] {
		switch {
		case f.Op == "add":
			added.WriteString(strings.TrimPrefix(l, "+") + "\n")
		case strings.HasPrefix(l, "@@"):
			f.Hunks = append(f.Hunks, Hunk{})
			cur = &f.Hunks[len(f.Hunks)-1]
		case strings.HasPrefix(l, "*** "):
			// *** Move to: or *** End of File: no text
		default:
			if cur == nil { // a hunk without its @@ line
				f.Hunks = append(f.Hunks, Hunk{})
				cur = &f.Hunks[len(f.Hunks)-1]
			}
			body := ""
			if l != "" {
				body = l[1:]
			}
			if !strings.HasPrefix(l, "+") {
				cur.Old += body + "\n"
			}
			if !strings.HasPrefix(l, "-") {
				cur.New += body + "\n"
			}
		}
	}
	f.Added = added.String()
}

// PatchFiles lists the files of a Codex apply_patch patch:
//
//	*** Begin Patch
//	*** Add File: PATH      (then + lines)
//	*** Update File: PATH   (optionally *** Move to: PATH, then @@ hunks)
//	*** Delete File: PATH
//	*** End Patch
//
// It fails closed: a "***" line it does not know, a patch without its
// begin line, or one that touches no file is ErrBadInput, since a file the
// parser missed would be a file nobody decided.
func PatchFiles(text string) ([]PatchFile, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	i := 0
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	if i == len(lines) || strings.TrimSpace(lines[i]) != "*** Begin Patch" {
		return nil, fmt.Errorf("%w: apply_patch: the patch does not start with *** Begin Patch", ErrBadInput)
	}
	var (
		files []PatchFile
		cur   *strings.Builder
		owner []int // the files (indices) the current section belongs to
		ended bool
	)
	flush := func() {
		if cur != nil {
			for _, k := range owner {
				files[k].Text = cur.String()
			}
		}
		cur, owner = nil, nil
	}
	start := func(op, path, line string) error {
		path = strings.TrimSpace(path)
		if path == "" {
			return fmt.Errorf("%w: apply_patch: %q names no file", ErrBadInput, line)
		}
		files = append(files, PatchFile{Path: path, Op: op})
		owner = append(owner, len(files)-1)
		return nil
	}
	for _, line := range lines[i+1:] {
		if ended {
			if strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("%w: apply_patch: text after *** End Patch", ErrBadInput)
			}
			continue
		}
		if strings.HasPrefix(line, "***") {
			t := strings.TrimSpace(line)
			var err error
			switch {
			case t == "*** End Patch":
				flush()
				ended = true
				continue
			case t == "*** End of File":
				if cur == nil {
					return nil, fmt.Errorf("%w: apply_patch: *** End of File outside a file section", ErrBadInput)
				}
			case strings.HasPrefix(t, "*** Add File:"):
				flush()
				cur = &strings.Builder{}
				err = start("add", strings.TrimPrefix(t, "*** Add File:"), t)
			case strings.HasPrefix(t, "*** Update File:"):
				flush()
				cur = &strings.Builder{}
				err = start("update", strings.TrimPrefix(t, "*** Update File:"), t)
			case strings.HasPrefix(t, "*** Delete File:"):
				flush()
				cur = &strings.Builder{}
				err = start("delete", strings.TrimPrefix(t, "*** Delete File:"), t)
			case strings.HasPrefix(t, "*** Move to:"):
				if cur == nil || len(owner) != 1 || files[owner[0]].Op != "update" {
					return nil, fmt.Errorf("%w: apply_patch: *** Move to: outside an update", ErrBadInput)
				}
				err = start("move", strings.TrimPrefix(t, "*** Move to:"), t)
			default:
				return nil, fmt.Errorf("%w: apply_patch: unknown line %q", ErrBadInput, t)
			}
			if err != nil {
				return nil, err
			}
		} else if cur == nil {
			if strings.TrimSpace(line) != "" {
				return nil, fmt.Errorf("%w: apply_patch: text outside a file section", ErrBadInput)
			}
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if !ended {
		return nil, fmt.Errorf("%w: apply_patch: the patch does not end with *** End Patch", ErrBadInput)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: apply_patch: the patch touches no file", ErrBadInput)
	}
	for i := range files {
		files[i].parseSection()
	}
	return files, nil
}
