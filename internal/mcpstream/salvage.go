package mcpstream

import (
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// What a client connection (one without Options.OnMalformed: the gateway
// speaking to an upstream server) does with a line it cannot decode: a
// line too deep, too large, or not a valid message must fail only the
// request it answers, never the connection and every call in flight on it
// (issue 22, item 8). The line's top-level "id" is recovered by a shallow
// scan (idScan), which tracks only strings and bracket depth and so takes
// any depth and any size in constant memory.

// ErrMalformedResponse is wrapped by the error of a response the
// connection made up for a line that answers a request of ours (it carries
// the request's id) but could not be decoded: the request fails with it,
// the connection reads on.
var ErrMalformedResponse = errors.New("mcpstream: the peer's answer could not be read")

// ErrBrokenFraming is wrapped by the error that ends a client connection
// when a line is a torn JSON value (an unterminated string, unbalanced
// brackets, bytes after the value): the lines are no longer messages, and
// what follows cannot be trusted to be one.
var ErrBrokenFraming = errors.New("mcpstream: the stream is not one JSON value per line")

// maxScannedID bounds the bytes of an id the scan keeps: an id longer than
// this is not recovered.
const maxScannedID = 1024

// idScan is a streaming shallow scan of one line for the members "id" and
// "method" of its top-level object.
type idScan struct {
	started   bool // the first non-space byte was seen
	bracketed bool // ... and it was '{' or '['
	object    bool // ... and it was '{'
	done      bool // the top-level value ended
	broken    bool // a byte after the top-level value, or a stray bracket

	depth     int
	inString  bool
	escaped   bool
	phase     int  // at depth 1: what comes next (phase* below)
	keyIsID   bool // the key being read (or just read) is "id"
	keyIsMeth bool // ... is "method"
	keyLen    int
	keyBad    bool // the key has an escape: it is not matched

	capturing bool // the value of "id" is being kept
	value     []byte
	ids       int  // how many "id" members
	idBad     bool // an "id" that is nested or too long
	method    bool // a "method" member was seen
}

const (
	phaseKey   = iota // a member name, or '}'
	phaseColon        // ':'
	phaseValue        // the member's value
	phaseAfter        // ',' or '}'
)

// feed scans the next bytes of the line.
func (s *idScan) feed(b []byte) {
	for _, c := range b {
		s.byte(c)
	}
}

func (s *idScan) byte(c byte) {
	if s.inString {
		s.stringByte(c)
		return
	}
	space := c == ' ' || c == '\t' || c == '\n' || c == '\r'
	if !s.started {
		if space {
			return
		}
		s.started = true
		s.object = c == '{'
		s.bracketed = s.object || c == '['
		if !s.bracketed {
			s.done = true // a scalar or stray text: nothing to scan
			return
		}
		s.depth = 1
		return
	}
	if s.done {
		if !space && s.bracketed {
			s.broken = true
		}
		return
	}
	top := s.object && s.depth == 1
	if s.capturing && (space || c == ',' || c == '}') {
		s.endValue()
	}
	switch c {
	case '"':
		s.inString = true
		if top && s.phase == phaseKey {
			s.keyIsID, s.keyIsMeth, s.keyLen, s.keyBad = true, true, 0, false
		} else if top && s.phase == phaseValue && s.keyIsID {
			s.capturing = true
			s.value = append(s.value[:0], c)
		}
	case '{', '[':
		if top && s.phase == phaseValue && s.keyIsID {
			s.idBad = true // an object or array is no id
		}
		s.depth++
	case '}', ']':
		s.depth--
		switch {
		case s.depth < 0:
			s.broken = true
			s.done = true
		case s.depth == 0:
			s.done = true
		case s.object && s.depth == 1:
			s.phase = phaseAfter
		}
	case ':':
		if top && s.phase == phaseColon {
			s.phase = phaseValue
		}
	case ',':
		if top {
			s.phase = phaseKey
		}
	default:
		if top && s.phase == phaseValue && !space {
			// A number, true, false or null.
			if s.keyIsID && !s.capturing {
				s.capturing = true
				s.value = s.value[:0]
			}
			if s.capturing {
				s.keep(c)
			}
		}
	}
}

func (s *idScan) stringByte(c byte) {
	top := s.object && s.depth == 1
	key := top && s.phase == phaseKey
	switch {
	case s.escaped:
		s.escaped = false
	case c == '\\':
		s.escaped = true
		if key {
			s.keyBad = true
		}
	case c == '"':
		s.inString = false
		if key {
			s.keyIsID = !s.keyBad && s.keyLen == 2 && s.keyIsID
			s.keyIsMeth = !s.keyBad && s.keyLen == 6 && s.keyIsMeth
			if s.keyIsID {
				s.ids++
			}
			if s.keyIsMeth {
				s.method = true
			}
			s.phase = phaseColon
			return
		}
		if s.capturing {
			s.keep(c)
			s.endValue()
			return
		}
		if top && s.phase == phaseValue {
			s.phase = phaseAfter
		}
		return
	}
	if key {
		if s.keyLen < 6 {
			s.keyIsID = s.keyIsID && s.keyLen < 2 && c == "id"[s.keyLen]
			s.keyIsMeth = s.keyIsMeth && c == "method"[s.keyLen]
		} else {
			s.keyIsID, s.keyIsMeth = false, false
		}
		s.keyLen++
		return
	}
	if s.capturing {
		s.keep(c)
	}
}

func (s *idScan) keep(c byte) {
	if len(s.value) >= maxScannedID {
		s.idBad = true
		return
	}
	s.value = append(s.value, c)
}

func (s *idScan) endValue() {
	s.capturing = false
	s.phase = phaseAfter
}

// framingBroken reports whether the line, scanned whole, is a torn JSON
// value: it began as an object or array and did not end as one.
func (s *idScan) framingBroken() bool {
	if !s.bracketed {
		return false // blank, or a scalar or text (no brackets to balance)
	}
	return s.broken || !s.done || s.inString
}

// id is the line's top-level id, when it has exactly one of a valid kind.
func (s *idScan) id() (jsonrpc.ID, bool) {
	if !s.object || s.ids != 1 || s.idBad || s.capturing || len(s.value) == 0 {
		return jsonrpc.ID{}, false
	}
	id, err := idOf(s.value)
	if err != nil || !id.IsValid() {
		return jsonrpc.ID{}, false
	}
	return id, true
}

// salvage is what a client connection makes of a line it could not decode
// (why): the made-up answer to the request of ours whose id it carries; an
// error answer to the peer's request whose id it carries (it is a request:
// it has a method) and nothing more; or nothing, the line dropped, when no
// id can be recovered. A torn line ends the connection (ErrBrokenFraming).
func (c *conn) salvage(s *idScan, why error) incoming {
	if s.framingBroken() {
		return incoming{err: fmt.Errorf("%w: %w", ErrBrokenFraming, why)}
	}
	id, ok := s.id()
	if ok && s.method {
		// A request of the peer is answered under its id: only one the
		// answer can carry back as sent (requestID), else it is dropped.
		_, err := requestID(s.value)
		ok = err == nil
	}
	switch {
	case ok && !s.method:
		return incoming{msgs: []jsonrpc.Message{&jsonrpc.Response{ID: id, Error: fmt.Errorf("%w: %w", ErrMalformedResponse, why)}}}
	case ok:
		code := int64(jsonrpc.CodeInvalidRequest)
		if errors.Is(why, ErrNotJSON) || errors.Is(why, ErrTooLarge) {
			code = jsonrpc.CodeParseError
		}
		c.writeError(s.value, code, why)
		c.dropped(fmt.Errorf("a request of the peer answered with error %d: %w", code, why))
	default:
		c.dropped(fmt.Errorf("a line without a usable id dropped: %w", why))
	}
	return incoming{}
}

// dropped tells Options.OnDropped.
func (c *conn) dropped(err error) {
	if c.opts.OnDropped != nil {
		c.opts.OnDropped(err)
	}
}
