package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Result is what a succeeded call returned, as the journal records it in
// Intent.Result: the backend's result, byte for byte, and whether the tool
// flagged it as a tool-level error. EncodeResult and DecodeResult are its
// only encoding and decoding: the gateway (recording, replaying), the CLI
// (journal show) and any other reader go through them.
type Result struct {
	IsError bool
	// Content is one JSON value, exactly as the backend returned it
	// (whitespace, member order and escapes included).
	Content json.RawMessage
}

// ErrUnreadableResult is returned by DecodeResult for bytes that are not a
// recorded result (a damaged journal row). It is not a call's
// malformed_result, which is a backend's unreadable answer
// ([tool.ErrMalformedResult]).
var ErrUnreadableResult = errors.New("not a recorded result")

// EncodeResult returns the journal's encoding of r: {"is_error":B,"content":C}.
// It is built by hand, not with json.Marshal, which would compact Content
// and escape <, > and &: a replay must return the bytes the call returned.
// r.Content must be one JSON value (the gateway checks it before settling).
// (Appended, not formatted with fmt: this runs once per call, and fmt's
// formatting was ~4 us of it.)
func EncodeResult(r Result) []byte {
	b := make([]byte, 0, len(`{"is_error":false,"content":}`)+len(r.Content))
	b = append(b, `{"is_error":`...)
	b = strconv.AppendBool(b, r.IsError)
	b = append(b, `,"content":`...)
	b = append(b, r.Content...)
	return append(b, '}')
}

// DecodeResult reads what EncodeResult wrote, returning Content as the exact
// bytes recorded. It fails with ErrUnreadableResult for anything else.
func DecodeResult(b []byte) (Result, error) {
	var r struct {
		IsError *bool           `json:"is_error"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrUnreadableResult, err)
	}
	if r.IsError == nil || r.Content == nil {
		return Result{}, fmt.Errorf("%w: is_error or content is missing", ErrUnreadableResult)
	}
	return Result{IsError: *r.IsError, Content: r.Content}, nil
}
