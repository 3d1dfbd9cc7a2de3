package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// modernUpstream is a hand-made streamable HTTP server of 2026-07-28 (no
// SDK: the SDK's server refuses to serve a tool with invalid x-mcp-header
// annotations, which this one lists). It answers server/discover,
// tools/list and tools/call in JSON, and keeps every request's headers and
// body.
type modernUpstream struct {
	tools string // the tools/list result's tools array
	mu    sync.Mutex
	seen  []seenRequest
}

type seenRequest struct {
	header http.Header
	method string
	params map[string]json.RawMessage
}

func (m *modernUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage            `json:"id"`
		Method string                     `json:"method"`
		Params map[string]json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.seen = append(m.seen, seenRequest{header: r.Header.Clone(), method: req.Method, params: req.Params})
	m.mu.Unlock()
	if req.ID == nil { // a notification
		w.WriteHeader(http.StatusAccepted)
		return
	}
	var result string
	switch req.Method {
	case "server/discover":
		result = `{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"modern","version":"1"}},"resultType":"complete"}`
	case "tools/list":
		result = `{"tools":` + m.tools + `,"resultType":"complete"}`
	case "tools/call":
		var name string
		json.Unmarshal(req.Params["name"], &name)
		result = `{"content":[{"type":"text","text":"called ` + name + `"}],"resultType":"complete"}`
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32601,"message":"no such method"}}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + `}`))
}

func (m *modernUpstream) requests(method string) []seenRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []seenRequest
	for _, s := range m.seen {
		if s.method == method {
			out = append(out, s)
		}
	}
	return out
}

// headerTools: region is mirrored into Mcp-Param-Region; bad_object puts
// x-mcp-header on an object, bad_dup uses one name twice: both invalid.
const headerTools = `[
 {"name":"regional","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"}}},"annotations":{"readOnlyHint":true}},
 {"name":"bad_object","inputSchema":{"type":"object","properties":{"o":{"type":"object","x-mcp-header":"O"}}},"annotations":{"readOnlyHint":true}},
 {"name":"bad_dup","inputSchema":{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"Same"},"b":{"type":"string","x-mcp-header":"same"}}},"annotations":{"readOnlyHint":true}},
 {"name":"plain","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}
]`

// TestModernUpstreamClientRules: issue 24. Against a server of
// 2026-07-28 the gateway's client discovers (no initialize), sends every
// request's _meta (protocol version, client capabilities, client info),
// the Mcp-Method and Mcp-Name headers and the parameter headers of a
// tool's x-mcp-header annotations; a tool whose annotations are invalid is
// not offered, and the refused-tools report says why.
func TestModernUpstreamClientRules(t *testing.T) {
	e := newEnv(t)
	up := &modernUpstream{tools: headerTools}
	ts := httptest.NewServer(up)
	t.Cleanup(ts.Close)
	// draft2020-12: the subset validator refuses the x-mcp-header keyword
	// (it knows no annotation it does not check), which would refuse
	// every call of m.regional before the server is reached.
	u := e.connect(t, Server{Name: "m", URL: ts.URL, Validator: ValidatorDraft2020}, nil)
	if got := u.Protocol(); got != Protocol20260728 {
		t.Fatalf("protocol %q, want %s", got, Protocol20260728)
	}
	if n := len(up.requests("initialize")); n != 0 {
		t.Errorf("initialize sent %d times to a server that answers server/discover", n)
	}
	tools := u.Tools()
	has := func(name string) bool {
		for _, n := range tools {
			if n == name {
				return true
			}
		}
		return false
	}
	if !has("m.regional") || !has("m.plain") || has("m.bad_object") || has("m.bad_dup") {
		t.Errorf("tools offered: %v, want m.regional and m.plain only", tools)
	}
	v := u.Visibility()
	reasons := map[string]string{}
	for _, rt := range v.RefusedTools {
		reasons[rt.Name] = rt.Reason
	}
	for _, name := range []string{"m.bad_object", "m.bad_dup"} {
		if !strings.Contains(reasons[name], "x-mcp-header") {
			t.Errorf("refused-tools report for %s: %q, want a reason naming x-mcp-header (report %+v)", name, reasons[name], v.RefusedTools)
		}
	}
	if v.Tools != 4 || v.Refused() != 2 || v.Keywords[keywordHeader] != 2 {
		t.Errorf("visibility %+v, want 4 tools, 2 refused for %s", v, keywordHeader)
	}
	if !strings.Contains(reasons["m.bad_dup"], "duplicate") {
		t.Errorf("the SDK's own reason is not kept: %q", reasons["m.bad_dup"])
	}

	e.mustCall(t, "m.regional", `{"region":"eu-west1","n":7}`)
	calls := up.requests("tools/call")
	if len(calls) != 1 {
		t.Fatalf("%d tools/call requests, want 1", len(calls))
	}
	h := calls[0].header
	for k, want := range map[string]string{
		"Mcp-Method": "tools/call", "Mcp-Name": "regional", "Mcp-Param-Region": "eu-west1", "Mcp-Param-N": "7",
		"Mcp-Protocol-Version": Protocol20260728,
	} {
		if got := h.Get(k); got != want {
			t.Errorf("header %s: %q, want %q", k, got, want)
		}
	}
	if h.Get("Mcp-Session-Id") != "" {
		t.Errorf("a session id was sent at 2026-07-28: %q", h.Get("Mcp-Session-Id"))
	}
	for _, method := range []string{"tools/list", "tools/call"} {
		reqs := up.requests(method)
		if len(reqs) == 0 {
			t.Fatalf("no %s", method)
		}
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(reqs[0].params["_meta"], &meta); err != nil {
			t.Fatalf("%s: _meta: %v", method, err)
		}
		if string(meta["io.modelcontextprotocol/protocolVersion"]) != `"2026-07-28"` {
			t.Errorf("%s: _meta protocolVersion %s", method, meta["io.modelcontextprotocol/protocolVersion"])
		}
		var info struct{ Name string }
		if json.Unmarshal(meta["io.modelcontextprotocol/clientInfo"], &info) != nil || info.Name != "backplane" {
			t.Errorf("%s: _meta clientInfo %s", method, meta["io.modelcontextprotocol/clientInfo"])
		}
		var caps map[string]json.RawMessage
		if json.Unmarshal(meta["io.modelcontextprotocol/clientCapabilities"], &caps) != nil || caps["elicitation"] == nil {
			t.Errorf("%s: _meta clientCapabilities %s, want the bridged elicitation declared", method, meta["io.modelcontextprotocol/clientCapabilities"])
		}
		if got := reqs[0].header.Get("Mcp-Method"); got != method {
			t.Errorf("%s: Mcp-Method %q", method, got)
		}
	}
}
