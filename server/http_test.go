package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/server"
)

// rawSession speaks MCP over HTTP by hand, so that the test reads the
// bytes the server sends, not what a client library decoded.
type rawSession struct {
	t     *testing.T
	url   string
	token string
	id    string
	next  int
}

func newRawSession(t *testing.T, hs *httptest.Server, token string) *rawSession {
	r := &rawSession{t: t, url: hs.URL + server.PathMCP, token: token}
	resp, body := r.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %s %s", resp.Status, body)
	}
	r.id = resp.Header.Get("Mcp-Session-Id")
	if r.id == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	resp, body = r.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %s %s", resp.Status, body)
	}
	return r
}

// post sends one message and returns the response and its JSON-RPC message
// (the data of the first SSE event, or the JSON body).
func (r *rawSession) post(msg string) (*http.Response, []byte) {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.id != "" {
		req.Header.Set("Mcp-Session-Id", r.id)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return resp, []byte(data)
		}
	}
	r.t.Fatalf("no SSE data in the response to %s", msg)
	return nil, nil
}

// request sends a request and returns its raw "result" member.
func (r *rawSession) request(method, params string) json.RawMessage {
	r.t.Helper()
	r.next++
	resp, body := r.post(`{"jsonrpc":"2.0","id":` + strconv.Itoa(r.next) + `,"method":"` + method + `","params":` + params + `}`)
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("%s: %s %s", method, resp.Status, body)
	}
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Result == nil {
		r.t.Fatalf("%s: no result (%v): %s", method, err, body)
	}
	return m.Result
}

// The schemas on the wire are the registered values exactly: numbers keep
// their text (0.99999999999999999999 is not a float64).
func TestToolsListSchemaBytesOverHTTP(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, &server.Options{Tokens: map[string]string{"tok-a": "alice"}}))
	r := newRawSession(t, hs, "tok-a")
	var list struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.request("tools/list", `{}`), &list); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, tool := range list.Tools {
		reg, _, _ := f.g.Tool(tool.Name)
		if !bytes.Contains(tool.InputSchema, []byte("0.99999999999999999999")) && tool.Name == "echo" {
			t.Errorf("echo's minimum was rewritten: %s", tool.InputSchema)
		}
		if canon(t, tool.InputSchema) != canon(t, reg.InputSchema) {
			t.Errorf("%s: schema on the wire %s, registered %s", tool.Name, tool.InputSchema, reg.InputSchema)
		}
		seen++
	}
	if seen != 6 {
		t.Errorf("%d tools listed, want 6", seen)
	}

	// The upstream's result passes through with its exact numbers.
	res := r.request("tools/call", `{"name":"upstream","arguments":{}}`)
	if !bytes.Contains(res, []byte(`"structuredContent":{"n":12345678901234567890}`)) {
		t.Errorf("upstream result on the wire: %s", res)
	}
}

func TestHTTPAuthentication(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}})
	hs := httpServer(t, s)

	for name, token := range map[string]string{"missing": "", "wrong": "tok-mallory", "prefix": "tok-ali"} {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{server.PathMCP, server.PathMetrics} {
				req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: %s, WWW-Authenticate %q; want 401 with a Bearer challenge", path, resp.Status, resp.Header.Get("WWW-Authenticate"))
				}
			}
			if _, err := connectHTTP(t, hs, token, nil); err == nil {
				t.Error("the Go SDK client connected")
			}
		})
	}

	// bob's token lists bob's tools; alice's lists alice's.
	bob, err := connectHTTP(t, hs, "tok-bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := bob.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := connectHTTP(t, hs, "tok-alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	la, err := alice.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(toolNames(lb.Tools), []string{"echo"}) || len(la.Tools) != 6 {
		t.Errorf("bob sees %v, alice %v", toolNames(lb.Tools), toolNames(la.Tools))
	}
	// A tool bob's policy never names does not exist for him (finding 7).
	if _, err := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "costly", Arguments: map[string]any{}}); err == nil ||
		!strings.Contains(err.Error(), `no tool named "costly"`) {
		t.Errorf("bob calling costly over HTTP: %v, want the unknown tool's error", err)
	}
	// The caller of a call is the token's, recorded in the journal.
	res := call(t, alice, "echo", map[string]any{"text": "hi"})
	in, err := f.st.GetIntent(context.Background(), res.Meta[server.MetaCallID].(string))
	if err != nil || in.Caller != "alice" || in.Session != alice.ID() {
		t.Errorf("intent %+v (%v), want caller alice, session %s", in, err, alice.ID())
	}

	// A session answers only to the caller that opened it: bob's token on
	// alice's session is refused.
	req, _ := http.NewRequest(http.MethodPost, hs.URL+server.PathMCP, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer tok-bob")
	req.Header.Set("Mcp-Session-Id", alice.ID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob's token on alice's session: %s, want 403", resp.Status)
	}
}

func TestNoTokensRefusesEverything(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, nil))
	if _, err := connectHTTP(t, hs, "anything", nil); err == nil {
		t.Fatal("connected to a server without tokens")
	}
	resp, err := http.Get(hs.URL + server.PathHealthz)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz needs no token: %s", resp.Status)
	}
}

func scrape(t *testing.T, hs *httptest.Server, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, hs.URL+server.PathMetrics, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s %s", resp.Status, b)
	}
	return string(b)
}

