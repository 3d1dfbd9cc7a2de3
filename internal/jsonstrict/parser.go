package jsonstrict

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the JSON type of a node.
type Kind uint8

const (
	KindInvalid Kind = iota
	KindNull
	KindFalse
	KindTrue
	KindNumber
	KindString
	KindArray
	KindObject
)

func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindFalse, KindTrue:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	case KindObject:
		return "object"
	}
	return "invalid"
}

const (
	flagEscaped  = 1 << iota // the string's text in the input holds escapes
	flagInKeybuf             // off/n point into Doc.keybuf (an unescaped member name)
)

// node is one value of the tape. Containers are followed by their contents:
// an object by key, value, key, value...; an array by its elements.
type node struct {
	kind  Kind
	flags uint8
	off   uint32 // start of the text: in the input, or in keybuf for flagInKeybuf
	n     uint32 // strings, numbers: text length; containers: member or element count
	end   uint32 // index of the first node after this value's subtree
}

// Doc is a parsed document: a flat tape of nodes indexed from 0 (the root).
// It points into the input bytes, which must not change while it is used, and
// it is reused by the next Parse of its [Parser].
type Doc struct {
	data   []byte
	nodes  []node
	keybuf []byte
}

// Kind returns the kind of node i.
func (d *Doc) Kind(i int) Kind { return d.nodes[i].kind }

// Count returns the number of members of an object or elements of an array.
func (d *Doc) Count(i int) int { return int(d.nodes[i].n) }

// Next returns the index of the node after value i and all it contains: for
// an object member whose key is at k, its value is at k+1 and the next key at
// Next(k+1).
func (d *Doc) Next(i int) int { return int(d.nodes[i].end) }

// Raw returns the text of a number (its literal), or of a member name
// (unescaped), or of a string value as written between its quotes (escapes
// left in place; see [Doc.Str]). The bytes must not be modified.
func (d *Doc) Raw(i int) []byte {
	nd := &d.nodes[i]
	if nd.flags&flagInKeybuf != 0 {
		return d.keybuf[nd.off : nd.off+nd.n]
	}
	return d.data[nd.off : nd.off+nd.n]
}

// Str returns the unescaped text of a string node (a value or a name).
func (d *Doc) Str(i int) string {
	nd := &d.nodes[i]
	if nd.flags&flagEscaped != 0 && nd.flags&flagInKeybuf == 0 {
		return string(appendUnescaped(nil, d.Raw(i)))
	}
	return string(d.Raw(i))
}

// AppendStr appends the unescaped text of string node i (a value or a
// name) to dst: [Doc.Str] without making a string, for a reader that
// walks the tape once (the canonical digest).
func (d *Doc) AppendStr(dst []byte, i int) []byte {
	nd := &d.nodes[i]
	if nd.flags&flagEscaped != 0 && nd.flags&flagInKeybuf == 0 {
		return appendUnescaped(dst, d.Raw(i))
	}
	return append(dst, d.Raw(i)...)
}

// Value converts node i and its contents to Go values: map[string]any, []any,
// string, bool, nil and [Number].
func (d *Doc) Value(i int) any {
	nd := &d.nodes[i]
	switch nd.kind {
	case KindNull:
		return nil
	case KindFalse:
		return false
	case KindTrue:
		return true
	case KindNumber:
		return Number(d.Raw(i))
	case KindString:
		return d.Str(i)
	case KindArray:
		out := make([]any, 0, nd.n)
		for j := i + 1; j < int(nd.end); j = int(d.nodes[j].end) {
			out = append(out, d.Value(j))
		}
		return out
	case KindObject:
		out := make(map[string]any, nd.n)
		for j := i + 1; j < int(nd.end); j = int(d.nodes[j+1].end) {
			out[d.Str(j)] = d.Value(j + 1)
		}
		return out
	}
	return nil
}

// Parser parses documents into a [Doc] it reuses: after the first few calls a
// Parse allocates nothing. A Parser is not safe for concurrent use; pool them.
type Parser struct {
	doc      Doc
	names    []nameRef // the names of the open objects, for duplicate checks
	maxDepth int
}

// nameRef is a member name: its node, and its opening quote in the input.
type nameRef struct{ node, pos int32 }

// smallObject is the member count up to which duplicates are found by
// comparing each new name with the earlier ones; larger objects are sorted
// once, when they close, so a hostile object costs O(n log n), not O(n²).
const smallObject = 16

// Parse parses data strictly. The returned Doc is valid until the next Parse.
func (p *Parser) Parse(data []byte, opts *Options) (*Doc, error) {
	d := &p.doc
	d.data = data
	d.nodes = d.nodes[:0]
	d.keybuf = d.keybuf[:0]
	p.names = p.names[:0]
	if max := opts.maxBytes(); len(data) > max {
		return nil, &Error{Err: ErrTooLarge, Offset: max, Detail: "over the limit of " + strconv.Itoa(max) + " bytes"}
	}
	p.maxDepth = opts.maxDepth()
	i := skipSpace(data, 0)
	i, err := p.value(i, 0)
	if err != nil {
		return nil, err
	}
	if i = skipSpace(data, i); i != len(data) {
		return nil, &Error{Err: ErrTrailingData, Offset: i}
	}
	return d, nil
}

