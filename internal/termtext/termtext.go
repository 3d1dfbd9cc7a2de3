// Package termtext makes text that Backplane did not write (a caller's
// arguments, an upstream server's tool names and descriptions, a tool's
// output, a file's content in a diff) safe to show to a person: on a
// terminal, in a log line, in the console's pages.
//
// It promises that what [Line], [Block], [JSON] and [Markup] return holds
// no byte a terminal acts on rather than shows: no C0 control
// (U+0000-U+001F; [Block] and [Markup] keep '\n' and '\t', [JSON] '\n'
// only), no DEL, no
// C1 control (U+0080-U+009F), no format character (Unicode category Cf:
// the bidirectional embeddings, overrides and isolates U+202A-U+202E and
// U+2066-U+2069, the zero-width characters U+200B-U+200F, U+2060-U+2064,
// U+FEFF, the tag characters U+E0001-U+E007F, ...), no line or paragraph
// separator (U+2028, U+2029), no U+FFFD, and no byte that is not part of
// valid UTF-8. Each is written visibly instead: \xHH for a C0 control, DEL
// or a stray byte, \uHHHH (or \U00HHHHHH) for the others ([JSON] writes
// JSON's own escapes), so "rm -rf x\x1b[2K\x0dgit status" is what the
// operator reads, not "git status".
//
// The escaping of [Line] and [Block] is reversible: a backslash is doubled
// exactly when what follows it would read as one of these escapes (or as
// "\\"), so two different texts never look the same. Every other
// backslash is left as it is, so shell commands and Windows paths read as
// they were written.
//
// It does not make text honest: look-alike letters (homoglyphs), combining
// marks and letters that render as blank (such as U+3164) are shown as they
// are.
package termtext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line returns s as one line: every character listed in the package
// documentation, '\n' and '\t' included, is escaped. Use it for a field of
// a table or a log line, where a newline could forge a row.
func Line(s string) string { return escape(s, false) }

// Block returns s as a block of lines: as [Line], except that '\n' stays a
// newline ('\r' is escaped, so no line can overwrite another) and '\t' a
// tab (it only moves the cursor right, over nothing written yet on the
// line: it can hide nothing, and a diff of indented code reads as the
// file does). Use it for a command, a description or a diff printed on
// lines of its own.
func Block(s string) string { return escape(s, true) }

// kept reports whether the ASCII control c stays as it is in a block.
func kept(c byte, block bool) bool { return block && (c == '\n' || c == '\t') }

// Unsafe reports whether r is written escaped: a control, a format
// character, a line or paragraph separator, or U+FFFD (which also stands
// for a stray byte in decoding).
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f:
		return true
	case r < 0x80:
		return false
	case r < 0xa0:
		return true // C1
	}
	return r == utf8.RuneError || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

const hexDigits = "0123456789abcdef"

func escape(s string, block bool) string {
	if clean(s, block) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' {
			if escapeLike(s[i+1:], block) {
				b.WriteByte('\\')
			}
			b.WriteByte('\\')
			i++
			continue
		}
		if c < utf8.RuneSelf {
			if (c < 0x20 && !kept(c, block)) || c == 0x7f {
				b.WriteString(`\x`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			} else {
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			// Not UTF-8: the byte itself, which a terminal in an 8-bit
			// mode could take for a C1 control.
			b.WriteString(`\x`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		case Unsafe(r):
			writeRune(&b, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// writeRune writes r as \uHHHH, or \U00HHHHHH beyond the BMP.
func writeRune(b *strings.Builder, r rune) {
	digits := 4
	if r > 0xffff {
		digits = 8
		b.WriteString(`\U`)
	} else {
		b.WriteString(`\u`)
	}
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
}

// clean reports whether s needs no escaping: the common case, which then
// costs no copy.
func clean(s string, block bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			if escapeLike(s[i+1:], block) {
				return false
			}
		case c < 0x20:
			if !kept(c, block) {
				return false
			}
		case c == 0x7f:
			return false
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRuneInString(s[i:])
			if Unsafe(r) { // RuneError included: a stray byte
				return false
			}
			i += n
			continue
		}
		i++
	}
	return true
}

// escapeLike reports whether rest, the text after a backslash, begins as
// an escape would once written: another backslash, a character that is
// itself escaped, x and 2 hex digits, u and 4, U and 8.
func escapeLike(rest string, block bool) bool {
	if rest == "" {
		return false
	}
	if r, _ := utf8.DecodeRuneInString(rest); Unsafe(r) && !(r < utf8.RuneSelf && kept(byte(r), block)) {
		return true
	}
	n := 0
	switch rest[0] {
	case '\\':
		return true
	case 'x':
		n = 2
	case 'u':
		n = 4
	case 'U':
		n = 8
	default:
		return false
	}
	if len(rest) < 1+n {
		return false
	}
	for _, c := range []byte(rest[1 : 1+n]) {
		if !isHex(c) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
