package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/server"
)

// The fast path (fastpath.go): a 2026-07-28 tools/call is answered as
// plain JSON when nothing needs an event stream, with what the SDK's path
// answers; anything the fast path does not take reaches the SDK, which
// answers as before.

// contentTypes records the Content-Type of every tools/call answer.
type contentTypes struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (c *contentTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil && r.Header.Get("Mcp-Method") == "tools/call" {
		c.mu.Lock()
		c.seen = append(c.seen, resp.Header.Get("Content-Type"))
		c.mu.Unlock()
	}
	return resp, err
}

// TestFastPathGoClient: the Go SDK's 2026-07-28 client's calls take the
// fast path (application/json), and their results are what the SDK's
// path gives: the echo, resultType complete, the call id; a refused call
// is a tool error; an unknown tool is invalid params (HTTP 400).
func TestFastPathGoClient(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	ct := &contentTypes{base: http.DefaultTransport}
	connect := func(token string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "fast-client", Version: "v1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: hs.URL + server.PathMCP, HTTPClient: &http.Client{Transport: bearerTransport{token, ct}}, MaxRetries: -1,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs := connect("tok-alice")
	res := call(t, cs, "echo", map[string]any{"text": "fast"})
	if res.IsError || structured(t, res)["echo"] == nil {
		t.Fatalf("result %s", text(res))
	}
	id, _ := res.Meta[server.MetaCallID].(string)
	in, err := f.st.GetIntent(context.Background(), id)
	if err != nil {
		t.Fatalf("call id %q: %v", id, err)
	}
	if in.Session != "" || in.Tool != "echo" {
		t.Errorf("journal: session %q tool %q", in.Session, in.Tool)
	}
	// danger needs an approval, which this client cannot give: a tool
	// result with isError (approval_required).
	refused := call(t, cs, "danger", map[string]any{"target": "x"})
	if !refused.IsError || !strings.Contains(text(refused), "approval") {
		t.Errorf("call of danger: %s, want approval_required", text(refused))
	}
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "no-such-tool", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), "-32602") && !strings.Contains(err.Error(), "no-such-tool") {
		t.Errorf("unknown tool: %v, want invalid params", err)
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if len(ct.seen) != 3 {
		t.Fatalf("%d tools/call answers recorded, want 3", len(ct.seen))
	}
	for i, c := range ct.seen {
		if c != "application/json" {
			t.Errorf("answer %d: Content-Type %q, want application/json (the fast path)", i, c)
		}
	}
	if n := f.echoes.Load(); n != 1 {
		t.Errorf("echo ran %d times, want 1", n)
	}
}

