package mcpstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// Errors wrapped by Decode, DecodeMessage and a connection's Read.
var (
	// ErrNotJSON: the message is not one JSON value (JSON-RPC -32700).
	ErrNotJSON = errors.New("not a JSON value")
	// ErrInvalidMessage: JSON that is not a JSON-RPC 2.0 message or batch
	// (JSON-RPC -32600).
	ErrInvalidMessage = errors.New("not a JSON-RPC 2.0 message")
	// ErrTooLarge: a message (a line) over the size limit.
	ErrTooLarge = errors.New("JSON-RPC message over the size limit")
)

// MaxDepth is the deepest nesting a message may have: the SDK's own limit,
// so that no message it would take is refused here.
const MaxDepth = 1000

// Message members, by their exact (case-sensitive) names.
const (
	memberVersion = "jsonrpc"
	memberID      = "id"
	memberMethod  = "method"
	memberParams  = "params"
	memberResult  = "result"
	memberError   = "error"
)

// DecodeMessage decodes one JSON-RPC 2.0 message (not a batch) into the
// SDK's types, as jsonrpc.DecodeMessage does, with the standard library.
// Member names are matched exactly and a duplicate one is refused (one
// message has one meaning); members it does not know are ignored. params and
// result are sub-slices of data, which the caller must not change after.
func DecodeMessage(data []byte) (jsonrpc.Message, error) {
	return decodeMessage(data, len(data)+1)
}

// Decode decodes one line: a message, or a batch (a JSON array of
// messages), which it reports. Errors wrap ErrNotJSON, ErrInvalidMessage or
// ErrTooLarge (over maxBytes, when positive).
func Decode(line []byte, maxBytes int) (msgs []jsonrpc.Message, batch bool, err error) {
	if maxBytes <= 0 {
		maxBytes = len(line) + 1
	}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		elems, err := jsonstrict.Elements(trimmed, limits(maxBytes))
		if err != nil {
			return nil, true, syntaxErr(err)
		}
		if len(elems) == 0 {
			return nil, true, fmt.Errorf("%w: an empty batch", ErrInvalidMessage)
		}
		msgs = make([]jsonrpc.Message, 0, len(elems))
		for i, e := range elems {
			m, err := decodeMessage(e, maxBytes)
			if err != nil {
				return nil, true, &BatchError{Index: i, Raw: e, Err: err}
			}
			msgs = append(msgs, m)
		}
		return msgs, true, nil
	}
	m, err := decodeMessage(trimmed, maxBytes)
	if err != nil {
		return nil, false, err
	}
	return []jsonrpc.Message{m}, false, nil
}

// BatchError is the fault of one message of a batch.
type BatchError struct {
	Index int    // its position in the batch
	Raw   []byte // its bytes
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("batch message %d: %v", e.Index, e.Err) }
func (e *BatchError) Unwrap() error { return e.Err }

func limits(maxBytes int) *jsonstrict.Options {
	return &jsonstrict.Options{MaxDepth: MaxDepth, MaxBytes: maxBytes}
}

