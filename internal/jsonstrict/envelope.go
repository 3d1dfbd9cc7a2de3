package jsonstrict

import (
	"errors"
	"strconv"
)

// Envelopes: a JSON document that carries other documents (a batch request
// line carrying a schema and arguments, a tools/list catalog carrying tool
// entries and their input schemas) is taken apart without judging what it
// carries. The envelope's own structure and member names are checked
// strictly; each carried value is checked for RFC 8259 syntax only and
// returned as its exact bytes, so that its own faults (a duplicate member,
// invalid UTF-8, a lone surrogate) are judged by whoever validates it, at the
// right stage, and not refused or smoothed over here.

// ErrKind is wrapped by the envelope functions when the document is not the
// kind of value asked for.
var ErrKind = errors.New("unexpected kind of JSON value")

// Member is one member of an envelope object.
type Member struct {
	Name string // unescaped
	Raw  []byte // the value's exact text: a sub-slice of the input
}

// Members returns the members of the JSON object data in document order,
// duplicates included (what a duplicate means is the caller's decision).
// Member names are checked strictly; values by syntax only (see above).
// opts bounds the document's size and nesting (the envelope's own included).
func Members(data []byte, opts *Options) ([]Member, error) {
	i, err := envelopeStart(data, opts, '{')
	if err != nil {
		return nil, err
	}
	maxDepth := opts.maxDepth()
	var members []Member
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return members, envelopeEnd(data, i+1)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return nil, syntaxError(i, "expected a member name")
		}
		end, flags, err := scanString(data, i+1)
		if err != nil {
			return nil, err
		}
		name := string(data[i+1 : end])
		if flags&flagEscaped != 0 {
			name = string(appendUnescaped(nil, data[i+1:end]))
		}
		i = skipSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return nil, syntaxError(i, "expected ':' after member name")
		}
		start := skipSpace(data, i+1)
		if i, err = skipValue(data, start, maxDepth-1); err != nil {
			return nil, err
		}
		if members == nil {
			// Room for a JSON-RPC message's or an MCP result's members
			// at once, rather than growing 1, 2, 4.
			members = make([]Member, 0, 4)
		}
		members = append(members, Member{Name: name, Raw: data[start:i]})
		i = skipSpace(data, i)
		switch {
		case i < len(data) && data[i] == ',':
			i = skipSpace(data, i+1)
		case i < len(data) && data[i] == '}':
			return members, envelopeEnd(data, i+1)
		default:
			return nil, syntaxError(i, "expected ',' or '}' in object")
		}
	}
}

// Elements returns the elements of the JSON array data as their exact
// bytes, each checked by syntax only; opts as for [Members].
func Elements(data []byte, opts *Options) ([][]byte, error) {
	i, err := envelopeStart(data, opts, '[')
	if err != nil {
		return nil, err
	}
	maxDepth := opts.maxDepth()
	elems := [][]byte{}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return elems, envelopeEnd(data, i+1)
	}
	for {
		start := i
		if i, err = skipValue(data, start, maxDepth-1); err != nil {
			return nil, err
		}
		elems = append(elems, data[start:i])
		i = skipSpace(data, i)
		switch {
		case i < len(data) && data[i] == ',':
			i = skipSpace(data, i+1)
		case i < len(data) && data[i] == ']':
			return elems, envelopeEnd(data, i+1)
		default:
			return nil, syntaxError(i, "expected ',' or ']' in array")
		}
	}
}

// SyntaxKind checks that data is one JSON document by RFC 8259 syntax alone
// (as for the values of [Members]) and returns its kind.
func SyntaxKind(data []byte, opts *Options) (Kind, error) {
	if max := opts.maxBytes(); len(data) > max {
		return KindInvalid, &Error{Err: ErrTooLarge, Offset: max, Detail: "over the limit of " + strconv.Itoa(max) + " bytes"}
	}
	i := skipSpace(data, 0)
	end, err := skipValue(data, i, opts.maxDepth())
	if err != nil {
		return KindInvalid, err
	}
	if err := envelopeEnd(data, end); err != nil {
		return KindInvalid, err
	}
	return kindOfByte(data[i]), nil
}

// Compact reports whether data, taken as JSON text, has no whitespace
// outside its strings and no string left open: what encoding/json's
// Compact would leave as it is, were data valid (which Compact does not
// check: [SyntaxKind] does). For writers that copy a value's bytes when
// compacting them would change nothing.
func Compact(data []byte) bool {
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return !inString
}