func (p *Parser) value(i, depth int) (int, error) {
	data := p.doc.data
	if i >= len(data) {
		return i, syntaxError(i, "unexpected end of input")
	}
	switch c := data[i]; {
	case c == '{':
		return p.object(i, depth+1)
	case c == '[':
		return p.array(i, depth+1)
	case c == '"':
		end, flags, err := scanString(data, i+1)
		if err != nil {
			return end, err
		}
		p.push(node{kind: KindString, flags: flags, off: uint32(i + 1), n: uint32(end - i - 1)})
		return end + 1, nil
	case c == '-' || (c >= '0' && c <= '9'):
		end, err := scanNumber(data, i)
		if err != nil {
			return end, err
		}
		p.push(node{kind: KindNumber, off: uint32(i), n: uint32(end - i)})
		return end, nil
	case c == 't':
		return p.literal(i, "true", KindTrue)
	case c == 'f':
		return p.literal(i, "false", KindFalse)
	case c == 'n':
		return p.literal(i, "null", KindNull)
	}
	return i, syntaxError(i, "unexpected character "+quoteByte(data[i]))
}

// push appends a scalar node.
func (p *Parser) push(nd node) {
	nd.end = uint32(len(p.doc.nodes) + 1)
	p.doc.nodes = append(p.doc.nodes, nd)
}

func (p *Parser) literal(i int, word string, k Kind) (int, error) {
	data := p.doc.data
	if len(data)-i < len(word) || string(data[i:i+len(word)]) != word {
		return i, syntaxError(i, "invalid literal, expected "+word)
	}
	p.push(node{kind: k, off: uint32(i), n: uint32(len(word))})
	return i + len(word), nil
}

func (p *Parser) array(i, depth int) (int, error) {
	if depth > p.maxDepth {
		return i, &Error{Err: ErrTooDeep, Offset: i, Detail: "over the limit of " + strconv.Itoa(p.maxDepth)}
	}
	data := p.doc.data
	at := len(p.doc.nodes)
	p.doc.nodes = append(p.doc.nodes, node{kind: KindArray, off: uint32(i)})
	i = skipSpace(data, i+1)
	count := 0
	if i < len(data) && data[i] == ']' {
		i++
	} else {
		for {
			var err error
			if i, err = p.value(i, depth); err != nil {
				return i, err
			}
			count++
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, syntaxError(i, "unexpected end of input in array")
			}
			if data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if data[i] == ']' {
				i++
				break
			}
			return i, syntaxError(i, "expected ',' or ']' in array, found "+quoteByte(data[i]))
		}
	}
	nd := &p.doc.nodes[at]
	nd.n = uint32(count)
	nd.end = uint32(len(p.doc.nodes))
	return i, nil
}

func (p *Parser) object(i, depth int) (int, error) {
	if depth > p.maxDepth {
		return i, &Error{Err: ErrTooDeep, Offset: i, Detail: "over the limit of " + strconv.Itoa(p.maxDepth)}
	}
	d := &p.doc
	data := d.data
	at := len(d.nodes)
	d.nodes = append(d.nodes, node{kind: KindObject, off: uint32(i)})
	frame := len(p.names)
	i = skipSpace(data, i+1)
	count := 0
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				if i >= len(data) {
					return i, syntaxError(i, "unexpected end of input in object")
				}
				return i, syntaxError(i, "expected a member name, found "+quoteByte(data[i]))
			}
			end, flags, err := scanString(data, i+1)
			if err != nil {
				return end, err
			}
			name := node{kind: KindString, flags: flags, off: uint32(i + 1), n: uint32(end - i - 1)}
			if flags&flagEscaped != 0 {
				off := len(d.keybuf)
				d.keybuf = appendUnescaped(d.keybuf, data[i+1:end])
				name.flags |= flagInKeybuf
				name.off, name.n = uint32(off), uint32(len(d.keybuf)-off)
			}
			nameAt := len(d.nodes)
			name.end = uint32(nameAt + 1)
			d.nodes = append(d.nodes, name)
			if count < smallObject {
				for _, prev := range p.names[frame:] {
					if bytes.Equal(d.Raw(int(prev.node)), d.Raw(nameAt)) {
						return i, &Error{Err: ErrDuplicateName, Offset: i, Detail: quoteName(d.Raw(nameAt))}
					}
				}
			}
			p.names = append(p.names, nameRef{int32(nameAt), int32(i)})
			i = skipSpace(data, end+1)
			if i >= len(data) || data[i] != ':' {
				return i, syntaxError(i, "expected ':' after member name")
			}
			if i, err = p.value(skipSpace(data, i+1), depth); err != nil {
				return i, err
			}
			count++
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, syntaxError(i, "unexpected end of input in object")
			}
			if data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if data[i] == '}' {
				i++
				break
			}
			return i, syntaxError(i, "expected ',' or '}' in object, found "+quoteByte(data[i]))
		}
	}
	if count > smallObject {
		if err := p.checkDuplicates(p.names[frame:]); err != nil {
			return i, err
		}
	}
	p.names = p.names[:frame]
	nd := &d.nodes[at]
	nd.n = uint32(count)
	nd.end = uint32(len(d.nodes))
	return i, nil
}

