package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentbackplane/backplane/tool"
)

// maxPreviewBytes caps the file a preview reads to diff against.
const maxPreviewBytes = 1 << 20

// preview says what a call of tool would do, without doing it: for write
// and edit a unified diff of the file against what the call would leave,
// for bash the command. Other tools have no preview (nil). The file is read
// as read reads it (hidden state refused), so a preview shows nothing a
// read would not.
func (s *Set) preview(ctx context.Context, name string, raw json.RawMessage) (*tool.Preview, error) {
	switch name {
	case "bash":
		var a bashArgs
		if err := decode(raw, &a); err != nil {
			return nil, err
		}
		return &tool.Preview{Command: a.Command}, nil
	case "write":
		var a writeArgs
		if err := decode(raw, &a); err != nil {
			return nil, err
		}
		old, path, err := s.previewRead(a.Path)
		if err != nil {
			return nil, err
		}
		return &tool.Preview{Diff: unifiedDiff(path, old, a.Content)}, nil
	case "edit":
		var a editArgs
		if err := decode(raw, &a); err != nil {
			return nil, err
		}
		old, path, err := s.previewRead(a.Path)
		if err != nil {
			return nil, err
		}
		updated := a.Content
		if a.OldContent != nil {
			if n := strings.Count(old, *a.OldContent); n != 1 || *a.OldContent == "" {
				return nil, fmt.Errorf("old_content occurs %d times in %s: the edit would fail as it stands", n, a.Path)
			}
			updated = strings.Replace(old, *a.OldContent, a.Content, 1)
		}
		return &tool.Preview{Diff: unifiedDiff(path, old, updated)}, nil
	}
	return nil, nil
}

// previewRead reads the file a write or edit names ("" when it does not
// exist yet).
func (s *Set) previewRead(p string) (content, display string, err error) {
	rel, err := s.fileName(p)
	if err != nil {
		return "", "", err
	}
	fi, err := s.target(p, rel)
	if err != nil {
		return "", "", err
	}
	if fi == nil {
		return "", displayName(rel), nil
	}
	if fi.Size() > maxPreviewBytes {
		return "", "", fmt.Errorf("%s is %d bytes, over the %d a preview reads", p, fi.Size(), maxPreviewBytes)
	}
	f, err := s.openChecked(p, rel)
	if err != nil {
		var te *toolError
		if errors.As(err, &te) {
			return "", "", errors.New(te.msg)
		}
		return "", "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPreviewBytes+1))
	if err != nil {
		return "", "", err
	}
	return string(b), displayName(rel), nil
}

func displayName(rel string) string { return display(rel) }
