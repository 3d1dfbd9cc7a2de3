package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
)

// typedAnswer is a call's result as the typed path writes it: successResult,
// resultTyped, the fast path's encoder.
func typedAnswer(t *testing.T, r *gateway.CallResult, hasOutput bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resultTyped(successResult(r, hasOutput), "complete")); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// resultCases are successful results the bytes paths write themselves.
var resultCases = []struct {
	name     string
	result   string
	isError  bool
	replayed bool
	sameText bool // own: the fast path's bytes are the typed path's
}{
	{name: "own object", result: `{"echo":{"text":"hello"}}`, sameText: true},
	{name: "own object, spaced, HTML, U+2028, escapes", result: "{ \"a\" : \"<b>&amp;</b>\u2028\\n\\u00e9\\\"\" ,\n \"n\": [1, 2.50] }", sameText: true},
	{name: "own array", result: `[1,"x",null]`, sameText: true},
	{name: "own string", result: `"a\tb<>"`, sameText: true},
	{name: "own number", result: `12.50`, sameText: true},
	{name: "own, replayed", result: `{"ok":true}`, replayed: true, sameText: true},
	{name: "own, not an MCP result (an extra member)", result: `{"content":[],"extra":1}`, sameText: true},
	{name: "own, content not an array", result: `{"content":"x"}`, sameText: true},
	{name: "upstream text", result: `{"content":[{"type":"text","text":"hello"}],"isError":false}`},
	{name: "upstream text, spaced, two blocks, escapes", result: "{ \"content\" : [ {\"text\": \"a\\nb \\\"q\\\" <&> \\/\", \"type\":\"text\"}, {\"type\":\"text\",\"text\":\"\"} ] }"},
	{name: "upstream text, error", result: `{"content":[{"type":"text","text":"boom"}],"isError":true}`, isError: true},
	{name: "upstream text, isError null", result: `{"content":[{"type":"text","text":"x"}],"isError":null}`},
	{name: "upstream text, structured", result: `{"content":[{"type":"text","text":"{\"n\":1}"}],"structuredContent": { "n" : 1, "s": "<x>" },"isError":false}`},
	{name: "upstream text, structured null", result: `{"content":[{"type":"text","text":"x"}],"structuredContent":null}`},
	{name: "upstream, no content blocks", result: `{"content":[]}`},
	{name: "upstream text, replayed", result: `{"content":[{"type":"text","text":"x"}],"isError":false}`, replayed: true},
	{name: "upstream text, U+2028, HTML, invalid-free UTF-8", result: "{\"content\":[{\"type\":\"text\",\"text\":\"\u2028 \u00e9 <a href=\\\"x\\\">&</a>\\t\"}],\"structuredContent\":{ \"s\" : \"\u2029<&>\", \"a\": [ 1 , {} ] }}"},
}

