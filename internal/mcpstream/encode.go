package mcpstream

import (
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// EncodeMessage returns the JSON text of msg, the same bytes as
// jsonrpc.EncodeMessage. The SDK's encodes an envelope through reflection
// and compacts the params or result, JSON the SDK (or the gateway) has
// just encoded compactly, once more: here, a request or an answer without
// an error whose method and id need no escaping, and whose params or
// result is compact JSON, is written directly; anything else is the SDK's
// to encode.
func EncodeMessage(msg jsonrpc.Message) ([]byte, error) {
	if data, ok := appendMessage(make([]byte, 0, encodedSize(msg)), msg); ok {
		return data, nil
	}
	return jsonrpc.EncodeMessage(msg)
}

// encodedSize is room enough for appendMessage's encoding of msg and the
// newline the connection appends, so that neither grows the buffer: the
// envelope's members, an id of 20 digits at most (or its string), the
// method, the params or result.
func encodedSize(msg jsonrpc.Message) int {
	const envelope = len(`{"jsonrpc":"2.0","id":,"method":"","params":}`) + 20 + len("\n")
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m != nil {
			n := envelope + len(m.Method) + len(m.Params)
			if s, ok := m.ID.Raw().(string); ok {
				n += len(s)
			}
			return n
		}
	case *jsonrpc.Response:
		if m != nil {
			n := envelope + len(m.Result)
			if s, ok := m.ID.Raw().(string); ok {
				n += len(s)
			}
			return n
		}
	}
	return 0
}

// appendMessage appends msg's JSON text to dst; false when it leaves msg to
// the SDK's encoding (see EncodeMessage).
func appendMessage(dst []byte, msg jsonrpc.Message) ([]byte, bool) {
	var (
		id     jsonrpc.ID
		method string
		raw    []byte
		member string
	)
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m == nil {
			return nil, false
		}
		id, method, raw, member = m.ID, m.Method, m.Params, `,"params":`
	case *jsonrpc.Response:
		if m == nil || m.Error != nil {
			return nil, false
		}
		id, raw, member = m.ID, m.Result, `,"result":`
	default:
		return nil, false
	}
	if !plainText(method) || (len(raw) > 0 && !compactJSON(raw)) {
		return nil, false
	}
	dst = append(dst, `{"jsonrpc":"2.0"`...)
	switch v := id.Raw().(type) {
	case nil: // no id: omitted, as the SDK's omitempty does
	case int64:
		dst = append(dst, `,"id":`...)
		dst = strconv.AppendInt(dst, v, 10)
	case string:
		if !plainText(v) {
			return nil, false
		}
		dst = append(dst, `,"id":"`...)
		dst = append(dst, v...)
		dst = append(dst, '"')
	default:
		return nil, false
	}
	if method != "" {
		dst = append(dst, `,"method":"`...)
		dst = append(dst, method...)
		dst = append(dst, '"')
	}
	if len(raw) > 0 {
		dst = append(dst, member...)
		dst = append(dst, raw...)
	}
	return append(dst, '}'), true
}

// plainText reports whether s is written in JSON as it is, between quotes,
// by encoding/json without HTML escaping: printable ASCII but '"' and '\'.
func plainText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// compactJSON reports whether raw is one JSON value with no whitespace
// outside its strings, which encoding/json's compaction (of a
// json.RawMessage, without HTML escaping) leaves as it is.
func compactJSON(raw []byte) bool {
	if !jsonstrict.Compact(raw) {
		return false
	}
	_, err := jsonstrict.SyntaxKind(raw, &jsonstrict.Options{MaxDepth: MaxDepth, MaxBytes: DefaultMaxMessage})
	return err == nil
}
