package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The stdio transport of the SDK ends the session at the first line it
// cannot decode: one malformed line from a client (or a stray print of a
// wrapper script) would end `serve --stdio`. JSON-RPC says such a message
// gets an error answer, and the server goes on: -32700 (parse error) for a
// line that is not JSON, -32600 (invalid request) for JSON that is not a
// JSON-RPC message. So lines are checked before the SDK reads them; the
// answers are written between the SDK's own messages (each is written with
// one Write call, under the same lock).

// maxStdioLine is the longest line accepted: the SDK's own cap.
const maxStdioLine = mcp.DefaultMaxLineLength

// lockedWriter serializes whole writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

// stdioFilter passes the valid lines of r on, and answers the others on out.
type stdioFilter struct {
	rc      io.ReadCloser
	r       *bufio.Reader
	out     io.Writer
	pending []byte
	onBad   func(code int64, why string)
}

func newStdioFilter(r io.ReadCloser, out io.Writer, onBad func(int64, string)) *stdioFilter {
	return &stdioFilter{rc: r, r: bufio.NewReaderSize(r, 64<<10), out: out, onBad: onBad}
}

func (f *stdioFilter) Close() error { return f.rc.Close() }

func (f *stdioFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		line, tooLong, err := f.readLine()
		if len(line) > 0 || tooLong {
			if ok := f.check(line, tooLong); ok {
				f.pending = line
				break
			}
		}
		if err != nil {
			return 0, err
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// readLine returns the next line with its newline, or tooLong (the line
// read and dropped) when it is over maxStdioLine.
func (f *stdioFilter) readLine() (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := f.r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxStdioLine {
			tooLong = true
			buf = nil
		} else if !tooLong {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, tooLong, err
	}
}

// check reports whether line is a JSON-RPC message (or batch) the SDK can
// read; otherwise it answers it.
func (f *stdioFilter) check(line []byte, tooLong bool) bool {
	trimmed := bytes.TrimSpace(line)
	switch {
	case tooLong:
		f.answer(nil, jsonrpc.CodeParseError, fmt.Sprintf("Parse error: the line is over %d bytes", maxStdioLine))
		return false
	case len(trimmed) == 0:
		return false // a blank line: nothing to answer
	case !json.Valid(trimmed):
		f.answer(nil, jsonrpc.CodeParseError, "Parse error: the line is not JSON")
		return false
	}
	var msgs []json.RawMessage
	if trimmed[0] == '[' {
		if json.Unmarshal(trimmed, &msgs) != nil || len(msgs) == 0 {
			f.answer(nil, jsonrpc.CodeInvalidRequest, "Invalid Request: an empty or malformed batch")
			return false
		}
	} else {
		msgs = []json.RawMessage{trimmed}
	}
	for _, m := range msgs {
		if _, err := jsonrpc.DecodeMessage(m); err != nil {
			f.answer(idOf(m), jsonrpc.CodeInvalidRequest, "Invalid Request: "+err.Error())
			return false
		}
	}
	return true
}

// idOf is the id of a message that could not be decoded, when it has a
// usable one.
func idOf(m json.RawMessage) json.RawMessage {
	var v struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(m, &v) != nil || len(v.ID) == 0 {
		return nil
	}
	switch v.ID[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return v.ID
	}
	return nil
}

func (f *stdioFilter) answer(id json.RawMessage, code int64, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	f.out.Write(append(b, '\n'))
	if f.onBad != nil {
		f.onBad(code, msg)
	}
}