// checkDuplicates sorts the names of one large object and reports the
// duplicate whose second occurrence comes first in the input, so the
// reported error does not depend on the sort.
func (p *Parser) checkDuplicates(names []nameRef) error {
	d := &p.doc
	slices.SortFunc(names, func(a, b nameRef) int {
		if c := bytes.Compare(d.Raw(int(a.node)), d.Raw(int(b.node))); c != 0 {
			return c
		}
		return int(a.pos - b.pos)
	})
	dup := -1
	for k := 1; k < len(names); k++ {
		if bytes.Equal(d.Raw(int(names[k-1].node)), d.Raw(int(names[k].node))) && (dup < 0 || names[k].pos < names[dup].pos) {
			dup = k
		}
	}
	if dup < 0 {
		return nil
	}
	return &Error{Err: ErrDuplicateName, Offset: int(names[dup].pos), Detail: quoteName(d.Raw(int(names[dup].node)))}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plain marks the bytes a string may hold as they are: printable ASCII other
// than '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return
}()

// scanString checks a string whose opening quote is at i-1 and returns the
// index of its closing quote.
func scanString(data []byte, i int) (int, uint8, error) {
	var flags uint8
	for {
		for i < len(data) && plain[data[i]] {
			i++
		}
		if i >= len(data) {
			return i, flags, syntaxError(i, "unterminated string")
		}
		switch c := data[i]; {
		case c == '"':
			return i, flags, nil
		case c == '\\':
			flags |= flagEscaped
			var err error
			if i, err = scanEscape(data, i); err != nil {
				return i, flags, err
			}
		case c < 0x20:
			return i, flags, syntaxError(i, "control character in string")
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size <= 1 {
				return i, flags, &Error{Err: ErrInvalidUTF8, Offset: i}
			}
			i += size
		}
	}
}

// scanEscape checks the escape at data[i] == '\\' and returns the index after it.
func scanEscape(data []byte, i int) (int, error) {
	if i+1 >= len(data) {
		return i, syntaxError(i, "unterminated escape")
	}
	switch data[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, nil
	case 'u':
		r, ok := hex4(data, i+2)
		if !ok {
			return i, syntaxError(i, "invalid \\u escape")
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return i, &Error{Err: ErrLoneSurrogate, Offset: i, Detail: "low surrogate without a high one"}
		case r >= 0xD800 && r <= 0xDBFF:
			if i+7 >= len(data) || data[i+6] != '\\' || data[i+7] != 'u' {
				return i, &Error{Err: ErrLoneSurrogate, Offset: i, Detail: "high surrogate not followed by a low one"}
			}
			lo, ok := hex4(data, i+8)
			if !ok {
				return i + 6, syntaxError(i+6, "invalid \\u escape")
			}
			if lo < 0xDC00 || lo > 0xDFFF {
				return i, &Error{Err: ErrLoneSurrogate, Offset: i, Detail: "high surrogate not followed by a low one"}
			}
			return i + 12, nil
		}
		return i + 6, nil
	}
	return i, syntaxError(i, "invalid escape character "+quoteByte(data[i+1]))
}

func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendUnescaped appends the text of an already checked string body.
func appendUnescaped(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		c := src[i]
		if c != '\\' {
			j := i + 1
			for j < len(src) && src[j] != '\\' {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		switch e := src[i+1]; e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(src, i+2)
			if r >= 0xD800 && r <= 0xDBFF {
				lo, _ := hex4(src, i+8)
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			i += 6
			continue
		default: // '"', '\\', '/'
			dst = append(dst, e)
		}
		i += 2
	}
	return dst
}

// scanNumber checks the RFC 8259 number grammar from data[i] and returns the
// index after the literal.
func scanNumber(data []byte, i int) (int, error) {
	start := i
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = skipDigits(data, i+1)
	default:
		return i, syntaxError(start, "invalid number")
	}
	if i < len(data) && data[i] == '.' {
		j := skipDigits(data, i+1)
		if j == i+1 {
			return j, syntaxError(start, "invalid number: no digit after '.'")
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := skipDigits(data, i)
		if j == i {
			return j, syntaxError(start, "invalid number: no digit in exponent")
		}
		i = j
	}
	return i, nil
}

func skipDigits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

func syntaxError(i int, detail string) error {
	return &Error{Err: ErrSyntax, Offset: i, Detail: detail}
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	const hex = "0123456789abcdef"
	return "byte 0x" + string([]byte{hex[c>>4], hex[c&15]})
}

func quoteName(b []byte) string {
	const max = 64
	s := string(b)
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "…"
	}
	return strconv.Quote(s)
}
