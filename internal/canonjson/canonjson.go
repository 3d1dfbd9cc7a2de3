// Package canonjson writes one canonical text for a JSON document, and
// digests of it: approvals and idempotency keys are bound to the digest of
// the canonical arguments, so member order, whitespace and string escapes do
// not matter, and nothing that a tool could read differently is lost.
//
// The form is RFC 8785 (the JSON Canonicalization Scheme) for everything but
// numbers: members sorted by their names' UTF-16 code units, no whitespace,
// strings written with RFC 8785's minimal escapes.
//
// Numbers are written as the literal text of the document, unchanged. RFC
// 8785 writes numbers as IEEE 754 doubles, which folds integers beyond 2^53,
// long fractions, 5 and 5.0, and 0 and -0 into one digest; but the gateway
// forwards the caller's bytes unchanged (what was validated is what is
// forwarded), and JSON readers differ in what they keep of a literal: a
// double (JavaScript keeps -0), an int or a float by the presence of a
// fraction or an exponent (Python, Go decoding into an int refuses 5.0), the
// exact scale (Java's BigDecimal, Python's Decimal tell 1.5 from 1.50), or
// the text itself (Go's json.Number, Python's parse_float hooks, JavaScript's
// JSON.parse source text). The last kind tells every character of a literal
// apart, so no rewriting of a number is invisible to every tool: two
// documents share a digest only if their numbers are the same text. Telling
// apart more than a tool does costs a second approval at worst; telling apart
// less let one approval cover a call the operator never saw. The input
// schema contract (docs/inputschema-spec.md D12, D13) compares numbers
// by exact value for validation (1.0 is an integer, equal to 1); the digest
// is stricter than that on purpose, and the contract's D18 (no
// normalisation: what was validated is what is forwarded) is why.
//
// What stays folded, and why it is safe: member order, whitespace and string
// escapes (\u0041 and A). Every JSON reader reads a string as its sequence of
// code points, and duplicate names and lone surrogates are refused by
// [jsonstrict], so each of these has one value whichever reader gets it. A
// tool that reads its arguments as raw text (hashing or echoing the bytes)
// can still tell those apart; the digest does not promise that.
//
// Numbers from Go values (float64, int, int64) have no literal: an int is
// written in decimal, a float64 as ECMAScript writes it (RFC 8785). A
// [jsonstrict.Number] or [json.Number] must be a JSON number literal, else
// it is refused: its text goes into the canonical form as it is.
//
// [Digest] and [DigestValue] return [DigestVersion] followed by the
// lowercase hex SHA-256 of the canonical form. The prefix is there because
// digests are stored (pending approvals, the journal): a digest written
// under an older rule never equals one written under this one, so a
// document that shared an old digest with another cannot inherit its
// approval across an upgrade.
//
// The package uses the standard library and jsonstrict only.
package canonjson

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// DigestVersion starts every digest [Digest] and [DigestValue] return. The
// digests of the RFC 8785 number rule this package had before were bare hex;
// they never equal one with this prefix.
const DigestVersion = "v2:"

// Digest strictly decodes data and returns the digest of its canonical form:
// [DigestVersion] and the lowercase hex SHA-256.
func Digest(data []byte) (string, error) {
	v, err := jsonstrict.Decode(data, nil)
	if err != nil {
		return "", err
	}
	return DigestValue(v)
}

// DigestDoc returns the digest of the canonical form of the document doc
// holds (its node 0), as parsed by [jsonstrict.Parser]: the digest
// [Digest] returns for the same bytes, written from the parse the caller
// already has (the gateway's, which validated the arguments) without
// building Go values.
func DigestDoc(doc *jsonstrict.Doc) (string, error) {
	w := docWriters.Get().(*docWriter)
	defer docWriters.Put(w)
	b, err := w.append(w.buf[:0], doc, 0)
	w.buf = b[:0]
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return DigestVersion + hex.EncodeToString(sum[:]), nil
}

// AppendDoc appends the canonical form of node i of doc and all it
// contains: what [Append] writes for doc.Value(i).
func AppendDoc(dst []byte, doc *jsonstrict.Doc, i int) ([]byte, error) {
	w := docWriters.Get().(*docWriter)
	defer docWriters.Put(w)
	return w.append(dst, doc, i)
}

// docWriter is the scratch space of a walk of a parsed document, pooled
// so that a digest allocates nothing once warm.
type docWriter struct {
	buf  []byte // the canonical form being written (DigestDoc)
	str  []byte // one string's unescaped text
	keys []int  // the name nodes of the open objects, each object's sorted
}

