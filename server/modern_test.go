package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
)

// These tests speak 2026-07-28 (no session, per-request _meta) to the
// server: through the Go SDK v1.8.0 client, which discovers first, and
// through raw HTTP requests where the wire itself is the point.

// connectModern connects a Go SDK client to hs's /mcp with token at
// 2026-07-28.
func connectModern(t *testing.T, hs string, token string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	tr := &mcp.StreamableClientTransport{
		Endpoint:   hs + server.PathMCP,
		HTTPClient: &http.Client{Transport: bearerTransport{token, http.DefaultTransport}},
		MaxRetries: -1,
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "modern-client", Version: "v9"}, copts)
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != server.ModernProtocolVersion {
		t.Fatalf("the client speaks %s, want %s", v, server.ModernProtocolVersion)
	}
	if id := cs.ID(); id != "" {
		t.Errorf("a 2026-07-28 client has session id %q", id)
	}
	return cs
}

func TestModernListAndCall(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	cs := connectModern(t, hs.URL, "tok-alice", nil)
	ctx := context.Background()
	lr, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(lr.Tools)
	if !slices.IsSorted(names) || !slices.Contains(names, "echo") {
		t.Errorf("tools %v: want the caller's tools in name order", names)
	}
	if lr.CacheScope != "private" {
		t.Errorf("cacheScope %q, want private: each caller sees its own list", lr.CacheScope)
	}
	res := call(t, cs, "echo", map[string]any{"text": "hi"})
	if res.IsError || structured(t, res)["echo"] == nil {
		t.Fatalf("result %s", text(res))
	}
	in, err := f.st.GetIntent(ctx, res.Meta[server.MetaCallID].(string))
	if err != nil {
		t.Fatal(err)
	}
	if in.Session != "" {
		t.Errorf("a 2026-07-28 call was recorded in session %q", in.Session)
	}
}

// rpc is one raw JSON-RPC answer.
type rpc struct {
	status int
	Result map[string]json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	header http.Header
}

// modernMeta is the _meta of a 2026-07-28 request.
func modernMeta(caps string) map[string]any {
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    server.ModernProtocolVersion,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": json.RawMessage(caps),
	}
}