func kindOfByte(c byte) Kind {
	switch c {
	case '{':
		return KindObject
	case '[':
		return KindArray
	case '"':
		return KindString
	case 't':
		return KindTrue
	case 'f':
		return KindFalse
	case 'n':
		return KindNull
	}
	return KindNumber
}

// envelopeStart checks the size, then that the whole document is valid
// syntax of the wanted kind; it returns the index of the opening delimiter.
func envelopeStart(data []byte, opts *Options, open byte) (int, error) {
	k, err := SyntaxKind(data, opts)
	if err != nil {
		return 0, err
	}
	i := skipSpace(data, 0)
	if data[i] != open {
		want := KindObject
		if open == '[' {
			want = KindArray
		}
		return 0, &Error{Err: ErrKind, Offset: i, Detail: "want " + articled(want) + ", found " + articled(k)}
	}
	return i, nil
}

func articled(k Kind) string {
	switch k {
	case KindObject, KindArray:
		return "an " + k.String()
	case KindNull:
		return "null"
	}
	return "a " + k.String()
}

func envelopeEnd(data []byte, i int) error {
	if i = skipSpace(data, i); i != len(data) {
		return &Error{Err: ErrTrailingData, Offset: i}
	}
	return nil
}

// skipValue checks the syntax of the value at data[i] and returns the index
// after it. It is iterative (a stack of open containers), so a deep document
// costs no recursion; maxDepth bounds the nesting.
func skipValue(data []byte, i, maxDepth int) (int, error) {
	var stack []byte // the open containers' closing delimiters
	var err error
	for {
		// A value starts at i.
		i = skipSpace(data, i)
		if i >= len(data) {
			return i, syntaxError(i, "unexpected end of input")
		}
		switch c := data[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return i, &Error{Err: ErrTooDeep, Offset: i, Detail: "over the limit of " + strconv.Itoa(maxDepth)}
			}
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == closer {
				i++
				break // an empty container is a complete value
			}
			stack = append(stack, closer)
			if c == '{' {
				if i, err = skipName(data, i); err != nil {
					return i, err
				}
			}
			continue // its first member's or element's value starts at i
		case c == '"':
			if i, err = skipStringSyntax(data, i+1); err != nil {
				return i, err
			}
			i++
		case c == 't':
			if i, err = skipLiteral(data, i, "true"); err != nil {
				return i, err
			}
		case c == 'f':
			if i, err = skipLiteral(data, i, "false"); err != nil {
				return i, err
			}
		case c == 'n':
			if i, err = skipLiteral(data, i, "null"); err != nil {
				return i, err
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if i, err = scanNumber(data, i); err != nil {
				return i, err
			}
		default:
			return i, syntaxError(i, "unexpected "+quoteByte(c))
		}
		// A value ended at i: close the containers it completes, or go on
		// to the next member or element.
		for {
			if len(stack) == 0 {
				return i, nil
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, syntaxError(i, "unexpected end of input")
			}
			top := stack[len(stack)-1]
			if data[i] == top {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if data[i] != ',' {
				return i, syntaxError(i, "expected ',' or "+quoteByte(top)+", found "+quoteByte(data[i]))
			}
			i = skipSpace(data, i+1)
			if top == '}' {
				if i, err = skipName(data, i); err != nil {
					return i, err
				}
			}
			break
		}
	}
}

// skipName checks a member name and its colon at data[i] and returns the
// index after the colon.
func skipName(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '"' {
		return i, syntaxError(i, "expected a member name")
	}
	i, err := skipStringSyntax(data, i+1)
	if err != nil {
		return i, err
	}
	i = skipSpace(data, i+1)
	if i >= len(data) || data[i] != ':' {
		return i, syntaxError(i, "expected ':' after member name")
	}
	return i + 1, nil
}

// skipStringSyntax checks a string's syntax only (escapes well formed, no
// control character) from after its opening quote, and returns the index
// of its closing quote. UTF-8 and surrogates are not judged.
func skipStringSyntax(data []byte, i int) (int, error) {
	for i < len(data) {
		switch c := data[i]; {
		case c == '"':
			return i, nil
		case c == '\\':
			if i+1 >= len(data) {
				return i, syntaxError(i, "unterminated escape")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(data, i+2); !ok {
					return i, syntaxError(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, syntaxError(i, "invalid escape character "+quoteByte(data[i+1]))
			}
		case c < 0x20:
			return i, syntaxError(i, "control character in string")
		default:
			i++
		}
	}
	return i, syntaxError(i, "unterminated string")
}

func skipLiteral(data []byte, i int, word string) (int, error) {
	if len(data)-i < len(word) || string(data[i:i+len(word)]) != word {
		return i, syntaxError(i, "invalid literal")
	}
	return i + len(word), nil
}
