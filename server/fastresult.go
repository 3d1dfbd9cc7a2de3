package server

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/internal/jsonstring"
)

// The fast path's results as bytes (issue 27): a successful call's result
// is written as JSON directly, without building the SDK's CallToolResult
// and encoding it again, where that writes the document successResult,
// resultTyped and the SDK's encoding would (the same JSON value; for
// Backplane's own results the same bytes):
//
//   - an upstream's MCP result of text blocks only and no _meta (what
//     textResult reads): its content and structuredContent are the
//     upstream's bytes, as they came; its isError as read;
//   - a result of Backplane's own (a built-in or in-process tool's JSON
//     value, not an MCP result) that is not an error: the value as text,
//     and as structuredContent when it is an object.
//
// Both get _meta with the call id (and replayed) and resultType complete.
// Everything else takes the typed path, which rewrites what it must:
// another content block (image, audio, resource link, embedded resource)
// is read into the SDK's types, and one the SDK cannot carry is sent as
// text instead; an upstream's _meta is merged with the gateway's; a
// string with \u escapes is read by one decoder, not passed on for
// clients to read apart (lone surrogates); an error result of Backplane's
// own moves its object out of structuredContent for a tool with an output
// schema (schemaSafeError). The size cap and the check that the result is
// one strict JSON value are the gateway's, before any of this
// (gateway.Options.MaxResultBytes).

// rawAnswer is the fast path's answer with its result written as bytes:
// prefix is what comes before the result (the JSON-RPC envelope), out the
// answer up to the result's end, nil where the typed path answers.
type rawAnswer struct {
	prefix, out []byte
}

// appendFastResult appends the JSON of r's MCP result to dst, or returns
// false when r takes the typed path (above).
func appendFastResult(dst []byte, r *gateway.CallResult) ([]byte, bool) {
	members, mcpShaped, ok := resultShape(r.Result)
	if !ok {
		return dst, false
	}
	if mcpShaped {
		if !textOnly(members) {
			return dst, false
		}
		isError := r.IsError || string(members.isErrorRaw) == "true"
		dst = appendResultMeta(dst, r)
		dst = append(dst, `,"content":`...)
		dst = append(dst, members.content...)
		if members.structured != nil {
			dst = append(dst, `,"structuredContent":`...)
			dst = append(dst, members.structured...)
		}
		return appendResultEnd(dst, isError), true
	}
	if r.IsError {
		return dst, false // schemaSafeError may move its object: the typed path
	}
	dst = appendResultMeta(dst, r)
	dst = append(dst, `,"content":[{"type":"text","text":`...)
	dst = jsonstring.HTML.AppendBytes(dst, r.Result)
	dst = append(dst, `}]`...)
	if isObject(r.Result) {
		dst = append(dst, `,"structuredContent":`...)
		var ok bool
		if dst, ok = appendCompactHTML(dst, r.Result); !ok {
			return dst, false
		}
	}
	return appendResultEnd(dst, false), true
}

// fastMembers are the members of an MCP result, as sent (nil: absent).
type fastMembers struct {
	content, structured, meta, isErrorRaw []byte
}

// resultShape reads b as passThrough does: mcpShaped when it is an MCP
// result object (every member a CallToolResult's, content an array),
// else a value of Backplane's own. ok is false where the typed path must
// judge (an object jsonstrict's default limits refuse, which
// resultMembers leaves to encoding/json).
func resultShape(b []byte) (m fastMembers, mcpShaped, ok bool) {
	if !isObject(b) {
		return m, false, true
	}
	ms, err := jsonstrict.Members(b, nil)
	if err != nil {
		return m, false, false
	}
	var hasContent bool
	for _, x := range ms {
		switch x.Name {
		case "content":
			m.content, hasContent = x.Raw, true
		case "structuredContent":
			m.structured = x.Raw
		case "isError":
			m.isErrorRaw = x.Raw
		case "_meta":
			m.meta = x.Raw
		default:
			return m, false, true // not an MCP result: passThrough writes it as text
		}
	}
	if !hasContent || !bytes.HasPrefix(bytes.TrimSpace(m.content), []byte("[")) {
		return m, false, true
	}
	return m, true, true
}

// textOnly reports whether textResult reads m: text blocks only, no
// _meta, a boolean or null isError.
func textOnly(m fastMembers) bool {
	if m.meta != nil {
		return false
	}
	switch string(m.isErrorRaw) {
	case "true", "false", "null", "":
	default:
		return false
	}
	limits := &jsonstrict.Options{MaxDepth: 2, MaxBytes: len(m.content) + 1}
	blocks, err := jsonstrict.Elements(m.content, limits)
	if err != nil {
		return false
	}
	for _, block := range blocks {
		ms, err := jsonstrict.Members(block, limits)
		if err != nil || len(ms) != 2 {
			return false
		}
		var isText, hasText bool
		for _, x := range ms {
			switch x.Name {
			case "type":
				isText = string(x.Raw) == `"text"`
			case "text":
				hasText = plainStringOK(x.Raw)
			}
		}
		if !isText || !hasText {
			return false
		}
	}
	return true
}

// plainStringOK is plainString's verdict without the string: a JSON
// string of valid UTF-8 without \u escapes.
func plainStringOK(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && utf8.Valid(raw) && !bytes.Contains(raw, []byte(`\u`))
}

// appendResultMeta opens the result with its _meta, as the SDK encodes
// successResult's (a map: names sorted).
func appendResultMeta(dst []byte, r *gateway.CallResult) []byte {
	dst = append(dst, `{"_meta":{"`+MetaCallID+`":`...)
	dst = jsonstring.HTML.Append(dst, r.CallID)
	if r.Replayed {
		dst = append(dst, `,"`+MetaReplayed+`":true`...)
	}
	return append(dst, '}')
}

// appendResultEnd closes the result: isError when set (the SDK omits
// false), resultType complete.
func appendResultEnd(dst []byte, isError bool) []byte {
	if isError {
		dst = append(dst, `,"isError":true`...)
	}
	return append(dst, `,"resultType":"complete"}`...)
}

// appendCompactHTML appends the JSON value src as encoding/json writes a
// json.RawMessage inside the SDK's MarshalJSON: compacted, with <, >, &,
// U+2028 and U+2029 escaped.
func appendCompactHTML(dst, src []byte) ([]byte, bool) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, src); err != nil {
		return dst, false
	}
	out := bytes.NewBuffer(dst)
	json.HTMLEscape(out, buf.Bytes())
	return out.Bytes(), true
}
