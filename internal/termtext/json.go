package termtext

import (
	"strings"
	"unicode/utf8"
)

// JSON returns the JSON text b with every character [Unsafe] would escape
// written as a JSON escape (\u007f, \u202e, a surrogate pair beyond the
// BMP): the same JSON value, safe on a terminal. encoding/json escapes the
// C0 controls itself but writes DEL, C1 controls and format characters
// raw. A byte that is not UTF-8 becomes \ufffd (JSON text is UTF-8, as
// encoding/json would have made it); a raw control outside a string (JSON
// whitespace) becomes a space, inside one it is escaped, except '\n',
// which is kept, so a JSON Lines stream keeps its lines.
func JSON(b []byte) []byte {
	if linesClean(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	inString := false
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\n':
			out = append(out, c)
			inString = false // a newline ends a JSON line, whatever came before
		case c == '"':
			out = append(out, c)
			inString = !inString
		case c == '\\' && inString && i+1 < len(b):
			out = append(out, c)
			i++
			if b[i] < utf8.RuneSelf && b[i] >= 0x20 && b[i] != 0x7f {
				out = append(out, b[i])
				i++
			}
			continue // anything else after the backslash is escaped below
		case c < 0x20 || c == 0x7f:
			if inString || c == 0x7f {
				out = appendU(out, rune(c))
			} else {
				out = append(out, ' ')
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
		default:
			r, n := utf8.DecodeRune(b[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				out = appendU(out, utf8.RuneError)
			case Unsafe(r):
				out = appendU(out, r)
			default:
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return out
}

// appendU appends r as \uHHHH, as a surrogate pair beyond the BMP.
func appendU(out []byte, r rune) []byte {
	if r > 0xffff {
		r -= 0x10000
		out = appendU(out, 0xd800+(r>>10))
		return appendU(out, 0xdc00+(r&0x3ff))
	}
	return append(out, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

// linesClean reports whether b holds nothing [Unsafe] but '\n'.
func linesClean(b []byte) bool { return cleanBytes(b, false) }

// blockClean reports whether b holds nothing [Unsafe] but '\n' and '\t'.
func blockClean(b []byte) bool { return cleanBytes(b, true) }

// cleanBytes reports whether b holds nothing [Unsafe] but '\n' (and '\t'
// with tabs).
func cleanBytes(b []byte, tabs bool) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n' && !(tabs && c == '\t')) || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if Unsafe(r) {
			return false
		}
		i += n
	}
	return true
}

// Markup returns the document b (a page html/template wrote) with every
// character [Unsafe] would escape, '\n' and '\t' aside (as [Block]: a tab
// in a diff shows as the file's spacing, and in HTML it is white space),
// written as its escape
// (\x1b, \u202e), so a page shows what a terminal shows. Backslashes are
// left alone, unlike [Line]'s: the document's own syntax (a script's
// string escapes) gives them a meaning, and what replaces a character is
// plain ASCII text, safe in every context html/template writes (text,
// attributes, scripts, where it reads as the same character).
func Markup(b []byte) []byte {
	if blockClean(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && !kept(c, true)) || c == 0x7f {
				out = append(out, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
		case Unsafe(r):
			var sb strings.Builder
			writeRune(&sb, r)
			out = append(out, sb.String()...)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
