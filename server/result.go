package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/tool"
)

// Keys of _meta this server reads or writes.
const (
	// MetaIdempotencyKey, in a tools/call request's _meta, is the call's
	// idempotency key: a repeated key returns the first call's recorded
	// outcome instead of running the tool again.
	MetaIdempotencyKey = "backplane/idempotency_key"
	// MetaCallID, in a result's _meta, is the gateway's call id (the
	// journal entry), once an intent was recorded.
	MetaCallID = "backplane/call_id"
	// MetaReplayed, in a result's _meta, is true when the result is the
	// recorded outcome of an earlier call with the same idempotency key.
	MetaReplayed = "backplane/replayed"
	// MetaError, in an error result's _meta, is the structured error
	// (the gateway's error object, or a built-in tool's error result) of
	// a tool that declares an output schema, in place of
	// structuredContent: see [schemaSafeError].
	MetaError = "backplane/error"
)

// schemaSafeError moves the structuredContent of an error result
// Backplane wrote itself (a refusal, a failure, a built-in tool's error)
// into _meta[MetaError], for a tool that declares an output schema. The
// error object does not follow the tool's output schema, and the
// TypeScript SDK's client (@modelcontextprotocol/sdk 1.x, 1.32.2 the
// latest) validates structuredContent against it even when isError is set
// (typescript-sdk issue 1943): the caller would get a thrown "does not
// match the tool's output schema" instead of approval_required or
// not_found. The text content still says the same. An upstream's own
// result is never changed (passThrough).
func schemaSafeError(out *mcp.CallToolResult) {
	if !out.IsError || out.StructuredContent == nil {
		return
	}
	if out.Meta == nil {
		out.Meta = mcp.Meta{}
	}
	out.Meta[MetaError] = out.StructuredContent
	out.StructuredContent = nil
}

// successResult turns what a backend returned into an MCP tool result. An
// upstream MCP server's result object passes through as it is; any other
// JSON value is carried as text, and also as structuredContent when it is an
// object (structuredContent must be an object).
//
// hasOutput says the tool declares an output schema: an error result this
// function writes (not an upstream's) then carries its object in
// _meta[MetaError] instead (schemaSafeError).
func successResult(r *gateway.CallResult, hasOutput bool) *mcp.CallToolResult {
	out := passThrough(r.Result)
	own := out == nil
	if own {
		out = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(r.Result)}}}
		if isObject(r.Result) {
			out.StructuredContent = json.RawMessage(r.Result)
		}
	}
	if r.IsError {
		out.IsError = true
	}
	if own && hasOutput {
		schemaSafeError(out)
	}
	if out.Content == nil {
		out.Content = []mcp.Content{} // "content" is required: never null
	}
	if out.Meta == nil {
		out.Meta = mcp.Meta{}
	}
	out.Meta[MetaCallID] = r.CallID
	if r.Replayed {
		out.Meta[MetaReplayed] = true
	}
	return out
}

// mcpResultKeys are the members of an MCP CallToolResult.
var mcpResultKeys = map[string]bool{"content": true, "structuredContent": true, "isError": true, "_meta": true}

// passThrough returns the MCP result object b holds, or nil when b is not
// one: a JSON object whose members are all CallToolResult members, with a
// content list the SDK can read.
func passThrough(b json.RawMessage) *mcp.CallToolResult {
	if !isObject(b) {
		return nil
	}
	members, ok := resultMembers(b)
	if !ok {
		return nil
	}
	content, ok := members["content"]
	if !ok || !bytes.HasPrefix(bytes.TrimSpace(content), []byte("[")) {
		return nil
	}
	for k := range members {
		if !mcpResultKeys[k] {
			return nil
		}
	}
	if r := textResult(members); r != nil {
		return r
	}
	return sdkResult(b, members)
}

// resultMembers splits the JSON object b into its members, as
// json.Unmarshal into a map[string]json.RawMessage does (false: b is not a
// JSON object): a repeated member keeps its last value, values keep their
// bytes. An object within jsonstrict's default limits (the common case)
// takes one pass of package jsonstrict and no reflection, as this runs for
// every upstream answer; one it refuses (deeper, larger) is left to
// encoding/json, which may still take it.
func resultMembers(b json.RawMessage) (map[string]json.RawMessage, bool) {
	if ms, err := jsonstrict.Members(b, nil); err == nil {
		members := make(map[string]json.RawMessage, len(ms))
		for _, m := range ms {
			members[m.Name] = m.Raw // in document order: the last one wins
		}
		return members, true
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil || members == nil {
		return nil, false
	}
	return members, true
}

// sdkResult is passThrough's general case: the SDK's own decoding.
func sdkResult(b json.RawMessage, members map[string]json.RawMessage) *mcp.CallToolResult {
	var r mcp.CallToolResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil // a content type the SDK cannot carry: sent as plain JSON instead
	}
	if sc, ok := members["structuredContent"]; ok {
		r.StructuredContent = sc // keep the upstream's exact bytes
	}
	return &r
}

