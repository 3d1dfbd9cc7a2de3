package server

import (
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/tool"
)

// TestParseFastCall: what the fast path takes, and what it leaves to the
// SDK (false), so that the SDK answers it as it always did.
func TestParseFastCall(t *testing.T) {
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}`
	body := func(id, params string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{` + params + `}}`
	}
	ok := body("7", `"name":"echo","arguments":{"text":"x"},`+meta)
	fc, taken := parseFastCall([]byte(ok), "2026-07-28", "echo")
	if !taken {
		t.Fatal("a plain call is not taken")
	}
	if string(fc.id) != "7" || fc.name != "echo" || string(fc.args) != `{"text":"x"}` || fc.modern.version != "2026-07-28" || fc.modern.client == nil || fc.modern.client.Name != "c" {
		t.Errorf("parsed %+v", fc)
	}
	for _, good := range []string{
		body(`"abc"`, `"name":"echo",`+meta),
		body("-12", `"name":"echo","arguments":{},`+meta),
		body("1", `"name":"echo",`+strings.Replace(meta, `clientCapabilities":{}`, `clientCapabilities":{"elicitation":{"form":{}},"roots":{"listChanged":true}}`, 1)),
		body("1", `"name":"echo",`+strings.Replace(meta, `{"name":"c","version":"1"}`, `{"name":"c","version":"1","title":"T"}`, 1)),
	} {
		if _, taken := parseFastCall([]byte(good), "2026-07-28", "echo"); !taken {
			t.Errorf("not taken: %s", good)
		}
	}
	for why, bad := range map[string]string{
		"a batch":                  "[" + ok + "]",
		"another method":           strings.Replace(ok, `"tools/call"`, `"tools/list"`, 1),
		"jsonrpc 1.0":              strings.Replace(ok, `"2.0"`, `"1.0"`, 1),
		"a member more":            strings.Replace(ok, `"id":7`, `"id":7,"x":1`, 1),
		"a repeated id":            strings.Replace(ok, `"jsonrpc":"2.0"`, `"id":8`, 1),
		"a float id":               body("7.0", `"name":"echo",`+meta),
		"a long id":                body("1234567890123456", `"name":"echo",`+meta),
		"an escaped id":            body(`"a\u0041"`, `"name":"echo",`+meta),
		"a null id":                body("null", `"name":"echo",`+meta),
		"a negative zero id":       body("-0", `"name":"echo",`+meta),
		"a leading zero id":        body("07", `"name":"echo",`+meta),
		"null arguments":           body("1", `"name":"echo","arguments":null,`+meta),
		"array arguments":          body("1", `"name":"echo","arguments":[],`+meta),
		"another name":             body("1", `"name":"danger",`+meta),
		"no _meta":                 body("1", `"name":"echo"`),
		"a progress token":         body("1", `"name":"echo",`+strings.Replace(meta, `"_meta":{`, `"_meta":{"progressToken":1,`, 1)),
		"a log level":              body("1", `"name":"echo",`+strings.Replace(meta, `"_meta":{`, `"_meta":{"io.modelcontextprotocol/logLevel":"debug",`, 1)),
		"a request state":          body("1", `"name":"echo","requestState":"s",`+meta),
		"input responses":          body("1", `"name":"echo","inputResponses":{},`+meta),
		"a repeated name":          body("1", `"name":"echo","name":"echo",`+meta),
		"no capabilities":          body("1", `"name":"echo",`+strings.Replace(meta, `"io.modelcontextprotocol/clientCapabilities":{},`, ``, 1)),
		"null capabilities":        body("1", `"name":"echo",`+strings.Replace(meta, `clientCapabilities":{}`, `clientCapabilities":null`, 1)),
		"capabilities by case":     body("1", `"name":"echo",`+strings.Replace(meta, `clientCapabilities":{}`, `clientCapabilities":{"Elicitation":{}}`, 1)),
		"nested by case":           body("1", `"name":"echo",`+strings.Replace(meta, `clientCapabilities":{}`, `clientCapabilities":{"roots":{"ListChanged":true}}`, 1)),
		"a repeated capability":    body("1", `"name":"echo",`+strings.Replace(meta, `clientCapabilities":{}`, `clientCapabilities":{"roots":{},"roots":{}}`, 1)),
		"client info by case":      body("1", `"name":"echo",`+strings.Replace(meta, `{"name":"c","version":"1"}`, `{"Name":"c"}`, 1)),
		"client info not a string": body("1", `"name":"echo",`+strings.Replace(meta, `{"name":"c","version":"1"}`, `{"name":1}`, 1)),
		"an old version":           body("1", `"name":"echo",`+strings.Replace(meta, `"2026-07-28"`, `"2025-11-25"`, 1)),
		"not JSON":                 ok[:len(ok)-1],
		"invalid UTF-8 in a name":  body("1", "\"name\":\"ech\xff\","+meta),
	} {
		if _, taken := parseFastCall([]byte(bad), "2026-07-28", "echo"); taken {
			t.Errorf("%s: taken: %s", why, bad)
		}
	}
	if _, taken := parseFastCall([]byte(ok), "2099-01-01", "echo"); taken {
		t.Error("a body whose version is not the header's is taken")
	}
}

