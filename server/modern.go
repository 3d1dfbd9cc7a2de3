package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/tool"
)

// Both eras of MCP on one endpoint (the 2026-07-28 revision's
// "dual-era server", basic/versioning: backward compatibility):
//
//   - a request carrying the per-request _meta of 2026-07-28 (its
//     protocol version, client capabilities and client info), or the
//     MCP-Protocol-Version header of that revision, is served statelessly:
//     over HTTP by a stateless SDK handler (no Mcp-Session-Id minted or
//     read, nothing of an earlier request held), on stdio by the
//     connection's session, which reads the request's own _meta;
//   - an initialize opens a 2025-11-25 (or older) session, served as
//     before.
//
// Over HTTP the choice is made per request before any MCP processing
// (routeEra); the stateless handler then checks the MCP-Protocol-Version,
// Mcp-Method and Mcp-Name headers against the body (-32020 HeaderMismatch,
// HTTP 400), the capabilities' presence (-32602) and the version
// (-32022 UnsupportedProtocolVersion, naming the versions served).

// StatelessProtocolVersions are the sessionless MCP protocol versions
// served, newest first: requests carry their version and capabilities in
// _meta, and server/discover replaces initialize.
var StatelessProtocolVersions = []string{ModernProtocolVersion}

// ModernProtocolVersion is the MCP revision without sessions.
const ModernProtocolVersion = "2026-07-28"

// privateScope is the cacheScope of every list and read result: what a
// caller sees is what its policy grants it, never to be served to another.
const privateScope = "private"

// servedVersions are every protocol version the server speaks, newest
// first: the stateless ones, then those of the initialize handshake.
func servedVersions() []string {
	return append(append([]string(nil), StatelessProtocolVersions...), ProtocolVersions...)
}

// modernMeta reports whether a request's _meta names a sessionless
// protocol version (2026-07-28 or later), and which.
func modernMeta(meta map[string]any) (string, bool) {
	v, ok := meta[mcp.MetaKeyProtocolVersion].(string)
	return v, ok && v >= ModernProtocolVersion
}

// routeEra sends each /mcp request to the stateless handler (modern) or
// the session handler (legacy): a POST whose MCP-Protocol-Version header
// is 2026-07-28 or later, or whose body carries a protocol version in a
// request's _meta, is modern (a body naming one while its header names
// another reaches the stateless handler, which answers HeaderMismatch);
// everything else (initialize, a session's requests, GET and DELETE) is
// legacy. An Mcp-Session-Id on a modern request is ignored, as the
// revision says.
func (s *Server) routeEra(modern, legacy http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			legacy.ServeHTTP(w, r)
			return
		}
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= ModernProtocolVersion {
			modern.ServeHTTP(w, r)
			return
		}
		body, ok := peekBody(r)
		if ok && bytes.Contains(body, []byte(mcp.MetaKeyProtocolVersion)) && bodyIsModern(body) {
			modern.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
}

// bodyIsModern reports whether a JSON-RPC message or batch holds a request
// whose params' _meta names a sessionless protocol version.
func bodyIsModern(body []byte) bool {
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	var msgs []msg
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if json.Unmarshal(trimmed, &msgs) != nil {
			return false
		}
	} else {
		var m msg
		if json.Unmarshal(trimmed, &m) != nil {
			return false
		}
		msgs = []msg{m}
	}
	for _, m := range msgs {
		if len(m.ID) == 0 {
			continue // a notification selects no era
		}
		if _, ok := modernMeta(m.Params.Meta); ok {
			return true
		}
	}
	return false
}

// modernCall is what a 2026-07-28 tools/call says about its client, from
// its own _meta; ok is false for a call of a session.
type modernCall struct {
	version string
	client  *mcp.Implementation
	caps    *mcp.ClientCapabilities
	// raw, set by the fast path, takes a successful call's result written
	// as bytes (appendFastResult): the call then answers no typed result.
	// (A stdio session's call served by callConn sets it too, for
	// appendSessionResult: see callTool.)
	raw *rawAnswer
}

// modernOf returns the per-request identity of a 2026-07-28 call.
func modernOf(req *mcp.CallToolRequest) (modernCall, bool) {
	if req.Params == nil {
		return modernCall{}, false
	}
	v, ok := modernMeta(req.Params.Meta)
	if !ok {
		return modernCall{}, false
	}
	return modernCallOf(v, req.ClientInfo(), req.ClientCapabilities()), true
}

// modernCallOf is the modernCall of a request of version v from client
// with caps: modernOf's, and the fast path's (fastpath.go), which reads
// them itself.
func modernCallOf(v string, client *mcp.Implementation, caps *mcp.ClientCapabilities) modernCall {
	return modernCall{version: v, client: client, caps: caps}
}

// elicits reports whether the client declared form elicitation.
func (m modernCall) elicits() bool {
	if m.caps == nil || m.caps.Elicitation == nil {
		return false
	}
	e := m.caps.Elicitation
	return e.Form != nil || e.URL == nil
}

// clientInfoOf names a client as "name/version" (either may be empty).
func clientInfoOf(impl *mcp.Implementation) string {
	if impl == nil {
		return ""
	}
	out := impl.Name
	if impl.Version != "" {
		out += "/" + impl.Version
	}
	if len(out) > maxClientInfo { // the client's own words, in every audit event
		out = strings.ToValidUTF8(out[:maxClientInfo], "")
	}
	return out
}

