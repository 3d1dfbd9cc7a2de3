// Package jsonstrict decodes JSON strictly, as a gateway must: one document
// has exactly one meaning, so the value that is validated is the value the
// backend reads.
//
// Refused, with an [*Error] that wraps one of the sentinel errors below:
// duplicate member names in one object (compared after unescaping), invalid
// UTF-8, \u escapes that leave a lone surrogate, trailing data after the
// value, nesting deeper than [Options.MaxDepth] and documents larger than
// [Options.MaxBytes], and anything else RFC 8259 does not allow.
//
// Numbers are kept exact: a [Number] holds the literal text, never a float64.
//
// Two forms of output: [Parser.Parse] fills a flat, reusable [Doc] (a tape of
// nodes pointing into the input, no allocation once warm), and [Decode] (or
// [Doc.Value]) builds ordinary Go values: map[string]any, []any, string, bool,
// nil and [Number].
//
// For envelopes, documents that carry other documents, [Members] and
// [Elements] split an object or array into its members' exact bytes,
// checking the envelope strictly and what it carries by syntax only, so the
// carried documents reach their own validator unchanged.
//
// The package uses the standard library only.
package jsonstrict

import (
	"errors"
	"strconv"
)

// Default limits.
const (
	DefaultMaxDepth = 128
	DefaultMaxBytes = 4 << 20
)

// Options bound a decode. A nil *Options, or a zero field, means the default.
type Options struct {
	// MaxDepth is the deepest nesting of arrays and objects allowed; a
	// top-level scalar has depth 0, a top-level object depth 1. Default 128.
	MaxDepth int
	// MaxBytes is the largest document accepted, in bytes. Default 4 MiB.
	MaxBytes int
}

func (o *Options) maxDepth() int {
	if o == nil || o.MaxDepth <= 0 {
		return DefaultMaxDepth
	}
	return o.MaxDepth
}

func (o *Options) maxBytes() int {
	if o == nil || o.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return o.MaxBytes
}

// Sentinel errors; every [*Error] wraps exactly one.
var (
	ErrSyntax        = errors.New("invalid JSON")
	ErrDuplicateName = errors.New("duplicate member name")
	ErrInvalidUTF8   = errors.New("invalid UTF-8")
	ErrLoneSurrogate = errors.New("lone surrogate in \\u escape")
	ErrTrailingData  = errors.New("trailing data after the JSON value")
	ErrTooDeep       = errors.New("nesting too deep")
	ErrTooLarge      = errors.New("document too large")
)

// Error is a decoding error at a byte offset of the input.
type Error struct {
	Err    error  // one of the sentinels
	Offset int    // byte offset in the input where the problem was found
	Detail string // what exactly, for people
}

func (e *Error) Error() string {
	s := e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s + " at offset " + strconv.Itoa(e.Offset)
}

func (e *Error) Unwrap() error { return e.Err }

// Number is a JSON number kept as its literal text, so no precision is lost.
type Number string

// String returns the literal text.
func (n Number) String() string { return string(n) }

// Decode parses data strictly and returns Go values: map[string]any, []any,
// string, bool, nil and [Number].
func Decode(data []byte, opts *Options) (any, error) {
	var p Parser
	doc, err := p.Parse(data, opts)
	if err != nil {
		return nil, err
	}
	return doc.Value(0), nil
}

// Valid reports whether data is one strict JSON document within opts.
func Valid(data []byte, opts *Options) error {
	var p Parser
	_, err := p.Parse(data, opts)
	return err
}