// TestFastPathWire: raw requests, each answered as the SDK's path answers
// it: fast (application/json) where nothing needs a stream, the SDK's
// event stream with a progress token, the SDK's errors for what it
// refuses.
func TestFastPathWire(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	u := hs.URL
	echo := func(meta map[string]any) map[string]any {
		return map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "_meta": meta}
	}
	t.Run("fast", func(t *testing.T) {
		r := post(t, u, "tok-alice", "tools/call", echo(modernMeta(`{"elicitation":{}}`)), nil)
		if r.Error != nil || str(r.Result["resultType"]) != "complete" || r.status != http.StatusOK {
			t.Fatalf("HTTP %d %+v", r.status, r)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
		var sc map[string]any
		json.Unmarshal(r.Result["structuredContent"], &sc)
		if sc["echo"] == nil {
			t.Errorf("structuredContent %s", r.Result["structuredContent"])
		}
	})
	t.Run("progress token: the SDK's stream", func(t *testing.T) {
		meta := modernMeta(`{}`)
		meta["progressToken"] = "p1"
		r := post(t, u, "tok-alice", "tools/call", echo(meta), nil)
		if r.Error != nil || str(r.Result["resultType"]) != "complete" {
			t.Fatalf("HTTP %d %+v", r.status, r)
		}
		if ct := r.header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q, want text/event-stream (the SDK's path)", ct)
		}
	})
	t.Run("unknown tool", func(t *testing.T) {
		r := post(t, u, "tok-alice", "tools/call", map[string]any{"name": "nope", "arguments": map[string]any{}, "_meta": modernMeta(`{}`)}, nil)
		if r.status != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("HTTP %d %+v, want 400 and -32602", r.status, r.Error)
		}
	})
	t.Run("SDK errors", func(t *testing.T) {
		noCaps := modernMeta(`{}`)
		delete(noCaps, "io.modelcontextprotocol/clientCapabilities")
		badVersion := modernMeta(`{}`)
		badVersion["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
		caseCaps := modernMeta(`{"Elicitation":{}}`)
		for name, c := range map[string]struct {
			meta   map[string]any
			hdr    map[string]string
			status int
			code   int64
		}{
			"Mcp-Name mismatch":   {modernMeta(`{}`), map[string]string{"Mcp-Name": "danger"}, 400, -32020},
			"meta version":        {badVersion, nil, 400, -32020},
			"header version":      {badVersion, map[string]string{"Mcp-Protocol-Version": "2099-01-01"}, 400, -32022},
			"no capabilities":     {noCaps, nil, 400, -32602},
			"capabilities' cases": {caseCaps, nil, 200, 0},
		} {
			r := post(t, u, "tok-alice", "tools/call", echo(c.meta), c.hdr)
			switch {
			case c.code == 0 && r.Error != nil:
				t.Errorf("%s: %+v", name, r.Error)
			case c.code != 0 && (r.Error == nil || r.Error.Code != c.code):
				t.Errorf("%s: HTTP %d %+v, want %d", name, r.status, r.Error, c.code)
			case r.status != c.status:
				t.Errorf("%s: HTTP %d, want %d", name, r.status, c.status)
			}
		}
	})
	t.Run("input_required for a self-approval", func(t *testing.T) {
		r := post(t, u, "tok-alice", "tools/call", map[string]any{"name": "danger", "arguments": map[string]any{"target": "x"}, "_meta": modernMeta(`{"elicitation":{"form":{}}}`)}, nil)
		if r.Error != nil || str(r.Result["resultType"]) != "input_required" || r.Result["requestState"] == nil {
			t.Fatalf("HTTP %d %+v", r.status, r)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
	})
}

// TestFastPathUpstream: a 2026-07-28 call of an upstream's tool on the
// fast path gets the upstream's result, as plain JSON; an upstream's
// request in the middle of such a call (sampling) is refused as on the
// SDK's path (2026-07-28 has no server-to-client request mid-request),
// which the same call with a progress token (the SDK's path) shows.
func TestFastPathUpstream(t *testing.T) {
	s, audit := everything(t, &upstream.Bridge{Sampling: true})
	hs := httpServer(t, s)
	ct := &contentTypes{base: http.DefaultTransport}
	// A client that would answer sampling (deprecated at 2026-07-28, in
	// force): it is never asked in the middle of a 2026-07-28 call.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fast-client", Version: "v1"}, &mcp.ClientOptions{
		//lint:ignore SA1019 sampling is deprecated at 2026-07-28 and still in force
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			//lint:ignore SA1019 as above
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled"}}, nil
		},
	}).Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: hs.URL + server.PathMCP, HTTPClient: &http.Client{Transport: bearerTransport{"tok-e", ct}}, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res := callCtx(t, cs, &mcp.CallToolParams{Name: "everything.echo", Arguments: map[string]any{"message": "fast 31"}})
	if res.IsError || !strings.Contains(text(res), "fast 31") {
		t.Fatalf("echo: %s", text(res))
	}
	fast := callCtx(t, cs, &mcp.CallToolParams{Name: "everything.trigger-sampling-request", Arguments: map[string]any{"prompt": "x", "maxTokens": 5}})
	p := &mcp.CallToolParams{Name: "everything.trigger-sampling-request", Arguments: map[string]any{"prompt": "x", "maxTokens": 5}}
	p.SetProgressToken("via-sdk")
	viaSDK := callCtx(t, cs, p)
	if fast.IsError != viaSDK.IsError || strings.Contains(text(fast), "sampled") {
		t.Errorf("sampling mid-call: fast path %v %q, SDK path %v %q: want the same refusal", fast.IsError, text(fast), viaSDK.IsError, text(viaSDK))
	}
	if !auditHas(audit.String(), "upstream request", "sampling/createMessage", "refused") {
		t.Errorf("the refusal is not audited:\n%s", audit)
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	want := []string{"application/json", "application/json", "text/event-stream"}
	if !slices.Equal(ct.seen, want) {
		t.Errorf("answers' Content-Type %v, want %v (fast, fast, the SDK's stream)", ct.seen, want)
	}
}