// post sends one request to /mcp; hdr overrides the standard headers
// (a value "" removes one).
func post(t *testing.T, url, token, method string, params map[string]any, hdr map[string]string) rpc {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, url+server.PathMCP, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Protocol-Version", server.ModernProtocolVersion)
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out rpc
	out.status, out.header = resp.StatusCode, resp.Header
	var data []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"id"`) {
				data = []byte(d)
			}
		}
	} else {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		data = b.Bytes()
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: HTTP %d, not a JSON-RPC answer: %q", method, resp.StatusCode, data)
	}
	return out
}

func str(raw json.RawMessage) string {
	var s string
	json.Unmarshal(raw, &s)
	return s
}

func TestModernWire(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	u := hs.URL

	t.Run("discover", func(t *testing.T) {
		r := post(t, u, "tok-alice", "server/discover", map[string]any{"_meta": modernMeta(`{}`)}, nil)
		if r.Error != nil {
			t.Fatalf("error %+v", r.Error)
		}
		var versions []string
		json.Unmarshal(r.Result["supportedVersions"], &versions)
		if !slices.Contains(versions, "2026-07-28") || !slices.Contains(versions, "2025-11-25") {
			t.Errorf("supportedVersions %v: want both eras", versions)
		}
		if r.header.Get("Mcp-Session-Id") != "" {
			t.Errorf("a session id was minted: %q", r.header.Get("Mcp-Session-Id"))
		}
	})
	t.Run("list and call results", func(t *testing.T) {
		r := post(t, u, "tok-alice", "tools/list", map[string]any{"_meta": modernMeta(`{}`)}, nil)
		if r.Error != nil || str(r.Result["resultType"]) != "complete" || str(r.Result["cacheScope"]) != "private" || r.Result["ttlMs"] == nil {
			t.Errorf("tools/list: %+v", r)
		}
		r = post(t, u, "tok-alice", "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "_meta": modernMeta(`{}`)}, nil)
		if r.Error != nil || str(r.Result["resultType"]) != "complete" {
			t.Errorf("tools/call: %+v", r)
		}
	})
	t.Run("header mismatch", func(t *testing.T) {
		for name, hdr := range map[string]map[string]string{
			"Mcp-Method":           {"Mcp-Method": "tools/list"},
			"no Mcp-Method":        {"Mcp-Method": ""},
			"Mcp-Name":             {"Mcp-Name": "danger"},
			"no Mcp-Name":          {"Mcp-Name": ""},
			"Mcp-Protocol-Version": {"Mcp-Protocol-Version": "2025-11-25"},
		} {
			r := post(t, u, "tok-alice", "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"text": "x"}, "_meta": modernMeta(`{}`)}, hdr)
			if r.status != http.StatusBadRequest || r.Error == nil || r.Error.Code != -32020 {
				t.Errorf("%s: HTTP %d %+v, want 400 and -32020", name, r.status, r.Error)
			}
		}
		if n := f.echoes.Load(); n != 1 {
			t.Errorf("echo ran %d times, want once (the list and call subtest)", n)
		}
	})
	t.Run("unsupported version", func(t *testing.T) {
		meta := modernMeta(`{}`)
		meta["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
		r := post(t, u, "tok-alice", "tools/list", map[string]any{"_meta": meta}, map[string]string{"Mcp-Protocol-Version": "2099-01-01"})
		if r.Error == nil || r.Error.Code != -32022 || !strings.Contains(string(r.Error.Data), "2026-07-28") {
			t.Errorf("HTTP %d %+v, want -32022 naming the versions served", r.status, r.Error)
		}
	})
	t.Run("no capabilities", func(t *testing.T) {
		meta := modernMeta(`{}`)
		delete(meta, "io.modelcontextprotocol/clientCapabilities")
		r := post(t, u, "tok-alice", "tools/list", map[string]any{"_meta": meta}, nil)
		if r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("HTTP %d %+v, want -32602", r.status, r.Error)
		}
	})
	t.Run("a session beside", func(t *testing.T) {
		// An initialize-era client gets its session on the same endpoint.
		legacy, err := mcp.NewClient(&mcp.Implementation{Name: "old"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: hs.URL + server.PathMCP, HTTPClient: &http.Client{Transport: bearerTransport{"tok-alice", http.DefaultTransport}}, MaxRetries: -1,
		}, sessionEra)
		if err != nil {
			t.Fatal(err)
		}
		defer legacy.Close()
		if legacy.ID() == "" || legacy.InitializeResult().ProtocolVersion != "2025-11-25" {
			t.Errorf("legacy session %q at %s", legacy.ID(), legacy.InitializeResult().ProtocolVersion)
		}
		if res := call(t, legacy, "echo", map[string]any{"text": "old"}); res.IsError {
			t.Errorf("legacy call: %s", text(res))
		}
	})
}

// TestModernSelfApproval: a self_approve rule and a client that declared
// elicitation: input_required, then the retry with the accepted answer
// runs the call once; the decision is the caller's, through elicitation,
// on the approval record operators see.
func TestModernSelfApproval(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  *mcp.ElicitResult
		ran     int64
		outcome string
	}{
		{"accept", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, 1, "approved"},
		{"decline", &mcp.ElicitResult{Action: "decline"}, 0, "denied"},
		{"approve false", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}}, 0, "denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
			e := &elicitor{answer: tc.answer}
			cs := connectModern(t, hs.URL, "tok-alice", &mcp.ClientOptions{ElicitationHandler: e.handle})
			res := call(t, cs, "danger", map[string]any{"target": "prod-db"})
			if got := f.dangers.Load(); got != tc.ran {
				t.Errorf("danger ran %d times, want %d (%s)", got, tc.ran, text(res))
			}
			if tc.ran == 1 && res.IsError {
				t.Errorf("the approved call failed: %s", text(res))
			}
			if tc.ran == 0 && (!res.IsError || structured(t, res)["class"] != "forbidden") {
				t.Errorf("the denied call: %s", text(res))
			}
			if e.count() != 1 {
				t.Fatalf("asked %d times, want once", e.count())
			}
			msg := e.asked[0].Message
			if !strings.Contains(msg, "tool: danger") || !strings.Contains(msg, "prod-db") {
				t.Errorf("the elicitation does not show what is approved:\n%s", msg)
			}
			aprs := approvalsOf(t, f.st, "danger")
			if len(aprs) != 1 || string(aprs[0].Status) != tc.outcome || aprs[0].DecidedBy != "alice" || aprs[0].Channel != "elicitation" {
				t.Errorf("approvals %+v", aprs)
			}
		})
	}
}

// TestModernApprovalRequiredWithoutElicitation: no elicitation declared
// (or no self_approve rule): approval_required at once.
func TestModernApprovalRequiredWithoutElicitation(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	r := post(t, hs.URL, "tok-alice", "tools/call", map[string]any{"name": "danger", "arguments": map[string]any{"target": "x"}, "_meta": modernMeta(`{}`)}, nil)
	var sc map[string]any
	json.Unmarshal(r.Result["structuredContent"], &sc)
	if r.Error != nil || str(r.Result["resultType"]) != "complete" || sc["class"] != "approval_required" {
		t.Errorf("%+v: want a complete result with approval_required", r)
	}
}

// TestModernRequestStateTamperedAndReplayed: the signed state binds the
// approval to the call; an altered one, one presented with other
// arguments or by another caller, and one used already are refused, and
// the tool never runs for them.
func TestModernRequestStateTamperedAndReplayed(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}}))
	caps := `{"elicitation":{"form":{}}}`
	args := map[string]any{"target": "prod-db"}
	first := post(t, hs.URL, "tok-alice", "tools/call", map[string]any{"name": "danger", "arguments": args, "_meta": modernMeta(caps)}, nil)
	if first.Error != nil || str(first.Result["resultType"]) != "input_required" {
		t.Fatalf("first answer %+v, want input_required", first)
	}
	var inputs map[string]struct {
		Method string `json:"method"`
	}
	json.Unmarshal(first.Result["inputRequests"], &inputs)
	if len(inputs) != 1 {
		t.Fatalf("inputRequests %s", first.Result["inputRequests"])
	}
	var key string
	for k, v := range inputs {
		key = k
		if v.Method != "elicitation/create" {
			t.Errorf("input request %s: %s", k, v.Method)
		}
	}
	state := str(first.Result["requestState"])
	accept := map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"approve": true}}}
	retry := func(token string, state string, args map[string]any) rpc {
		return post(t, hs.URL, token, "tools/call", map[string]any{"name": "danger", "arguments": args,
			"inputResponses": accept, "requestState": state, "_meta": modernMeta(caps)}, nil)
	}
	refused := func(what string, r rpc) {
		t.Helper()
		if r.Error == nil || r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "requestState") {
			t.Errorf("%s: %+v, want invalid params naming the request state", what, r)
		}
	}
	// Altered: one character of the payload, and the signature's.
	b := []byte(state)
	b[3] ^= 1
	refused("tampered payload", retry("tok-alice", string(b), args))
	refused("tampered signature", retry("tok-alice", state[:len(state)-2]+"AA", args))
	refused("another call's arguments", retry("tok-alice", state, map[string]any{"target": "other"}))
	refused("forged", retry("tok-alice", "eyJ2IjoxfQ.AAAA", args))
	if f.dangers.Load() != 0 {
		t.Fatal("the tool ran for a refused state")
	}
	if a := approvalsOf(t, f.st, "danger"); len(a) != 1 || a[0].Status != "pending" {
		t.Fatalf("a refused state decided the approval: %+v", a)
	}
	ok := retry("tok-alice", state, args)
	if ok.Error != nil || str(ok.Result["resultType"]) != "complete" || f.dangers.Load() != 1 {
		t.Fatalf("the genuine retry: %+v (ran %d)", ok, f.dangers.Load())
	}
	refused("replayed", retry("tok-alice", state, args))
	if f.dangers.Load() != 1 {
		t.Errorf("a replayed state ran the tool again: %d runs", f.dangers.Load())
	}
}

// TestModernStdio: a 2026-07-28 client over the stdio transport (an
// in-memory one here): the connection's session reads each request's
// _meta; self-approval is input_required there too.
func TestModernStdio(t *testing.T) {
	f := newFixture(t)
	e := &elicitor{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	s := server.New(f.g, &server.Options{StdioCaller: "alice"})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.Connect(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-client"}, &mcp.ClientOptions{ElicitationHandler: e.handle}).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != server.ModernProtocolVersion {
		t.Fatalf("stdio client at %s", v)
	}
	res := call(t, cs, "danger", map[string]any{"target": "stdio"})
	if res.IsError || f.dangers.Load() != 1 || e.count() != 1 {
		t.Errorf("result %s, ran %d, asked %d", text(res), f.dangers.Load(), e.count())
	}
}

// TestModernClientRecordedInAudit: the call's audit event names the
// client (clientInfo) and the protocol version, for a 2026-07-28 request
// and for a 2025-11-25 session alike.
func TestModernClientRecordedInAudit(t *testing.T) {
	st, err := sqlite.Open(t.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var audit bytes.Buffer
	g := gateway.New(&gateway.Options{Store: st, Policy: rules, Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &audit}, nil))})
	if err := g.Register(context.Background(), tool.Tool{Name: "echo", InputSchema: json.RawMessage(emptyObject), Safety: tool.Safety{ReadOnly: true},
		Backend: tool.BackendFunc(func(context.Context, *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{}`)}, nil
		})}); err != nil {
		t.Fatal(err)
	}
	hs := httpServer(t, server.New(g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}}))
	if r := post(t, hs.URL, "tok-alice", "tools/call", map[string]any{"name": "echo", "_meta": modernMeta(`{}`)}, nil); r.Error != nil {
		t.Fatalf("modern call: %+v", r.Error)
	}
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "old-client", Version: "1.2"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: hs.URL + server.PathMCP, HTTPClient: &http.Client{Transport: bearerTransport{"tok-alice", http.DefaultTransport}}, MaxRetries: -1,
	}, sessionEra)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	call(t, sess, "echo", map[string]any{})
	mu.Lock()
	defer mu.Unlock()
	var seen []string
	for _, line := range strings.Split(strings.TrimSpace(audit.String()), "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) != nil || ev["tool"] != "echo" {
			continue
		}
		seen = append(seen, fmt.Sprintf("%v@%v", ev["client"], ev["protocol_version"]))
	}
	want := []string{"raw/1@2026-07-28", "old-client/1.2@2025-11-25"}
	if !slices.Equal(seen, want) {
		t.Errorf("audit events name %v, want %v\n%s", seen, want, audit.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