// metricValue finds one sample's value in the exposition text.
func metricValue(t *testing.T, text, name string, labels ...string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		return v, true
	}
	return 0, false
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}, ApprovalWait: 0,
		Operators: map[string]string{"tok-ops": "ops"}})
	hs := httpServer(t, s)
	alice, err := connectHTTP(t, hs, "tok-alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := connectHTTP(t, hs, "tok-bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	call(t, alice, "echo", map[string]any{"text": "1"})
	call(t, alice, "echo", map[string]any{"text": "2"})
	call(t, alice, "echo", map[string]any{"n": 1})                                                       // validation
	bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "costly", Arguments: map[string]any{}}) // not_found: bob may not know of it
	call(t, alice, "costly", map[string]any{})                                                           // budget: 1 of 1
	call(t, alice, "costly", map[string]any{})                                                           // budget_exceeded
	call(t, alice, "danger", map[string]any{"target": "x"})                                              // approval_required
	call(t, alice, "broken", map[string]any{})                                                           // failed: unknown_outcome
	alice.CallTool(context.Background(), &mcpCallUnknown)                                                // not_found

	// The metrics name callers: a caller's token is refused, an operator's
	// is served.
	for tok, want := range map[string]int{"tok-bob": http.StatusForbidden, "tok-alice": http.StatusForbidden, "nobody": http.StatusUnauthorized, "": http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+server.PathMetrics, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || strings.Contains(string(b), "backplane_") {
			t.Errorf("/metrics with token %q: %s, want %d and no metrics: %.200s", tok, resp.Status, want, b)
		}
	}
	text := scrape(t, hs, "tok-ops")
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"backplane_mcp_tool_calls_total", []string{`tool="echo"`, `outcome="succeeded"`}, 2},
		{"backplane_mcp_tool_calls_total", []string{`tool="echo"`, `outcome="refused"`}, 1},
		{"backplane_mcp_tool_calls_total", []string{`tool="costly"`, `outcome="refused"`}, 1},
		{"backplane_mcp_tool_calls_total", []string{`tool="costly"`, `outcome="succeeded"`}, 1},
		{"backplane_mcp_tool_calls_total", []string{`tool="broken"`, `outcome="failed"`}, 1},
		{"backplane_mcp_tool_calls_total", []string{`tool="(unknown)"`, `outcome="refused"`}, 2},
		{"backplane_mcp_tool_call_refusals_total", []string{`class="validation"`}, 1},
		{"backplane_mcp_tool_call_refusals_total", []string{`class="budget_exceeded"`}, 1},
		{"backplane_mcp_tool_call_refusals_total", []string{`class="approval_required"`}, 1},
		{"backplane_mcp_tool_call_refusals_total", []string{`class="not_found"`}, 2},
		{"backplane_mcp_tool_call_failures_total", []string{`class="unknown_outcome"`}, 1},
		{"backplane_mcp_tool_call_duration_seconds_count", []string{`tool="echo"`}, 3},
		{"backplane_budget_used", []string{`scope="caller"`, `key="alice"`}, 1},
	} {
		got, ok := metricValue(t, text, c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if strings.Contains(text, "no-such-tool") {
		t.Error("a made-up tool name became a label value")
	}
}

func TestHealthz(t *testing.T) {
	f := newFixture(t)
	hs := httpServer(t, server.New(f.g, nil))
	get := func() (int, string) {
		resp, err := http.Get(hs.URL + server.PathHealthz)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if code, body := get(); code != http.StatusOK || body != `{"ok":true,"state":"ok"}` {
		t.Errorf("healthz %d %s", code, body)
	}
	f.st.Close() // the store no longer answers
	if code, body := get(); code != http.StatusServiceUnavailable || body != `{"ok":false,"state":"failing"}` {
		t.Errorf("healthz with a closed store: %d %s", code, body)
	}
}

// Shutdown ends ServeHTTP: a call waiting for an approval is given the
// grace period (Shutdown's ctx), then cancelled, and both return.
func TestServeHTTPShutdown(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}, ApprovalWait: time.Minute})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ServeHTTP(ln) }()
	hs := &httptest.Server{URL: "http://" + ln.Addr().String()}
	cs, err := connectHTTP(t, hs, "tok-alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	callDone := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcpCallDanger)
		callDone <- err
	}()
	// Wait until the call waits for its approval.
	deadline := time.Now().Add(10 * time.Second)
	for len(approvalsOf(t, f.st, "danger")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call never asked for an approval")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil || !regexp.MustCompile(`cancelled`).MatchString(err.Error()) {
		t.Errorf("Shutdown returned %v, want the cancelled calls reported", err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("shut down after %s, before the grace period", d)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeHTTP ended by Shutdown returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeHTTP did not return within 10s of the shutdown")
	}
	if err := s.ServeHTTP(ln); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("ServeHTTP after Shutdown: %v, want ErrServerClosed", err)
	}
	select {
	case <-callDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's call never ended")
	}
	if f.dangers.Load() != 0 {
		t.Error("the unapproved call ran")
	}
}

var (
	mcpCallUnknown = mcp.CallToolParams{Name: "no-such-tool", Arguments: map[string]any{}}
	mcpCallDanger  = mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"target": "x"}}
)
