// Package canonjson writes the JSON Canonicalization Scheme (RFC 8785) form
// of a value, and digests of it: approvals and idempotency keys are bound to
// the digest of the canonical arguments, so member order and whitespace do
// not matter, and nothing else does either.
//
// RFC 8785 writes numbers as IEEE 754 doubles (ECMAScript's Number
// toString). Literals a double cannot hold exactly (integers beyond 2^53,
// long fractions) canonicalise to the nearest double, so two argument
// documents that differ only there share a digest; literals beyond the double
// range, which RFC 8785 cannot express, are written as their exact decimal
// text so that they never collide with a finite double.
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
	"unicode/utf16"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// Digest strictly decodes data and returns the lowercase hex SHA-256 of its
// canonical form.
func Digest(data []byte) (string, error) {
	v, err := jsonstrict.Decode(data, nil)
	if err != nil {
		return "", err
	}
	return DigestValue(v)
}

// DigestValue returns the lowercase hex SHA-256 of the canonical form of v.
func DigestValue(v any) (string, error) {
	b, err := Append(nil, v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
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
		return appendNumber(dst, strconv.Itoa(x))
	case int64:
		return appendNumber(dst, strconv.FormatInt(x, 10))
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
func compareUTF16(a, b string) int {
	if isASCII(a) && isASCII(b) {
		return strings.Compare(a, b)
	}
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	return slices.Compare(ua, ub)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func appendString(dst []byte, s string) []byte {
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

func appendNumber(dst []byte, lit string) ([]byte, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && !math.IsInf(f, 0) {
			// Underflow to zero or a subnormal: f is the nearest double.
			return appendFloat(dst, f), nil
		}
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return append(dst, lit...), nil
		}
		return dst, fmt.Errorf("canonjson: invalid number %q", lit)
	}
	return appendFloat(dst, f), nil
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
