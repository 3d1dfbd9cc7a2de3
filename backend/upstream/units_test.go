package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/tool"
)

// TestSSEParser feeds a stream one byte at a time and whole: events end at
// a blank line, data lines join with "\n", lines end with CRLF, LF or CR,
// other fields and comments are ignored, and an event the stream ends in
// the middle of is dropped.
func TestSSEParser(t *testing.T) {
	stream := "event: message\ndata: a\n\ndata: b\r\ndata: c\r\n\r\n: comment\nid: 7\ndata:d\r\rdata: {\"x\":1}\n\ndata: cut"
	want := []string{"a", "b\nc", "d", `{"x":1}`}
	for _, step := range []int{1, 2, 3, len(stream)} {
		var got []string
		p := sseParser{fn: func(data []byte) { got = append(got, string(data)) }}
		for i := 0; i < len(stream); i += step {
			p.feed([]byte(stream[i:min(i+step, len(stream))]))
		}
		if !slices.Equal(got, want) {
			t.Errorf("fed %d bytes at a time: %q, want %q", step, got, want)
		}
	}
}

// TestMembers: exact names (escapes resolved), raw values, duplicates and
// non-objects refused.
func TestMembers(t *testing.T) {
	m, err := members([]byte(`{"a\u0062": 1.0, "c": {"d": [1, 2]}}`))
	if err != nil || string(m["ab"]) != "1.0" || string(m["c"]) != `{"d": [1, 2]}` {
		t.Errorf("members: %q, %v", m, err)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[1]`, `"x"`, `{"a":`, ``} {
		if _, err := members([]byte(bad)); err == nil {
			t.Errorf("members(%s) accepted", bad)
		}
	}
}

// TestParseToolsPage covers what a tools/list result may get wrong.
func TestParseToolsPage(t *testing.T) {
	tools, next, err := parseToolsPage([]byte(`{"tools":[{"name":"a","inputSchema":{"type":"object","minimum":1.0},
		"annotations":{"readOnlyHint":true,"idempotentHint":"yes"}},{"name":"b","description":"B","inputSchema":true}],"nextCursor":"p2"}`))
	if err != nil || next != "p2" || len(tools) != 2 {
		t.Fatalf("%v %q %v", tools, next, err)
	}
	if string(tools[0].InputSchema) != `{"type":"object","minimum":1.0}` || string(tools[1].InputSchema) != "true" || tools[1].Description != "B" {
		t.Errorf("tools %+v", tools)
	}
	if ro := tools[0].Annotations.ReadOnly; ro == nil || !*ro || tools[0].Annotations.Idempotent != nil {
		t.Errorf("hints %+v: readOnlyHint true, a non-boolean idempotentHint is no hint", tools[0].Annotations)
	}
	for _, bad := range []string{
		`{}`, `{"tools":{}}`, `{"tools":[{"inputSchema":{}}]}`, `{"tools":[{"name":""}]}`,
		`{"tools":[{"name":"a","name":"b"}]}`, `{"tools":[],"nextCursor":3}`, `{"tools":[{"name":"a","description":7}]}`,
	} {
		if _, _, err := parseToolsPage([]byte(bad)); err == nil {
			t.Errorf("parseToolsPage(%s) accepted", bad)
		}
	}
}

// TestResultOf: the members the server sent, as sent; isError always.
func TestResultOf(t *testing.T) {
	for raw, want := range map[string]string{
		`{"content":[{"type":"text","text":"<&>"}],"_meta":{"x":1},"isError":true}`: `{"content":[{"type":"text","text":"<&>"}],"isError":true}`,
		`{"structuredContent":{"n":1.50},"content":[]}`:                             `{"content":[],"structuredContent":{"n":1.50},"isError":false}`,
		`{"content":[],"isError":null}`:                                             `{"content":[],"isError":false}`,
	} {
		res, err := resultOf([]byte(raw))
		if err != nil || string(res.Content) != want || res.IsError != strings.Contains(want, `"isError":true`) {
			t.Errorf("resultOf(%s) = %s, %v; want %s", raw, res.Content, err, want)
		}
	}
	for _, bad := range []string{`[]`, `{"isError":"yes"}`, `{"content":[],"content":[]}`} {
		if _, err := resultOf([]byte(bad)); !errors.Is(err, tool.ErrMalformedResult) {
			t.Errorf("resultOf(%s): %v, want ErrMalformedResult", bad, err)
		}
	}
}

// TestSafety: only readOnlyHint true spares the approval, and a re-listed
// tool's flags only tighten.
func TestSafety(t *testing.T) {
	yes, no := true, false
	mkRaw := func(ro, id *bool) rawTool {
		var r rawTool
		r.Annotations.ReadOnly, r.Annotations.Idempotent = ro, id
		return r
	}
	destructive := func(ro, d *bool) rawTool {
		r := mkRaw(ro, nil)
		r.Annotations.Destructive = d
		return r
	}
	for _, c := range []struct {
		t    rawTool
		want tool.Safety
	}{
		{mkRaw(nil, nil), tool.Safety{RequiresApproval: true}},
		{mkRaw(&no, &yes), tool.Safety{Idempotent: true, RequiresApproval: true}},
		{mkRaw(&yes, nil), tool.Safety{ReadOnly: true}},
		{mkRaw(&yes, &yes), tool.Safety{ReadOnly: true, Idempotent: true}},
		{destructive(&yes, &no), tool.Safety{ReadOnly: true}},
		{destructive(&yes, &yes), tool.Safety{RequiresApproval: true}}, // a contradiction: the safe reading
		{destructive(nil, &yes), tool.Safety{RequiresApproval: true}},
	} {
		if got := safetyOf(c.t); got != c.want {
			t.Errorf("safetyOf(%+v) = %+v, want %+v", c.t.Annotations, got, c.want)
		}
	}
	loose := tool.Safety{ReadOnly: true, Idempotent: true}
	strict := tool.Safety{RequiresApproval: true}
	if got := tighten(strict, loose); got != strict {
		t.Errorf("tighten(strict, loose) = %+v", got)
	}
	if got := tighten(loose, strict); got != strict {
		t.Errorf("tighten(loose, strict) = %+v", got)
	}
}

// TestServerCheck: one of command and url, names fit NAME.TOOL, header
// values are never quoted in errors.
func TestServerCheck(t *testing.T) {
	good := []Server{
		{Name: "a", Command: []string{"x"}},
		{Name: "A_b-9", URL: "https://h/mcp", Headers: map[string]string{"Authorization": "Bearer s"}, Validator: ValidatorDraft2020},
	}
	for _, s := range good {
		if err := s.Check(); err != nil {
			t.Errorf("%+v: %v", s.Name, err)
		}
	}
	for _, c := range []struct {
		s    Server
		want string
	}{
		{Server{Name: "a.b", Command: []string{"x"}}, "server name"},
		{Server{Name: "", Command: []string{"x"}}, "server name"},
		{Server{Name: "a"}, "needs a command or a url"},
		{Server{Name: "a", Command: []string{"x"}, URL: "http://h"}, "not both"},
		{Server{Name: "a", Command: []string{""}}, "program"},
		{Server{Name: "a", URL: "ftp://h"}, "http"},
		{Server{Name: "a", URL: "http://"}, "host"},
		{Server{Name: "a", URL: "http://h", Env: []string{"X"}}, "env"},
		{Server{Name: "a", Command: []string{"x"}, Headers: map[string]string{"A": "b"}}, "headers"},
		{Server{Name: "a", URL: "http://h", Headers: map[string]string{"Bad Name": "s3cr3t"}}, "header name"},
		{Server{Name: "a", URL: "http://h", Headers: map[string]string{"X": "s3cr3t\r\nInjected: 1"}}, "control character"},
		{Server{Name: "a", Command: []string{"x"}, Validator: "draft7"}, "validator"},
	} {
		err := c.s.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.s, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("the error quotes a header value: %v", err)
		}
	}
}

// TestToolsCallResultDecodedOnce: over stdio, the answer to a followed
// tools/call reaches the exchange as the exact bytes sent, and the SDK is
// handed errTakenRaw in its place (it does not decode the result again);
// other answers reach the SDK unchanged.
func TestToolsCallResultDecodedOnce(t *testing.T) {
	a, b := mcpstream.Pipe(nil)
	w := newWire()
	gw, err := (&trackedTransport{inner: a, wire: w}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	peer, err := b.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ctx := context.Background()
	call := &exchange{method: "tools/call"}
	for i, c := range []struct {
		e      *exchange
		method string
	}{{call, "tools/call"}, {nil, "tools/list"}} {
		id, _ := jsonrpc.MakeID(float64(i + 1))
		wctx := ctx
		if c.e != nil {
			wctx = withExchange(ctx, c.e)
		}
		go gw.Write(wctx, &jsonrpc.Request{ID: id, Method: c.method, Params: json.RawMessage(`{}`)})
		if _, err := peer.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	raw := `{"content":[{"type":"text","text":"x","unknown":1.0}],"isError":false}`
	go func() { // in order, from one goroutine
		for i, res := range []string{raw, `{"tools":[]}`} {
			id, _ := jsonrpc.MakeID(float64(i + 1))
			peer.Write(ctx, &jsonrpc.Response{ID: id, Result: json.RawMessage(res)})
		}
	}()
	m, err := gw.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := m.(*jsonrpc.Response); !ok || !errors.Is(r.Error, errTakenRaw) || r.Result != nil || r.ID.Raw() != int64(1) {
		t.Fatalf("the SDK was handed %#v", m)
	}
	if _, done, got, rpcErr := call.state(); !done || rpcErr != nil || string(got) != raw {
		t.Fatalf("the exchange holds %q (done %v, %v)", got, done, rpcErr)
	}
	m, err = gw.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := m.(*jsonrpc.Response); !ok || r.Error != nil || string(r.Result) != `{"tools":[]}` {
		t.Fatalf("an answer not followed was changed: %#v", m)
	}
}