// textResult is passThrough's common case, a result whose content is text
// blocks only ({"type":"text","text":...}) and that has no _meta, built
// without the SDK's decoding, which allocates 32 KiB per call (go-sdk
// v1.8.0) to give the same value. Anything else (nil) is left to
// sdkResult: other block kinds, members or escapes whose reading could
// differ between decoders.
func textResult(members map[string]json.RawMessage) *mcp.CallToolResult {
	if _, ok := members["_meta"]; ok {
		return nil
	}
	r := &mcp.CallToolResult{}
	if v, ok := members["isError"]; ok {
		switch string(v) {
		case "true":
			r.IsError = true
		case "false", "null":
		default:
			return nil
		}
	}
	raw := members["content"]
	limits := &jsonstrict.Options{MaxDepth: 2, MaxBytes: len(raw) + 1}
	blocks, err := jsonstrict.Elements(raw, limits)
	if err != nil {
		return nil
	}
	r.Content = make([]mcp.Content, 0, len(blocks))
	for _, block := range blocks {
		ms, err := jsonstrict.Members(block, limits)
		if err != nil || len(ms) != 2 {
			return nil
		}
		var text string
		var isText, hasText bool
		for _, m := range ms {
			switch m.Name {
			case "type":
				isText = string(m.Raw) == `"text"`
			case "text":
				text, hasText = plainString(m.Raw)
			}
		}
		if !isText || !hasText {
			return nil
		}
		r.Content = append(r.Content, &mcp.TextContent{Text: text})
	}
	if sc, ok := members["structuredContent"]; ok {
		r.StructuredContent = sc // the upstream's exact bytes, as sdkResult
	}
	return r
}

// plainString reads a JSON string of valid UTF-8 without \u escapes (whose
// lone surrogates decoders read differently).
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || !utf8.Valid(raw) || bytes.Contains(raw, []byte(`\u`)) {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

// errorResult is a call the gateway refused or that failed, as a tool
// result a model can act on (SEP-1303): isError, the whole *gateway.Error
// in structuredContent (class, message, step, pointers, every violation),
// and the same in words in content. For a tool that declares an output
// schema (hasOutput) the error object is in _meta[MetaError] instead
// (schemaSafeError).
func errorResult(err error, hasOutput bool) *mcp.CallToolResult {
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		ge = &gateway.Error{Class: tool.ClassExecutionFailure, Message: err.Error(), Details: map[string]any{}}
	}
	structured, merr := json.Marshal(ge)
	out := &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: describeError(ge)}},
		Meta:    mcp.Meta{},
	}
	if merr == nil {
		out.StructuredContent = json.RawMessage(structured)
	}
	if ge.CallID != "" {
		out.Meta[MetaCallID] = ge.CallID
	}
	if hasOutput {
		schemaSafeError(out)
	}
	return out
}

// describeError is the readable form of a gateway error: the error line,
// every violation on a line of its own.
func describeError(ge *gateway.Error) string {
	var b strings.Builder
	b.WriteString(ge.Error())
	if u, ok := ge.Details["authorization_url"].(string); ok {
		// An upstream login (backend/upstream's LoginRequiredError): the
		// URL is for this caller's eyes, in its answer only.
		b.WriteString("\nConnect your account: " + u)
	}
	if len(ge.Errors) > 1 || (len(ge.Errors) == 1 && ge.Errors[0].Error() != ge.Message) {
		b.WriteString("\nviolations:")
		for _, v := range ge.Errors {
			b.WriteString("\n- ")
			b.WriteString(v.Error())
			if v.Pointer != "" || v.Stage == "arguments" {
				fmt.Fprintf(&b, " (pointer %q)", v.Pointer)
			}
		}
	}
	// An approval's message already says how to decide it, with the
	// configuration's real commands (gateway.Gateway.ApprovalHints): said
	// once, not again here with a placeholder (issue 26, item 6).
	return b.String()
}