// syntaxErr maps a jsonstrict error to this package's kinds.
func syntaxErr(err error) error {
	switch {
	case errors.Is(err, jsonstrict.ErrTooLarge):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	case errors.Is(err, jsonstrict.ErrKind), errors.Is(err, jsonstrict.ErrDuplicateName):
		return fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	return fmt.Errorf("%w: %v", ErrNotJSON, err)
}

func decodeMessage(data []byte, maxBytes int) (jsonrpc.Message, error) {
	members, err := jsonstrict.Members(data, limits(maxBytes))
	if err != nil {
		return nil, syntaxErr(err)
	}
	var version, id, method, params, result, rpcErr []byte
	for _, m := range members {
		var slot *[]byte
		switch m.Name {
		case memberVersion:
			slot = &version
		case memberID:
			slot = &id
		case memberMethod:
			slot = &method
		case memberParams:
			slot = &params
		case memberResult:
			slot = &result
		case memberError:
			slot = &rpcErr
		default:
			continue // unknown members are ignored, as the SDK does
		}
		if *slot != nil {
			return nil, fmt.Errorf("%w: duplicate member %q", ErrInvalidMessage, m.Name)
		}
		*slot = m.Raw
	}
	if v, ok := stringOf(version); !ok || v != "2.0" {
		return nil, fmt.Errorf("%w: jsonrpc is %s, want \"2.0\"", ErrInvalidMessage, orAbsent(version))
	}
	mid, err := idOf(id)
	if err != nil {
		return nil, err
	}
	if method != nil {
		if mid, err = requestID(id); err != nil {
			return nil, err
		}
		name, ok := stringOf(method)
		if !ok {
			return nil, fmt.Errorf("%w: method is not a string", ErrInvalidMessage)
		}
		return &jsonrpc.Request{ID: mid, Method: name, Params: params}, nil
	}
	if !mid.IsValid() {
		return nil, fmt.Errorf("%w: neither a request (no method) nor a response (no id)", ErrInvalidMessage)
	}
	resp := &jsonrpc.Response{ID: mid, Result: result}
	if rpcErr != nil && string(rpcErr) != "null" {
		var we jsonrpc.Error
		if err := json.Unmarshal(rpcErr, &we); err != nil {
			return nil, fmt.Errorf("%w: error is not a JSON-RPC error object: %v", ErrInvalidMessage, err)
		}
		resp.Error = &we
	}
	return resp, nil
}

func orAbsent(raw []byte) string {
	if raw == nil {
		return "absent"
	}
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

// stringOf is the value of the JSON string raw (already checked for
// syntax), without allocating when it has no escapes.
func stringOf(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// idOf reads a message id as the SDK does (jsonrpc.MakeID of its default
// JSON decoding): absent or null is no id, a number is a float64 made an
// integer, a string is itself; anything else is refused.
func idOf(raw []byte) (jsonrpc.ID, error) {
	if raw == nil || string(raw) == "null" {
		return jsonrpc.ID{}, nil
	}
	var v any
	switch raw[0] {
	case '"':
		s, ok := stringOf(raw)
		if !ok {
			return jsonrpc.ID{}, fmt.Errorf("%w: a bad id string", ErrInvalidMessage)
		}
		v = s
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return jsonrpc.ID{}, fmt.Errorf("%w: id %s is out of range", ErrInvalidMessage, orAbsent(raw))
		}
		v = f
	default:
		return jsonrpc.ID{}, fmt.Errorf("%w: id is %s, want a number or a string", ErrInvalidMessage, orAbsent(raw))
	}
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		return jsonrpc.ID{}, fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	return id, nil
}

// requestID is idOf for a request, which is answered under its id: an id the
// answer could not carry back as it came is refused (answered -32600 with
// a null id, as JSON-RPC says for an id that cannot be read). That is a
// string with a lone surrogate escape or invalid UTF-8 (decoding makes it
// U+FFFD, so the answer would name another id, perhaps another request's),
// and a number whose exact value a float64 does not hold (9007199254740993
// would be answered as ...992). A response's id needs no such check: it
// names one of our own requests or none.
func requestID(raw []byte) (jsonrpc.ID, error) {
	id, err := idOf(raw)
	if err != nil || raw == nil {
		return id, err
	}
	switch raw[0] {
	case '"':
		if err := jsonstrict.Valid(raw, nil); err != nil {
			return jsonrpc.ID{}, fmt.Errorf("%w: the id string cannot be answered as sent: %v", ErrInvalidMessage, err)
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if shortInteger(raw) {
			return id, nil // below 10^15 < 2^53: a float64 holds it exactly
		}
		f, _ := strconv.ParseFloat(string(raw), 64) // idOf parsed it
		exact, ok := new(big.Rat).SetString(string(raw))
		if !ok || exact.Cmp(new(big.Rat).SetFloat64(f)) != 0 {
			return jsonrpc.ID{}, fmt.Errorf("%w: id %s cannot be answered exactly (a float64 does not hold it)", ErrInvalidMessage, orAbsent(raw))
		}
	}
	return id, nil
}

// shortInteger reports whether the JSON number raw is an integer of at
// most 15 digits, which every id a client counts up is: the common case,
// answered without the exact comparison's two big.Rat.
func shortInteger(raw []byte) bool {
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// CheckRequestIDs reports, for a transport that leaves decoding to the SDK
// (streamable HTTP), whether a body holds a request whose id the SDK's
// answer would not carry back as sent (see requestID); the error wraps
// ErrInvalidMessage. Everything else about the body, valid or not, is left
// to the SDK: a body this cannot read is no error here.
func CheckRequestIDs(body []byte, maxBytes int) error {
	trimmed := bytes.TrimSpace(body)
	msgs := [][]byte{trimmed}
	if len(trimmed) > 0 && trimmed[0] == '[' {
		elems, err := jsonstrict.Elements(trimmed, limits(maxBytes))
		if err != nil {
			return nil
		}
		msgs = elems
	}
	for _, m := range msgs {
		members, err := jsonstrict.Members(m, limits(maxBytes))
		if err != nil {
			continue
		}
		var id []byte
		isRequest := false
		for _, mb := range members {
			switch mb.Name {
			case memberID:
				id = mb.Raw
			case memberMethod:
				isRequest = true
			}
		}
		if !isRequest || id == nil {
			continue
		}
		if _, err := idOf(id); err != nil {
			continue // the SDK refuses it itself
		}
		if _, err := requestID(id); err != nil {
			return err
		}
	}
	return nil
}