// maxClientInfo caps the client's name and version as recorded.
const maxClientInfo = 256

// resultTyped returns res with its resultType set to rt ("complete",
// "input_required"), which the SDK writes only for results its own
// handlers produced (the tools here are served by middleware). The
// unexported field is set the one way the SDK offers: decoding.
func resultTyped(res *mcp.CallToolResult, rt string) *mcp.CallToolResult {
	tmpl, ok := typedResults.Load(rt)
	if !ok {
		var t mcp.CallToolResult
		if err := json.Unmarshal([]byte(`{"content":[],"resultType":"`+rt+`"}`), &t); err != nil {
			return res // cannot happen: a constant document
		}
		tmpl, _ = typedResults.LoadOrStore(rt, &t)
	}
	// A copy of the decoded template (the SDK's decoding allocates 32 KiB
	// each time: once per resultType, not once per call).
	out := *tmpl.(*mcp.CallToolResult)
	out.Meta, out.Content, out.StructuredContent, out.IsError = res.Meta, res.Content, res.StructuredContent, res.IsError
	out.InputRequests, out.RequestState = res.InputRequests, res.RequestState
	if out.Content == nil && out.InputRequests == nil {
		out.Content = []mcp.Content{}
	}
	return &out
}

// typedResults holds, per resultType, a CallToolResult decoded with it:
// resultTyped copies it.
var typedResults sync.Map // string -> *mcp.CallToolResult

// completeTyped sets resultType on the results of the methods that may
// also answer input_required (prompts/get, resources/read), which the SDK
// leaves unset on results its own handlers did not produce: "complete",
// or "input_required" for one that carries input requests or a request
// state; other results are returned as they are (the SDK types the rest).
func completeTyped(res mcp.Result) mcp.Result {
	switch r := res.(type) {
	case *mcp.GetPromptResult:
		var out mcp.GetPromptResult
		if json.Unmarshal([]byte(`{"messages":[],"resultType":"`+typeOf(r.InputRequests, r.RequestState)+`"}`), &out) != nil {
			return res
		}
		out.Meta, out.Description, out.Messages, out.InputRequests, out.RequestState = r.Meta, r.Description, r.Messages, r.InputRequests, r.RequestState
		return &out
	case *mcp.ReadResourceResult:
		var out mcp.ReadResourceResult
		if json.Unmarshal([]byte(`{"contents":[],"resultType":"`+typeOf(r.InputRequests, r.RequestState)+`"}`), &out) != nil {
			return res
		}
		out.Meta, out.Cacheable, out.Contents, out.InputRequests, out.RequestState = r.Meta, r.Cacheable, r.Contents, r.InputRequests, r.RequestState
		return &out
	}
	return res
}

// typeOf is the resultType of a result with these input requests and
// request state.
func typeOf(reqs mcp.InputRequestMap, state string) string {
	if len(reqs) > 0 || state != "" {
		return "input_required"
	}
	return "complete"
}

// isModernRequest reports whether req carries 2026-07-28 _meta.
func isModernRequest(req mcp.Request) bool {
	p := req.GetParams()
	// A request without params has a typed nil (the SDK's GetMeta of
	// which panics).
	if p == nil || reflect.ValueOf(p).IsNil() {
		return false
	}
	_, ok := modernMeta(p.GetMeta())
	return ok
}

// modernClient is what an upstream may send during a 2026-07-28 call:
// its progress and log messages reach the client on the request's own
// stream; its input requests are answered by the client calling again
// (tool.InputDeferrer, relayinput.go). A request sent in the middle of the
// call (a 2025-11-25 upstream's server-to-client request) is refused:
// that revision has none, and answering it through input_required would
// hold the upstream's running call in this process across the client's
// round trip, which a stateless replica cannot promise (the retry may
// reach another one).
type modernClient struct {
	*sessionClient
	// caps are the request's own, from its _meta: the fast path's requests
	// (fastpath.go) have no session to read them from. Nil: the session's.
	caps *mcp.ClientCapabilities
}

// Capabilities implements tool.CapableClient: the request's own.
func (c modernClient) Capabilities() tool.Capabilities {
	if c.caps != nil {
		return capabilitiesOf(c.caps, ModernProtocolVersion)
	}
	return c.sessionClient.Capabilities()
}

func (modernClient) Request(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return nil, fmt.Errorf("%w: a 2026-07-28 request takes no server-to-client request in its middle", tool.ErrNoChannel)
}

// modernContentError is err as 2026-07-28 answers it: a resource not
// found is invalid params naming the URI (SEP-2164), not the -32002 of
// the earlier revisions (which an upstream of those may still send).
func modernContentError(req mcp.Request, err error) error {
	p, ok := req.GetParams().(*mcp.ReadResourceParams)
	var je *jsonrpc.Error
	if !ok || p == nil || !errors.As(err, &je) || je.Code != codeResourceNotFound {
		return err
	}
	data, _ := json.Marshal(map[string]string{"uri": p.URI})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: je.Message, Data: data}
}