// TestFastPathClientListensToNothing: the fast path's requests carry no
// progress token and no log level, so their client tells the upstream
// backend to ask its server for neither (tool.ListeningClient); a
// session's request with a token takes progress and log messages.
func TestFastPathClientListensToNothing(t *testing.T) {
	var c tool.Client = modernClient{sessionClient: &sessionClient{}}
	lc, ok := c.(tool.ListeningClient)
	if !ok {
		t.Fatal("the fast path's client is not a tool.ListeningClient")
	}
	if progress, logs := lc.Listens(); progress || logs {
		t.Errorf("Listens() = %v, %v; want false, false", progress, logs)
	}
	ss := &mcp.ServerSession{}
	if progress, logs := (&sessionClient{ss: ss, token: "t"}).Listens(); !progress || !logs {
		t.Errorf("a session's call with a token: Listens() = %v, %v; want true, true", progress, logs)
	}
	if progress, logs := (&sessionClient{ss: ss}).Listens(); progress || !logs {
		t.Errorf("a session's call without a token: Listens() = %v, %v; want false, true", progress, logs)
	}
}

// TestPlainCapsAsDecoded: the capabilities plainCaps reads directly are
// the values decodeCaps (the standard library, where it reads as the
// SDK's decoder) gives, and what it does not read is left to decodeCaps.
func TestPlainCapsAsDecoded(t *testing.T) {
	for _, caps := range []string{
		`{"roots":{}}`, `{"roots":{"listChanged":true}}`, `{"sampling":{}}`, `{"elicitation":{}}`, `{"elicitation":{"form":{}}}`, `{"elicitation":{"url":{}}}`,
		`{"elicitation":{"form":{},"url":{}},"roots":{}}`, `{"roots":{"listChanged":true},"sampling":{},"elicitation":{"url":{},"form":{}}}`,
	} {
		plain, ok := plainCaps([]byte(caps))
		if !ok {
			t.Errorf("%s: not read directly", caps)
			continue
		}
		decoded, ok := decodeCaps([]byte(caps))
		if !ok {
			t.Fatalf("%s: not decoded", caps)
		}
		if !reflect.DeepEqual(plain, decoded) {
			t.Errorf("%s: read as %+v, decoded as %+v", caps, plain, decoded)
		}
	}
	for _, caps := range []string{
		`{"roots":{"listChanged":false}}`, `{"roots":{ "listChanged":true}}`, `{"roots":{},"roots":{}}`, `{"Roots":{}}`, `{"sampling":{"tools":{}}}`,
		`{"elicitation":{"form":{},"form":{}}}`, `{"elicitation":{"form":null}}`, `{"experimental":{}}`, `{"roots":null}`,
	} {
		if c, ok := plainCaps([]byte(caps)); ok {
			t.Errorf("%s: read directly as %+v; it is decodeCaps's (or the SDK's) to read", caps, c)
		}
	}
}
