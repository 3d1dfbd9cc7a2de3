// Package resuri normalises the URI of an upstream resource before a policy
// glob is matched against it and before it is forwarded, so that the URI a
// grant was decided on is the URI the upstream reads.
//
// [Normalize] applies RFC 3986's syntax-based normalisation (section 6.2.2):
//
//   - the scheme and the host are lowercased;
//   - percent-encodings are made uppercase hex (%2f becomes %2F), and
//     those of unreserved characters (letters, digits, "-", ".", "_", "~")
//     are decoded, so %2e%2e is the dot segment ".." it spells;
//   - the path's dot segments are removed (section 5.2.4's
//     remove_dot_segments), so rt://files/a/../b is rt://files/b and
//     rt://files/.. is rt://files/: a glob rt://files/* can no longer be
//     climbed out of. This is done for every path, hierarchical or not.
//
// It refuses, rather than rewrites, what no normalisation makes safe: a
// URI without a scheme, invalid UTF-8, control characters (C0, DEL, C1), a
// backslash (some servers read it as a separator; RFC 3986 does not allow
// it), a malformed percent-encoding, and a path segment that decodes to
// dot segments through an encoded "/" or "\" (..%2Fsecret, x%5C..) or holds
// an encoded NUL: an upstream that decodes the path before resolving it
// would climb where the glob never matched. Encoded separators that make
// no dot segment (owner%2Frepo) are kept.
//
// Not covered: the query and the fragment are only percent-normalised (an
// upstream that reads a path out of a query parameter is not protected);
// scheme-specific rules (default ports, an empty path as "/") are not
// applied; characters RFC 3986 does not allow but that carry no structure
// (spaces, non-ASCII text of an IRI) are kept as they are; an upstream that
// decodes twice (%252e) is not protected.
//
// The package uses the standard library only.
package resuri

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every refusal.
var ErrInvalid = errors.New("invalid resource URI")

// Normalize returns the normal form of uri, or an error wrapping
// ErrInvalid. Normalize of its own result returns it unchanged.
func Normalize(uri string) (string, error) {
	if !utf8.ValidString(uri) {
		return "", fmt.Errorf("%w: not UTF-8", ErrInvalid)
	}
	for _, r := range uri {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return "", fmt.Errorf("%w: a control character U+%04X", ErrInvalid, r)
		case r == '\\':
			return "", fmt.Errorf("%w: a backslash", ErrInvalid)
		}
	}
	colon := strings.IndexByte(uri, ':')
	if colon <= 0 || !isScheme(uri[:colon]) {
		return "", fmt.Errorf("%w: no scheme", ErrInvalid)
	}
	scheme, rest := strings.ToLower(uri[:colon]), uri[colon+1:]
	var fragment, query string
	hasFragment, hasQuery := false, false
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest, fragment, hasFragment = rest[:i], rest[i+1:], true
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query, hasQuery = rest[:i], rest[i+1:], true
	}
	var b strings.Builder
	b.Grow(len(uri))
	b.WriteString(scheme)
	b.WriteByte(':')
	path := rest
	if strings.HasPrefix(rest, "//") {
		auth := rest[2:]
		path = ""
		if i := strings.IndexByte(auth, '/'); i >= 0 {
			auth, path = auth[:i], auth[i:]
		}
		a, err := percent(auth)
		if err != nil {
			return "", err
		}
		b.WriteString("//")
		b.WriteString(lowerHost(a))
	}
	p, err := percent(path)
	if err != nil {
		return "", err
	}
	p = removeDotSegments(p)
	if err := checkEncodedSegments(p); err != nil {
		return "", err
	}
	if !strings.HasPrefix(rest, "//") && strings.HasPrefix(p, "//") {
		// Without an authority, a path that now starts with "//" would
		// read back as one (rt:/..//x is not rt://x): keep it a path.
		p = "/." + p
	}
	b.WriteString(p)
	if hasQuery {
		q, err := percent(query)
		if err != nil {
			return "", err
		}
		b.WriteByte('?')
		b.WriteString(q)
	}
	if hasFragment {
		f, err := percent(fragment)
		if err != nil {
			return "", err
		}
		b.WriteByte('#')
		b.WriteString(f)
	}
	return b.String(), nil
}

// checkEncodedSegments refuses a path that a server decoding it before
// resolving it would read with dot segments or a NUL: a segment such as
// ..%2Fsecret or x%5C.. is one segment here, which a glob's * matches, and
// ../secret there. Encoded separators that make no dot segment (a%2Fb) are
// kept: names with a slash in them are common in resource URIs.
func checkEncodedSegments(path string) error {
	for _, seg := range strings.Split(path, "/") {
		if !strings.Contains(seg, "%") {
			continue
		}
		dec := decodeAll(seg)
		if strings.IndexByte(dec, 0) >= 0 {
			return fmt.Errorf("%w: an encoded NUL in the path", ErrInvalid)
		}
		for _, piece := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
			if piece == "." || piece == ".." {
				return fmt.Errorf("%w: an encoded dot segment in the path (%s)", ErrInvalid, seg)
			}
		}
	}
	return nil
}

// decodeAll decodes every percent-encoding of s (already checked well formed).
func decodeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, _ := unhex(s[i+1])
			lo, _ := unhex(s[i+2])
			b.WriteByte(hi<<4 | lo)
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isScheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) (RFC 3986 3.1).
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// percent decodes the percent-encodings of unreserved characters and writes
// the others with uppercase hex (RFC 3986 6.2.2.1, 6.2.2.2).
func percent(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: a truncated percent-encoding", ErrInvalid)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: a malformed percent-encoding %q", ErrInvalid, s[i:i+3])
		}
		if c := hi<<4 | lo; unreserved(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexDigits[hi])
			b.WriteByte(hexDigits[lo])
		}
		i += 2
	}
	return b.String(), nil
}

// lowerHost lowercases the host of an authority ([userinfo@]host[:port]),
// leaving the userinfo and the hex of percent-encodings (already
// uppercase) alone.
func lowerHost(auth string) string {
	at := strings.LastIndexByte(auth, '@')
	user, host := auth[:at+1], auth[at+1:]
	var b strings.Builder
	b.Grow(len(auth))
	b.WriteString(user)
	for i := 0; i < len(host); i++ {
		c := host[i]
		if c == '%' && i+2 < len(host) {
			b.WriteString(host[i : i+3])
			i += 2
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// removeDotSegments is RFC 3986 section 5.2.4's algorithm.
func removeDotSegments(in string) string {
	if !strings.Contains(in, ".") {
		return in
	}
	var out []string // output segments, each with its leading "/" if it had one
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "/..":
			in = "/"
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "." || in == "..":
			in = ""
		default:
			// Move the first segment (with its leading "/", if any) up to
			// the next "/" to the output.
			start := 0
			if in[0] == '/' {
				start = 1
			}
			end := strings.IndexByte(in[start:], '/')
			if end < 0 {
				end = len(in)
			} else {
				end += start
			}
			out = append(out, in[:end])
			in = in[end:]
		}
	}
	return strings.Join(out, "")
}