var docWriters = sync.Pool{New: func() any { return new(docWriter) }}

// append writes node i as Append writes the value Doc.Value(i) gives:
// the same names, sorted the same way, the same strings and literals.
func (w *docWriter) append(dst []byte, d *jsonstrict.Doc, i int) ([]byte, error) {
	switch d.Kind(i) {
	case jsonstrict.KindNull:
		return append(dst, "null"...), nil
	case jsonstrict.KindFalse:
		return append(dst, "false"...), nil
	case jsonstrict.KindTrue:
		return append(dst, "true"...), nil
	case jsonstrict.KindNumber:
		lit := d.Raw(i)
		if !isNumber(lit) {
			return dst, fmt.Errorf("canonjson: invalid number %q", lit)
		}
		return append(dst, lit...), nil
	case jsonstrict.KindString:
		w.str = d.AppendStr(w.str[:0], i)
		return appendString(dst, w.str), nil
	case jsonstrict.KindArray:
		dst = append(dst, '[')
		for j, end := i+1, d.Next(i); j < end; j = d.Next(j) {
			if j > i+1 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = w.append(dst, d, j); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case jsonstrict.KindObject:
		base := len(w.keys)
		for j, end := i+1, d.Next(i); j < end; j = d.Next(j + 1) {
			w.keys = append(w.keys, j)
		}
		n := len(w.keys) - base
		slices.SortFunc(w.keys[base:], func(a, b int) int { return compareUTF16(d.Raw(a), d.Raw(b)) })
		dst = append(dst, '{')
		for m := 0; m < n; m++ {
			k := w.keys[base+m] // by index: the walk below may grow w.keys
			if m > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, d.Raw(k)) // a name's Raw is its unescaped text
			dst = append(dst, ':')
			var err error
			if dst, err = w.append(dst, d, k+1); err != nil {
				w.keys = w.keys[:base]
				return dst, err
			}
		}
		w.keys = w.keys[:base]
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("canonjson: node %d is not a JSON value", i)
}

// DigestValue returns the digest of the canonical form of v:
// [DigestVersion] and the lowercase hex SHA-256.
func DigestValue(v any) (string, error) {
	sum, err := Sum(v)
	if err != nil {
		return "", err
	}
	return DigestVersion + hex.EncodeToString(sum[:]), nil
}

// Sum returns the SHA-256 of the canonical form of v, for digests that carry
// their own versioning (a tool's definition hash).
func Sum(v any) ([32]byte, error) {
	b, err := Append(nil, v)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// Append appends the canonical form of v: map[string]any, []any, string,
// bool, nil, jsonstrict.Number, json.Number, float64 or an int.
func Append(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return appendString(dst, x), nil
	case jsonstrict.Number:
		return appendNumber(dst, string(x))
	case json.Number:
		return appendNumber(dst, string(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return dst, fmt.Errorf("canonjson: %v is not a JSON number", x)
		}
		return appendFloat(dst, x), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = Append(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = Append(dst, x[k]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, fmt.Errorf("canonjson: unsupported Go type %T", v)
}

// compareUTF16 orders member names by their UTF-16 code units (RFC 8785 §3.2.3).
func compareUTF16[T ~string | ~[]byte](a, b T) int {
	if isASCII(a) && isASCII(b) {
		for i := 0; i < len(a) && i < len(b); i++ {
			if a[i] != b[i] {
				return int(a[i]) - int(b[i])
			}
		}
		return len(a) - len(b)
	}
	ua, ub := utf16.Encode([]rune(string(a))), utf16.Encode([]rune(string(b)))
	return slices.Compare(ua, ub)
}

func isASCII[T ~string | ~[]byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func appendString[T ~string | ~[]byte](dst []byte, s T) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// appendNumber writes a number literal as it is, after checking that it is
// one (RFC 8259 section 6): the text goes into the canonical form verbatim,
// so a Number holding anything else could forge structure.
func appendNumber(dst []byte, lit string) ([]byte, error) {
	if !isNumber(lit) {
		return dst, fmt.Errorf("canonjson: invalid number %q", lit)
	}
	return append(dst, lit...), nil
}

// isNumber reports whether s is exactly one JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isNumber[T ~string | ~[]byte](s T) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

// digits returns the index after the run of ASCII digits starting at i.
func digits[T ~string | ~[]byte](s T, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// appendFloat writes f as ECMAScript's Number.prototype.toString does.
func appendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest digits that read back as f, and the decimal exponent.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.dddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k, n := len(digits), x+1
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for i := 0; i < n-k; i++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for i := 0; i < -n; i++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
