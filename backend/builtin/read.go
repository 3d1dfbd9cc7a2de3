package builtin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/tool"
)

// sniffBytes is how much of a file decides whether it is binary.
const sniffBytes = 8 << 10

// isBinary reports whether the start of a file looks binary: a NUL byte, or
// bytes that are not UTF-8. complete says whether b is the whole file; when
// it is not, a character cut at the end of b is not held against it.
func isBinary(b []byte, complete bool) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	if !complete {
		// Drop a trailing incomplete character (at most 3 bytes).
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	return !utf8.Valid(b)
}

type readArgs struct {
	Path   string `json:"path"`
	Offset *int   `json:"offset"`
	Limit  *int   `json:"limit"`
}

type readResult struct {
	Path string `json:"path"`
	// Content holds the lines, each as "<number>\t<text>\n" with the number
	// right-aligned on 6 columns (cat -n).
	Content   string `json:"content"`
	StartLine int    `json:"start_line"` // first line returned
	EndLine   int    `json:"end_line"`   // last line returned; start_line-1 when none
	Size      int64  `json:"size"`       // of the file, in bytes
	// Truncated says lines remain after end_line (or that end_line itself
	// was cut at the byte cap); NextOffset is where to continue.
	Truncated  bool   `json:"truncated"`
	Reason     string `json:"truncated_by,omitempty"` // "limit" or "max_bytes"
	NextOffset int    `json:"next_offset,omitempty"`
	// LineCut says the last line was cut at the byte cap.
	LineCut bool `json:"line_cut,omitempty"`
}

type binaryResult struct {
	Path   string `json:"path"`
	Binary bool   `json:"binary"`
	Size   int64  `json:"size"`
	Note   string `json:"note"`
}

func (s *Set) read(ctx context.Context, raw json.RawMessage) (*tool.Result, error) {
	var a readArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		return nil, fail(tool.ClassValidation, "path is empty")
	}
	offset, limit := 1, 0
	if a.Offset != nil {
		if *a.Offset < 1 {
			return nil, fail(tool.ClassValidation, "offset %d: lines are counted from 1", *a.Offset)
		}
		offset = *a.Offset
	}
	if a.Limit != nil {
		if *a.Limit < 1 {
			return nil, fail(tool.ClassValidation, "limit %d must be at least 1", *a.Limit)
		}
		limit = *a.Limit
	}
	rel, err := s.rel(a.Path)
	if err != nil {
		return nil, err
	}
	f, err := s.openChecked(a.Path, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fsError(a.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(a.Path, fi.Mode())
	}
	if err := s.verify(ctx, a.Path, rel, fi, false); err != nil {
		return nil, err
	}

	br := bufio.NewReaderSize(f, 64<<10)
	head, err := br.Peek(sniffBytes)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, fsError(a.Path, err)
	}
	if isBinary(head, len(head) < sniffBytes) {
		return ok(binaryResult{Path: display(rel), Binary: true, Size: fi.Size(),
			Note: "the file is binary (a NUL byte or bytes that are not UTF-8 in its first 8 KiB); its content is not shown"})
	}

	res := readResult{Path: display(rel), StartLine: offset, EndLine: offset - 1, Size: fi.Size()}
	var out bytes.Buffer
	line := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", a.Path, err)
		}
		text, more, err := readLine(br, s.readMax)
		if err != nil {
			return nil, fsError(a.Path, err)
		}
		if text == nil {
			break // end of file
		}
		line++
		if line < offset {
			continue
		}
		if limit > 0 && line >= offset+limit {
			res.Truncated, res.Reason, res.NextOffset = true, "limit", line
			break
		}
		prefix := fmt.Sprintf("%6d\t", line)
		room := s.readMax - out.Len() - len(prefix) - 1
		if room < len(text) || more {
			if line > offset {
				// Stop before a line that does not fit rather than cut it.
				res.Truncated, res.Reason, res.NextOffset = true, "max_bytes", line
				break
			}
			// The first line does not fit: show what does, so that a file
			// made of one huge line is still readable in part.
			cut := min(max(room, 0), len(text))
			for cut > 0 && cut < len(text) && !utf8.RuneStart(text[cut]) {
				cut--
			}
			out.WriteString(prefix)
			out.Write(text[:cut])
			out.WriteByte('\n')
			res.EndLine = line
			res.Truncated, res.Reason, res.LineCut, res.NextOffset = true, "max_bytes", true, line+1
			break
		}
		out.WriteString(prefix)
		out.Write(text)
		out.WriteByte('\n')
		res.EndLine = line
	}
	if line < offset && !(offset == 1 && line == 0) {
		return nil, fail(tool.ClassValidation, "offset %d is past the end of %s, which has %d lines", offset, a.Path, line).
			with("lines", line)
	}
	res.Content = out.String()
	if !utf8.ValidString(res.Content) {
		// Past the sniffed start a file may still hold stray bytes; JSON
		// would replace them anyway: do it here, visibly.
		res.Content = strings.ToValidUTF8(res.Content, "\uFFFD")
	}
	return ok(res)
}

// readLine returns the next line without its newline, at most max bytes of
// it (cut says the line was longer; the rest is consumed), or nil at the end
// of the file.
func readLine(br *bufio.Reader, max int) (line []byte, cut bool, err error) {
	buf := []byte{}
	total, seen := 0, false
	for {
		chunk, err := br.ReadSlice('\n')
		seen = seen || len(chunk) > 0
		body := chunk
		if err == nil {
			body = chunk[:len(chunk)-1]
		}
		total += len(body)
		if room := max - len(buf); room > 0 {
			buf = append(buf, body[:min(len(body), room)]...)
		}
		switch {
		case err == nil:
			return buf, total > max, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if !seen {
				return nil, false, nil
			}
			return buf, total > max, nil
		default:
			return nil, false, err
		}
	}
}
