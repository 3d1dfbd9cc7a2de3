package builtin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/agentbackplane/backplane/tool"
)

// Grep bounds.
const (
	// MaxGrepContext caps the context argument.
	MaxGrepContext = 50
	// grepLineBytes is how much of a long line is matched and shown.
	grepLineBytes = 2000
	// grepOutputBytes bounds the text of one result (lines and context).
	grepOutputBytes = 512 << 10
)

type grepArgs struct {
	Pattern    string `json:"pattern"`
	Path       string `json:"path"`
	Glob       string `json:"glob"`
	IgnoreCase bool   `json:"ignore_case"`
	Context    *int   `json:"context"`
	Limit      *int   `json:"limit"`
}

type grepLine struct {
	Line int    `json:"line"`
	Text string `json:"text"`
}

type grepMatch struct {
	Path   string     `json:"path"` // relative to the workspace
	Line   int        `json:"line"`
	Text   string     `json:"text"`
	Before []grepLine `json:"before,omitempty"`
	After  []grepLine `json:"after,omitempty"`
}

type grepResult struct {
	Pattern string      `json:"pattern"`
	Path    string      `json:"path"`
	Matches []grepMatch `json:"matches"`
	// Truncated says more matches exist than were returned (limit, or the
	// size bound of a result).
	Truncated     bool `json:"truncated"`
	FilesSearched int  `json:"files_searched"`
	// Skipped counts files not searched: binary ones, and those that could
	// not be opened. Symbolic links are never followed nor counted.
	BinarySkipped     int `json:"binary_skipped"`
	UnreadableSkipped int `json:"unreadable_skipped"`
}

type grepper struct {
	re      *regexp.Regexp
	context int
	limit   int
	res     grepResult
	outSize int
	done    bool
}

func (s *Set) grep(ctx context.Context, raw json.RawMessage) (*tool.Result, error) {
	var a grepArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	limit, err := limitArg(a.Limit, DefaultGrepLimit)
	if err != nil {
		return nil, err
	}
	g := &grepper{limit: limit}
	if a.Context != nil {
		if *a.Context < 0 {
			return nil, fail(tool.ClassValidation, "context %d must not be negative", *a.Context)
		}
		g.context = min(*a.Context, MaxGrepContext)
	}
	expr := a.Pattern
	if a.IgnoreCase {
		expr = "(?i)" + expr
	}
	// RE2: matching is linear in the input, so no pattern can hang the call.
	if g.re, err = regexp.Compile(expr); err != nil {
		return nil, fail(tool.ClassValidation, "pattern %q is not a valid regular expression (Go RE2 syntax): %v", a.Pattern, err)
	}
	if a.Glob != "" && !doublestar.ValidatePattern(a.Glob) {
		return nil, fail(tool.ClassValidation, "glob %q is not a valid pattern", a.Glob)
	}
	rel, err := s.rel(a.Path)
	if err != nil {
		return nil, err
	}
	prefix := display(rel)
	g.res = grepResult{Pattern: a.Pattern, Path: prefix, Matches: []grepMatch{}}

	f, err := s.openChecked(a.Path, rel)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsError(a.Path, err)
	}
	if fi.Mode().IsRegular() {
		if err := s.verify(ctx, a.Path, rel, fi, false); err != nil {
			f.Close()
			return nil, err
		}
		// A file named explicitly is searched whatever the glob says.
		err = g.file(ctx, prefix, f)
		f.Close()
		if err != nil {
			return nil, g.fileError(ctx, a.Path, err)
		}
		return ok(g.res)
	}
	f.Close()
	if !fi.IsDir() {
		return nil, notRegular(a.Path, fi.Mode())
	}

	dir, where, err := s.openDir(ctx, a.Path, rel)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	fsys := walkFS{ctx, s, dir, where}
	// WalkDir does not follow symbolic links, every open goes through the
	// folder's root (nothing outside it is read), and walkFS leaves hidden
	// entries out.
	walkErr := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			if p == "." {
				return err
			}
			g.res.UnreadableSkipped++
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if a.Glob != "" && !globMatch(a.Glob, p) {
			return nil
		}
		if walkDenied(ctx, prefix, p) {
			return nil // a deny rule names it: neither searched nor counted
		}
		f, _, err := fsys.open(p)
		if errors.Is(err, errHidden) {
			return nil // not part of the workspace: not counted either
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			g.res.UnreadableSkipped++
			return nil
		}
		err = g.file(ctx, path.Join(prefix, p), f)
		f.Close()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			g.res.UnreadableSkipped++
		}
		if g.done {
			return fs.SkipAll
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("grep %s: %w", a.Pattern, err)
	}
	if walkErr != nil {
		return nil, fsError(a.Path, walkErr)
	}
	return ok(g.res)
}

func (g *grepper) fileError(ctx context.Context, p string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("grep %s: %w", p, cerr)
	}
	return fsError(p, err)
}

// globMatch applies grep's glob filter: a pattern with a slash is matched
// against the path under the search folder, one without against the name.
func globMatch(pattern, p string) bool {
	name := p
	if !strings.Contains(pattern, "/") {
		name = path.Base(p)
	}
	ok, _ := doublestar.Match(pattern, name)
	return ok
}

// file searches one file. It sets g.done when the limit is passed.
func (g *grepper) file(ctx context.Context, name string, r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(sniffBytes)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return err
	}
	if isBinary(head, len(head) < sniffBytes) {
		g.res.BinarySkipped++
		return nil
	}
	g.res.FilesSearched++
	var (
		before   []grepLine // the last g.context lines
		pending  []int      // indexes of matches still collecting after-context
		stopping bool       // past the limit: only finishing after-context
	)
	n := 0
	for {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		text, cut, err := readLine(br, grepLineBytes)
		if err != nil {
			return err
		}
		if text == nil {
			return nil
		}
		n++
		t := lineText(text, cut)
		cur := grepLine{Line: n, Text: t}
		for _, i := range pending {
			g.res.Matches[i].After = append(g.res.Matches[i].After, cur)
			g.outSize += len(t)
		}
		for len(pending) > 0 && len(g.res.Matches[pending[0]].After) >= g.context {
			pending = pending[1:]
		}
		if stopping {
			if len(pending) == 0 {
				return nil
			}
			continue
		}
		if g.re.Match(text) {
			if len(g.res.Matches) >= g.limit || g.outSize > grepOutputBytes {
				g.res.Truncated, g.done, stopping = true, true, true
				if len(pending) == 0 {
					return nil
				}
				continue
			}
			m := grepMatch{Path: name, Line: n, Text: t}
			if len(before) > 0 {
				m.Before = append([]grepLine(nil), before...)
			}
			g.outSize += len(t) + len(name)
			for _, b := range before {
				g.outSize += len(b.Text)
			}
			g.res.Matches = append(g.res.Matches, m)
			if g.context > 0 {
				pending = append(pending, len(g.res.Matches)-1)
			}
		}
		if g.context > 0 {
			before = append(before, cur)
			if len(before) > g.context {
				before = before[1:]
			}
		}
	}
}

// lineText is a line as shown: valid UTF-8, marked when cut.
func lineText(b []byte, cut bool) string {
	t := string(b)
	if cut {
		// Drop a character the cut split (at most 3 bytes).
		for i := 0; i < utf8.UTFMax-1 && len(t) > 0; i++ {
			if r, size := utf8.DecodeLastRuneInString(t); r != utf8.RuneError || size != 1 {
				break
			}
			t = t[:len(t)-1]
		}
		t += " …[line cut]"
	}
	return strings.ToValidUTF8(t, "\uFFFD")
}
