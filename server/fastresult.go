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

// rawAnswer is a call's answer with its result written as bytes: prefix
// is what comes before the result (the fast path's JSON-RPC envelope;
// none for a stdio session's call, whose connection writes the envelope),
// out the answer up to the result's end, nil where the typed path answers.
type rawAnswer struct {
	prefix, out []byte
}

// appendFastResult appends the JSON of r's MCP result to dst, as the fast
// path answers it (above), or returns false when r takes the typed path.
func appendFastResult(dst []byte, r *gateway.CallResult) ([]byte, bool) {
	return appendResult(dst, r, false)
}

// appendSessionResult appends the JSON of r's MCP result to dst as a stdio
// session's call is answered (stdiocalls.go), or returns false when r
// takes the typed path: byte for byte what the SDK's encoding of
// successResult's value writes (encodeResult), where the fast path may
// keep an upstream's bytes: an upstream's text blocks are encoded again
// (HTML escaped, as the SDK's TextContent writes them) and its
// structuredContent compacted and HTML escaped, and the result has no
// resultType. A session's answer must not change with the path that
// served it (TestStdioCallsAnswerAsTheSDK).
func appendSessionResult(dst []byte, r *gateway.CallResult) ([]byte, bool) {
	return appendResult(dst, r, true)
}

// appendResult is appendFastResult, or with session appendSessionResult.
func appendResult(dst []byte, r *gateway.CallResult, session bool) ([]byte, bool) {
	members, mcpShaped, ok := resultShape(r.Result)
	if !ok {
		return dst, false
	}
	if mcpShaped {
		texts, ok := textOnly(members)
		if !ok {
			return dst, false
		}
		isError := r.IsError || string(members.isErrorRaw) == "true"
		dst = appendResultMeta(dst, r)
		dst = append(dst, `,"content":`...)
		if !session {
			dst = append(dst, members.content...)
		} else {
			dst = append(dst, '[')
			for i, text := range texts {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"type":"text","text":`...)
				if dst, ok = appendTextAgain(dst, text); !ok {
					return dst, false
				}
				dst = append(dst, '}')
			}
			dst = append(dst, ']')
		}
		if members.structured != nil {
			dst = append(dst, `,"structuredContent":`...)
			if !session {
				dst = append(dst, members.structured...)
			} else if dst, ok = appendCompactHTML(dst, members.structured); !ok {
				return dst, false
			}
		}
		return appendResultEnd(dst, isError, !session), true
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
	return appendResultEnd(dst, false, !session), true
}

// appendTextAgain appends the JSON string raw (one textOnly took: valid
// UTF-8, no \u escape) as the SDK writes the string it reads from it,
// without decoding it into a string first: each named escape is what it
// stands for, written as encoding/json writes a Go string (\/ becomes /,
// the others stay), every other byte as encoding/json writes it
// (jsonstring.HTML).
func appendTextAgain(dst, raw []byte) ([]byte, bool) {
	inner := raw[1 : len(raw)-1]
	dst = append(dst, '"')
	for {
		i := bytes.IndexByte(inner, '\\')
		if i < 0 {
			return append(jsonstring.HTML.AppendEscaped(dst, inner), '"'), true
		}
		dst = jsonstring.HTML.AppendEscaped(dst, inner[:i])
		if i+1 >= len(inner) {
			return dst, false
		}
		switch c := inner[i+1]; c {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			dst = append(dst, '\\', c)
		case '/':
			dst = append(dst, '/')
		default:
			return dst, false // \u, or not JSON
		}
		inner = inner[i+2:]
	}
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
// _meta, a boolean or null isError; texts are the blocks' text members,
// as sent.
func textOnly(m fastMembers) (texts [][]byte, ok bool) {
	if m.meta != nil {
		return nil, false
	}
	switch string(m.isErrorRaw) {
	case "true", "false", "null", "":
	default:
		return nil, false
	}
	limits := &jsonstrict.Options{MaxDepth: 2, MaxBytes: len(m.content) + 1}
	blocks, err := jsonstrict.Elements(m.content, limits)
	if err != nil {
		return nil, false
	}
	texts = make([][]byte, 0, len(blocks))
	for _, block := range blocks {
		ms, err := jsonstrict.Members(block, limits)
		if err != nil || len(ms) != 2 {
			return nil, false
		}
		var isText bool
		var text []byte
		for _, x := range ms {
			switch x.Name {
			case "type":
				isText = string(x.Raw) == `"text"`
			case "text":
				if plainStringOK(x.Raw) {
					text = x.Raw
				}
			}
		}
		if !isText || text == nil {
			return nil, false
		}
		texts = append(texts, text)
	}
	return texts, true
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
// false), and with typed resultType complete (2026-07-28).
func appendResultEnd(dst []byte, isError, typed bool) []byte {
	if isError {
		dst = append(dst, `,"isError":true`...)
	}
	if typed {
		dst = append(dst, `,"resultType":"complete"`...)
	}
	return append(dst, '}')
}

// appendCompactHTML appends the JSON value src as encoding/json writes a
// json.RawMessage inside the SDK's MarshalJSON: compacted, with <, >, &,
// U+2028 and U+2029 escaped.
func appendCompactHTML(dst, src []byte) ([]byte, bool) {
	if compactHTMLSafe(src) {
		if _, err := jsonstrict.SyntaxKind(src, &jsonstrict.Options{MaxBytes: len(src)}); err == nil {
			return append(dst, src...), true // compacting and escaping leave it as it is
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, src); err != nil {
		return dst, false
	}
	out := bytes.NewBuffer(dst)
	json.HTMLEscape(out, buf.Bytes())
	return out.Bytes(), true
}

// compactHTMLSafe reports whether appendCompactHTML would leave src as
// it is, were it JSON: no whitespace outside its strings, and no <, > or &
// and no 0xE2 byte anywhere (U+2028 and U+2029 start with it; the other
// characters that do are left to the slow path too).
func compactHTMLSafe(src []byte) bool {
	return !bytes.ContainsAny(src, "<>&") && bytes.IndexByte(src, 0xE2) < 0 && jsonstrict.Compact(src)
}
