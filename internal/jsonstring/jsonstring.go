// Package jsonstring appends a Go string to a buffer as a JSON string,
// byte for byte as one of the standard library's two encoders writes it,
// without reflection or an allocation of its own: for the paths that write
// JSON by hand (the audit's steps list, the server's fast results) and
// must stay the same bytes as the encoder they stand in for.
//
// Both escapings write \" \\ \n \r \t by name, the other bytes below 0x20
// as \u00XX, U+2028 and U+2029 as \u2028 and \u2029 (for JavaScript), and
// each byte of invalid UTF-8 as \ufffd; everything else is copied. They
// differ in what encoding/json added to log/slog's rules: see [Slog] and
// [HTML].
package jsonstring

import (
	"unicode/utf8"
	"unsafe"
)

// Escaping is one of the two ways of writing a JSON string.
type Escaping uint8

const (
	// Slog is how log/slog's JSONHandler writes a string: <, > and & as
	// they are, \b and \f as \u0008 and \u000c. The audit log's events are
	// slog records, and its hand-written parts match the rest.
	Slog Escaping = iota
	// HTML is how encoding/json's Marshal writes a string (HTML escaping
	// on, as the MCP SDK's messages are encoded): <, > and & as \u003c,
	// \u003e and \u0026, \b and \f by name.
	HTML
)

// plain[e][c] is true for the ASCII bytes e copies as they are.
var plain = func() (t [2][utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		t[Slog][c] = c != '"' && c != '\\'
		t[HTML][c] = t[Slog][c] && c != '<' && c != '>' && c != '&'
	}
	return t
}()

const hex = "0123456789abcdef"

// Append appends s to dst as a JSON string, quoted, escaped as e says.
func (e Escaping) Append(dst []byte, s string) []byte {
	return append(e.appendEscaped(append(dst, '"'), s), '"')
}

// AppendBytes is Append for text held as bytes, which it reads in place
// (no copy into a string).
func (e Escaping) AppendBytes(dst, s []byte) []byte {
	return append(e.AppendEscaped(append(dst, '"'), s), '"')
}

// AppendEscaped appends s escaped as e says, without the quotes: for a
// string written in pieces. Each piece must end on a character's boundary
// (a rune split in two would be written as two invalid bytes).
func (e Escaping) AppendEscaped(dst, s []byte) []byte {
	// The string views s only for the call: appendEscaped neither keeps
	// it nor runs while s could change.
	return e.appendEscaped(dst, unsafe.String(unsafe.SliceData(s), len(s)))
}

func (e Escaping) appendEscaped(dst []byte, s string) []byte {
	safe := &plain[e]
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				if e == HTML {
					dst = append(dst, '\\', 'b')
				} else {
					dst = append(dst, `\u0008`...)
				}
			case '\f':
				if e == HTML {
					dst = append(dst, '\\', 'f')
				} else {
					dst = append(dst, `\u000c`...)
				}
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}