// TestFastPathUpstreamResults: an upstream's results on the fast path
// (text results as the upstream's bytes, fastresult.go; images, resource
// links, embedded resources, annotations and structured content through
// the SDK's types) are the results the SDK's path gives the same call,
// the gateway's call id (and the SDK's serverInfo) aside.
func TestFastPathUpstreamResults(t *testing.T) {
	s, _ := everything(t, nil)
	hs := httpServer(t, s)
	withoutCallID := func(t *testing.T, res map[string]json.RawMessage) map[string]any {
		t.Helper()
		out := map[string]any{}
		for k, raw := range res {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			out[k] = v
		}
		meta, _ := out["_meta"].(map[string]any)
		if id, _ := meta[server.MetaCallID].(string); id == "" {
			t.Errorf("no call id in %v", out["_meta"])
		}
		delete(meta, server.MetaCallID)
		// The SDK's handler adds its serverInfo to what it answers; the
		// fast path never did (on either of its result paths).
		delete(meta, "io.modelcontextprotocol/serverInfo")
		return out
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		kind string // a content type the result must hold
	}{
		{"echo", map[string]any{"message": "fast <&> \"q\"\n"}, "text"},
		{"get-sum", map[string]any{"a": 2, "b": 3.5}, "text"},
		{"get-structured-content", map[string]any{"location": "Chicago"}, "text"},
		{"get-tiny-image", map[string]any{}, "image"},
		{"get-resource-links", map[string]any{"count": 2}, "resource_link"},
		{"get-annotated-message", map[string]any{"messageType": "error", "includeImage": true}, "image"},
		{"get-resource-reference", map[string]any{"resourceId": 2}, "resource"},
	} {
		params := func(progress bool) map[string]any {
			meta := modernMeta(`{}`)
			if progress {
				meta["progressToken"] = "via-sdk" // the SDK's path
			}
			return map[string]any{"name": "everything." + c.tool, "arguments": c.args, "_meta": meta}
		}
		fast := post(t, hs.URL, "tok-e", "tools/call", params(false), nil)
		viaSDK := post(t, hs.URL, "tok-e", "tools/call", params(true), nil)
		if fast.Error != nil || viaSDK.Error != nil {
			t.Fatalf("%s: %+v / %+v", c.tool, fast.Error, viaSDK.Error)
		}
		if ct := fast.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q, want the fast path's application/json", c.tool, ct)
		}
		if !strings.Contains(string(fast.Result["content"]), `"type":"`+c.kind+`"`) {
			t.Errorf("%s: content %s holds no %s block", c.tool, fast.Result["content"], c.kind)
		}
		if c.tool == "echo" && !strings.Contains(string(fast.Result["content"]), "<&>") {
			// The upstream (JavaScript's JSON.stringify) leaves <&> as
			// they are; encoding/json, the typed path, escapes them.
			t.Errorf("echo: content %s is not the upstream's bytes", fast.Result["content"])
		}
		got, want := withoutCallID(t, fast.Result), withoutCallID(t, viaSDK.Result)
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("%s: the fast path's result\n %.600s\nthe SDK path's\n %.600s", c.tool, g, w)
		}
	}
}