// The results written as bytes are the typed path's: the same bytes for
// Backplane's own results, the same JSON value (the upstream's bytes kept)
// for an upstream's text result.
func TestFastResultIsTheTypedResult(t *testing.T) {
	for _, c := range resultCases {
		r := &gateway.CallResult{CallID: "call_01 \"x\"", Result: json.RawMessage(c.result), IsError: c.isError, Replayed: c.replayed}
		got, ok := appendFastResult(nil, r)
		if !ok {
			t.Errorf("%s: not written as bytes", c.name)
			continue
		}
		want := typedAnswer(t, r, false)
		if c.sameText && !bytes.Equal(got, want) {
			t.Errorf("%s:\n bytes %s\n typed %s", c.name, got, want)
		}
		if !reflect.DeepEqual(jsonValue(t, got), jsonValue(t, want)) {
			t.Errorf("%s: another value\n bytes %s\n typed %s", c.name, got, want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: not JSON: %s", c.name, got)
		}
	}
}

// sdkAnswer is a session call's result as the typed path writes it:
// successResult, then encodeResult (the SDK's encoding).
func sdkAnswer(t testing.TB, r *gateway.CallResult) []byte {
	t.Helper()
	b, err := encodeResult(successResult(r, false))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A stdio session's result written as bytes is byte for byte the SDK's
// encoding of the typed result, upstream results included.
func TestSessionResultIsTheSDKs(t *testing.T) {
	for _, c := range resultCases {
		r := &gateway.CallResult{CallID: "call_01 \"x\"", Result: json.RawMessage(c.result), IsError: c.isError, Replayed: c.replayed}
		got, ok := appendSessionResult(nil, r)
		if !ok {
			t.Errorf("%s: not written as bytes", c.name)
			continue
		}
		if want := sdkAnswer(t, r); !bytes.Equal(got, want) {
			t.Errorf("%s:\n bytes %s\n   SDK %s", c.name, got, want)
		}
	}
}

// Whatever a session's result written as bytes is, it is the SDK's
// encoding of the typed result.
func FuzzSessionResult(f *testing.F) {
	for _, c := range resultCases {
		f.Add(c.result, c.isError, c.replayed)
	}
	f.Fuzz(func(t *testing.T, result string, isError, replayed bool) {
		if !json.Valid([]byte(result)) {
			return // the gateway passes only one strict JSON value
		}
		r := &gateway.CallResult{CallID: "call_1", Result: json.RawMessage(result), IsError: isError, Replayed: replayed}
		got, ok := appendSessionResult(nil, r)
		if !ok {
			return
		}
		if want := sdkAnswer(t, r); !bytes.Equal(got, want) {
			t.Errorf("%s:\n bytes %s\n   SDK %s", result, got, want)
		}
	})
}

// What the typed path rewrites is never written as bytes: other content
// blocks (read into the SDK's types, or sent as text when it cannot carry
// them), an upstream's _meta (merged with the gateway's), strings with \u
// escapes (one decoder reads them, clients never read them apart),
// members a text block has beyond type and text, an isError that is not
// a boolean, and an error of Backplane's own (its object leaves
// structuredContent for a tool with an output schema).
func TestFastResultLeavesRewritesToTheTypedPath(t *testing.T) {
	for _, c := range []struct {
		name    string
		result  string
		isError bool
	}{
		{"image", `{"content":[{"type":"image","data":"AAAA","mimeType":"image/png"}]}`, false},
		{"resource link", `{"content":[{"type":"resource_link","uri":"file:///etc/passwd","name":"p"}]}`, false},
		{"embedded resource", `{"content":[{"type":"resource","resource":{"uri":"x://y","text":"t"}}]}`, false},
		{"a text block and an image", `{"content":[{"type":"text","text":"x"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}`, false},
		{"an unknown block type", `{"content":[{"type":"video","text":"x"}]}`, false},
		{"upstream _meta", `{"content":[{"type":"text","text":"x"}],"_meta":{"backplane/call_id":"forged"}}`, false},
		{"a \\u escape", `{"content":[{"type":"text","text":"\ud800"}]}`, false},
		{"an escaped backslash before u", `{"content":[{"type":"text","text":"C:\\users"}]}`, false},
		{"annotations", `{"content":[{"type":"text","text":"x","annotations":{"audience":["user"]}}]}`, false},
		{"text not a string", `{"content":[{"type":"text","text":1}]}`, false},
		{"isError not a boolean", `{"content":[{"type":"text","text":"x"}],"isError":"yes"}`, false},
		{"own error", `{"class":"validation","message":"no"}`, true},
	} {
		r := &gateway.CallResult{CallID: "call_1", Result: json.RawMessage(c.result), IsError: c.isError}
		if got, ok := appendFastResult(nil, r); ok {
			t.Errorf("%s: written as bytes (%s); the typed path must answer it", c.name, got)
		}
		if got, ok := appendSessionResult(nil, r); ok {
			t.Errorf("%s: a session's written as bytes (%s); the typed path must answer it", c.name, got)
		}
	}
	// The typed path does rewrite them: the forged call id is replaced,
	// the own error's object moves to _meta for a tool with an output
	// schema.
	forged := typedAnswer(t, &gateway.CallResult{CallID: "call_1", Result: json.RawMessage(`{"content":[{"type":"text","text":"x"}],"_meta":{"backplane/call_id":"forged"}}`)}, false)
	if !bytes.Contains(forged, []byte(`"call_1"`)) || bytes.Contains(forged, []byte("forged")) {
		t.Errorf("typed path kept a forged call id: %s", forged)
	}
	own := typedAnswer(t, &gateway.CallResult{CallID: "call_1", Result: json.RawMessage(`{"class":"validation"}`), IsError: true}, true)
	if bytes.Contains(own, []byte(`"structuredContent"`)) || !bytes.Contains(own, []byte(MetaError)) {
		t.Errorf("typed path left an own error's object in structuredContent: %s", own)
	}
}

// A result written as bytes allocates less than half what the typed
// path does (for an upstream's text result: the member and element lists
// of its reading, against the SDK's values and their encoding).
func TestFastResultAllocations(t *testing.T) {
	r := &gateway.CallResult{CallID: "call_1", Result: json.RawMessage(`{"content":[{"type":"text","text":"hello"}],"isError":false}`)}
	buf := make([]byte, 0, 512)
	bytesPath := testing.AllocsPerRun(100, func() { appendFastResult(buf[:0], r) })
	typed := testing.AllocsPerRun(100, func() {
		enc := json.NewEncoder(bytes.NewBuffer(buf[:0]))
		enc.SetEscapeHTML(false)
		enc.Encode(resultTyped(successResult(r, false), "complete"))
	})
	if bytesPath*2 > typed {
		t.Errorf("%v allocations as bytes, %v typed: want at most half", bytesPath, typed)
	}
	t.Logf("%v allocations as bytes, %v typed", bytesPath, typed)
}

// BenchmarkFastResult is a successful call's result made into the fast
// path's answer, as bytes (appendFastResult) and through the SDK's types
// (successResult, resultTyped, the encoder), and into a stdio session's
// (appendSessionResult, against successResult and encodeResult), for an
// upstream's text result and for a value of Backplane's own.
//
//	go test ./server -run '^$' -bench FastResult -benchmem
func BenchmarkFastResult(b *testing.B) {
	for _, c := range []struct{ name, result string }{
		{"upstream-text", `{"content":[{"type":"text","text":"Echo: write the quarterly summary for the team, in plain words"}],"isError":false}`},
		// What internal/mcpbench's Go echo upstream answers.
		{"upstream-echo", `{"content":[{"type":"text","text":"{\"text\":\"benchmark call\"}"}],"structuredContent":{"text":"benchmark call"}}`},
		{"own", `{"echo":{"text":"write the quarterly summary for the team, in plain words","n":3}}`},
	} {
		r := &gateway.CallResult{CallID: "call_mkq3x2k9abcdefghijklmnop", Result: json.RawMessage(c.result)}
		b.Run(c.name+"/bytes", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := appendFastResult(make([]byte, 0, 2*len(r.Result)+192), r); !ok {
					b.Fatal("not written as bytes")
				}
			}
		})
		b.Run(c.name+"/session-bytes", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := appendSessionResult(make([]byte, 0, 2*len(r.Result)+192), r); !ok {
					b.Fatal("not written as bytes")
				}
			}
		})
		b.Run(c.name+"/session-typed", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encodeResult(successResult(r, false)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/typed", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				buf := bytes.NewBuffer(make([]byte, 0, 512))
				enc := json.NewEncoder(buf)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(resultTyped(successResult(r, false), "complete")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
