package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// The fast path (issue 27): a 2026-07-28 tools/call POST is self-contained
// (its Mcp-Method header says what it is; its _meta says who the client
// is), so it is served here, without the SDK's stateless handler, which
// for each such request makes a session, decodes the body six times
// through a decoder that allocates 32 KiB per decode, and answers on an
// event stream. Here:
//
//   - the body is read once and taken apart once, by the project's strict
//     reader (internal/jsonstrict): the envelope, the params, the _meta;
//     the arguments stay the exact bytes sent and go to the gateway as
//     they are (gateway.CallRequest.Arguments), which validates and
//     digests them;
//   - the call runs through callTool, the same code as every other
//     tools/call (the outcomes: results, errors, input_required for a
//     self-approval), with the request's own client identity;
//   - the answer is one application/json body: the call sends nothing
//     before its result (no progress token, no log level: below), so it
//     needs no event stream. A result nothing needs decoded (an
//     upstream's text result, Backplane's own value) is written as bytes
//     (fastresult.go), the upstream's kept as they came; any other goes
//     through the SDK's types, which rewrite what they must.
//
// Only a request the SDK's path would serve, and would answer with a
// result or a JSON-RPC error from the call, takes this path: anything
// else (another method, a batch, a header or _meta the SDK refuses, a
// progress token, a log level, a retry carrying inputResponses or a
// requestState, an id or a member this reader does not take as the SDK
// does) goes on to the SDK's handler with its body, untouched, which
// answers as it always did (the -32020, -32022 and -32602 answers of the
// 2026-07-28 conformance scenarios among them). Falling back never
// changes an answer; it only costs the SDK's decoding.

// fastCalls serves the 2026-07-28 tools/call requests it can (see above)
// and passes every other request on to next (the SDK's stateless handler,
// behind checkRequestIDs). It runs after sdkAuth: the caller is the
// request's TokenInfo.
func (s *Server) fastCalls(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fastCandidate(r) {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxIDCheckBytes+1))
		// Whatever is not served here goes on with the bytes read and the
		// rest (an oversized body is the SDK's 413, a read error its own).
		restore := func() {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		}
		if err != nil || len(body) > maxIDCheckBytes {
			restore()
			next.ServeHTTP(w, r)
			return
		}
		fc, ok := parseFastCall(body, r.Header.Get("Mcp-Protocol-Version"), r.Header.Get("Mcp-Name"))
		if !ok {
			restore()
			next.ServeHTTP(w, r)
			return
		}
		s.serveFastCall(w, r, fc)
	})
}

// fastCandidate reports whether r's headers are those of a 2026-07-28
// tools/call the SDK's stateless handler would take: POST, JSON in, JSON
// and event streams accepted, a served 2026-07-28 version, Mcp-Method and
// Mcp-Name present, no Last-Event-ID, and a Host header the SDK's
// DNS-rebinding check passes.
func fastCandidate(r *http.Request) bool {
	h := r.Header
	if r.Method != http.MethodPost || r.Body == nil || h.Get("Mcp-Method") != "tools/call" || h.Get("Mcp-Name") == "" {
		return false
	}
	if !slices.Contains(StatelessProtocolVersions, h.Get("Mcp-Protocol-Version")) || len(h.Values("Last-Event-ID")) > 0 {
		return false
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return false
		}
	}
	if !acceptsBoth(h.Values("Accept")) {
		return false
	}
	// The SDK refuses (403) a request to a loopback listener whose Host is
	// not loopback (DNS rebinding): such a request is left to it.
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && loopbackHost(la.String()) && !loopbackHost(r.Host) {
		return false
	}
	return true
}

// acceptsBoth reports whether Accept takes application/json and
// text/event-stream, as the SDK's stateless handler requires (it answers
// 400 otherwise); the fast path answers with the first.
func acceptsBoth(values []string) bool {
	var jsonOK, streamOK bool
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK && streamOK
}

// loopbackHost reports whether addr (host, host:port or [v6]:port) is
// localhost or a loopback IP.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// fastCall is a 2026-07-28 tools/call as the fast path took it apart.
type fastCall struct {
	id     []byte // the request id's exact text: an integer or a plain string
	name   string
	args   json.RawMessage // the exact bytes sent; nil when absent
	meta   mcp.Meta        // the members callTool reads, as the SDK gives them
	modern modernCall
}

// fastParams and fastMetaStrings are the members the fast path takes in
// params and (besides the client's capabilities and info) in
// params._meta; a request with any other goes to the SDK.
var fastParams = map[string]bool{"name": true, "arguments": true, "_meta": true}

var fastMetaStrings = map[string]bool{
	mcp.MetaKeyProtocolVersion: true, MetaTraceParent: true, MetaTraceState: true, MetaIdempotencyKey: true,
}

// parseFastCall takes body apart for the fast path; false sends the
// request to the SDK. version and name are the Mcp-Protocol-Version and
// Mcp-Name headers, which the body must agree with (the SDK answers the
// mismatch).
func parseFastCall(body []byte, version, name string) (fastCall, bool) {
	var fc fastCall
	members, err := jsonstrict.Members(body, nil)
	if err != nil || len(members) != 4 {
		return fc, false
	}
	var params []byte
	var version2, method bool
	for _, m := range members {
		switch m.Name {
		case "jsonrpc":
			if version2 || string(m.Raw) != `"2.0"` {
				return fc, false
			}
			version2 = true
		case "method":
			if method || string(m.Raw) != `"tools/call"` {
				return fc, false
			}
			method = true
		case "id":
			if fc.id != nil || !plainID(m.Raw) {
				return fc, false
			}
			fc.id = m.Raw
		case "params":
			if params != nil {
				return fc, false
			}
			params = m.Raw
		default:
			return fc, false
		}
	}
	// Four members, each once: the JSON-RPC envelope of one request.
	if !version2 || !method || fc.id == nil || params == nil {
		return fc, false
	}
	pm, err := jsonstrict.Members(params, nil)
	if err != nil {
		return fc, false
	}
	var meta []byte
	seen := map[string]bool{}
	for _, m := range pm {
		if !fastParams[m.Name] || seen[m.Name] {
			return fc, false
		}
		seen[m.Name] = true
		switch m.Name {
		case "name":
			n, ok := plainString(m.Raw)
			if !ok || n != name {
				return fc, false
			}
			fc.name = n
		case "arguments":
			if len(m.Raw) == 0 || m.Raw[0] != '{' {
				return fc, false // null, or not an object: the SDK's to answer
			}
			fc.args = m.Raw
		case "_meta":
			meta = m.Raw
		}
	}
	if fc.name == "" || meta == nil {
		return fc, false
	}
	if fc.meta, fc.modern, err = fastMeta(meta); err != nil || fc.modern.version != version {
		return fc, false
	}
	return fc, true
}

// errNotFast: a _meta the fast path leaves to the SDK.
var errNotFast = errors.New("server: not for the fast path")

// fastMeta reads a 2026-07-28 request's _meta: its protocol version, its
// client's capabilities (required) and info, and the strings callTool
// reads (trace context, idempotency key). A member of another name (a
// progress token, a log level: the call would send something before its
// result) or of another type is errNotFast.
func fastMeta(raw []byte) (mcp.Meta, modernCall, error) {
	var mc modernCall
	members, err := jsonstrict.Members(raw, nil)
	if err != nil {
		return nil, mc, errNotFast
	}
	meta := make(mcp.Meta, len(members))
	var caps, info []byte
	for _, m := range members {
		if _, dup := meta[m.Name]; dup || (m.Name == mcp.MetaKeyClientCapabilities && caps != nil) || (m.Name == mcp.MetaKeyClientInfo && info != nil) {
			return nil, mc, errNotFast
		}
		switch {
		case fastMetaStrings[m.Name]:
			v, ok := plainString(m.Raw)
			if !ok {
				return nil, mc, errNotFast
			}
			meta[m.Name] = v
		case m.Name == mcp.MetaKeyClientCapabilities:
			caps = m.Raw
		case m.Name == mcp.MetaKeyClientInfo:
			info = m.Raw
		default:
			return nil, mc, errNotFast
		}
	}
	v, _ := meta[mcp.MetaKeyProtocolVersion].(string)
	if _, modern := modernMeta(meta); !modern || caps == nil || caps[0] != '{' {
		return nil, mc, errNotFast
	}
	// The capabilities as the SDK reads them (its clientCapabilitiesV2:
	// roots as a pointer, copied into the deprecated struct), decoded by
	// the standard library only where the SDK's decoder, which matches
	// member names exactly, would read the same.
	c, ok := fastCaps(caps)
	if !ok {
		return nil, mc, errNotFast
	}
	meta[mcp.MetaKeyClientCapabilities] = c
	var client *mcp.Implementation
	if info != nil {
		if client, ok = fastImpl(info); !ok {
			return nil, mc, errNotFast
		}
		meta[mcp.MetaKeyClientInfo] = client // the SDK's ClientInfo takes the typed value
	}
	return meta, modernCallOf(v, client, c), nil
}

// fastCaps decodes a request's clientCapabilities as the SDK reads them
// (its clientCapabilitiesV2: roots as a pointer, copied into the
// deprecated struct); false where the standard library and the SDK's
// decoder, which matches member names exactly, could read it apart.
func fastCaps(caps []byte) (*mcp.ClientCapabilities, bool) {
	if string(caps) == "{}" {
		return &mcp.ClientCapabilities{}, true
	}
	if c, ok := plainCaps(caps); ok {
		return c, true
	}
	return decodeCaps(caps)
}

// plainCaps reads the capabilities clients commonly declare directly:
// roots, sampling and elicitation, each an empty object (elicitation's
// form and url too; roots also {"listChanged":true}), each at most once;
// false for anything else, which
// decodeCaps reads (to the same values: TestPlainCapsAsDecoded).
func plainCaps(caps []byte) (*mcp.ClientCapabilities, bool) {
	ms, err := jsonstrict.Members(caps, nil)
	if err != nil {
		return nil, false
	}
	var c mcp.ClientCapabilities
	for _, m := range ms {
		switch {
		//lint:ignore SA1019 roots is deprecated at 2026-07-28 and still in force; read as the SDK reads it
		case m.Name == "roots" && c.RootsV2 == nil && (string(m.Raw) == "{}" || string(m.Raw) == `{"listChanged":true}`):
			// {"listChanged":true}: the Go SDK client's default.
			listChanged := len(m.Raw) > 2
			//lint:ignore SA1019 roots is deprecated at 2026-07-28 and still in force; read as the SDK reads it
			c.RootsV2 = &mcp.RootCapabilities{ListChanged: listChanged}
			//lint:ignore SA1019 the deprecated field the SDK still fills (its toV1)
			c.Roots.ListChanged = listChanged
		//lint:ignore SA1019 sampling is deprecated at 2026-07-28 and still in force; read as the SDK reads it
		case m.Name == "sampling" && c.Sampling == nil && string(m.Raw) == "{}":
			//lint:ignore SA1019 sampling is deprecated at 2026-07-28 and still in force; read as the SDK reads it
			c.Sampling = &mcp.SamplingCapabilities{}
		case m.Name == "elicitation" && c.Elicitation == nil:
			e, ok := plainElicitation(m.Raw)
			if !ok {
				return nil, false
			}
			c.Elicitation = e
		default:
			return nil, false
		}
	}
	return &c, true
}

// plainElicitation reads {} or an object of form and url, each {}.
func plainElicitation(raw []byte) (*mcp.ElicitationCapabilities, bool) {
	ms, err := jsonstrict.Members(raw, nil)
	if err != nil {
		return nil, false
	}
	var e mcp.ElicitationCapabilities
	for _, m := range ms {
		switch {
		case string(m.Raw) != "{}":
			return nil, false
		case m.Name == "form" && e.Form == nil:
			e.Form = &mcp.FormElicitationCapabilities{}
		case m.Name == "url" && e.URL == nil:
			e.URL = &mcp.URLElicitationCapabilities{}
		default:
			return nil, false
		}
	}
	return &e, true
}

// decodeCaps is fastCaps for any capabilities: the standard library's
// decoding where it reads what the SDK's would.
func decodeCaps(caps []byte) (*mcp.ClientCapabilities, bool) {
	if !exactNames(caps, capsType, 0) {
		return nil, false
	}
	var cv struct {
		mcp.ClientCapabilities
		//lint:ignore SA1019 roots is deprecated at 2026-07-28 and still in force; read as the SDK reads it
		Roots *mcp.RootCapabilities `json:"roots,omitempty"`
	}
	if json.Unmarshal(caps, &cv) != nil {
		return nil, false
	}
	c := cv.ClientCapabilities
	//lint:ignore SA1019 roots is deprecated at 2026-07-28 and still in force; read as the SDK reads it
	c.RootsV2 = cv.Roots
	if cv.Roots != nil {
		//lint:ignore SA1019 the deprecated field the SDK still fills (its toV1)
		c.Roots.ListChanged = cv.Roots.ListChanged
	}
	return &c, true
}

// fastImpl decodes a request's clientInfo: a name and a version of plain
// strings (the common case) directly, anything else as fastCaps does.
func fastImpl(info []byte) (*mcp.Implementation, bool) {
	if info[0] != '{' {
		return nil, false
	}
	var impl mcp.Implementation
	if ms, err := jsonstrict.Members(info, nil); err == nil && len(ms) <= 2 {
		plain := true
		for _, m := range ms {
			v, ok := plainString(m.Raw)
			switch {
			case !ok:
				plain = false
			case m.Name == "name" && impl.Name == "":
				impl.Name = v
			case m.Name == "version" && impl.Version == "":
				impl.Version = v
			default:
				plain = false
			}
		}
		if plain {
			return &impl, true
		}
		impl = mcp.Implementation{}
	}
	if !exactNames(info, implType, 0) || json.Unmarshal(info, &impl) != nil {
		return nil, false
	}
	return &impl, true
}

var (
	capsType = reflect.TypeFor[mcp.ClientCapabilities]()
	implType = reflect.TypeFor[mcp.Implementation]()
)

// exactNames reports whether every member name of the JSON object raw
// that the standard library would match to a field of struct type t
// (case-insensitively) is that field's exact name, recursively into
// struct-typed fields, and that no name repeats: where both hold, the
// standard library and the SDK's decoder (exact names) read raw alike.
// Map-typed fields (experimental, extensions) match nothing by case.
func exactNames(raw []byte, t reflect.Type, depth int) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return true
	}
	if depth > 8 {
		return false
	}
	members, err := jsonstrict.Members(raw, nil)
	if err != nil {
		return false
	}
	fields := jsonFields(t)
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		if seen[m.Name] {
			return false
		}
		seen[m.Name] = true
		if ft, ok := fields[m.Name]; ok {
			if !exactValue(m.Raw, ft, depth+1) {
				return false
			}
			continue
		}
		for f := range fields {
			if strings.EqualFold(f, m.Name) {
				return false // the standard library would take it, the SDK not
			}
		}
	}
	return true
}

// exactValue is exactNames for a value of type t: an object of a struct
// type, or an array of them.
func exactValue(raw []byte, t reflect.Type, depth int) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case len(raw) == 0:
		return false
	case raw[0] == '{':
		return exactNames(raw, t, depth)
	case raw[0] == '[' && t.Kind() == reflect.Slice:
		elems, err := jsonstrict.Elements(raw, nil)
		if err != nil {
			return false
		}
		for _, e := range elems {
			if !exactValue(e, t.Elem(), depth+1) {
				return false
			}
		}
	}
	return true
}

// jsonFields are the JSON member names of struct type t's fields (those
// of embedded structs included), with their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && tag == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if tag == "" {
			tag = f.Name
		}
		out[tag] = f.Type
	}
	fieldCache.Store(t, out)
	return out
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// plainID reports whether raw is a request id the fast path answers with
// the same bytes the SDK would: an integer of at most 15 digits (exact in
// a float64, and no exponent or fraction the SDK would rewrite) or a
// string of valid UTF-8 without escapes (which checkRequestIDs and the
// SDK judge themselves).
func plainID(raw []byte) bool {
	if len(raw) >= 2 && raw[0] == '"' {
		inner := raw[1 : len(raw)-1]
		return raw[len(raw)-1] == '"' && bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner)
	}
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
		if string(digits) == "0" {
			return false // the SDK answers 0
		}
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// serveFastCall runs fc through callTool and writes its answer as one
// JSON-RPC response, application/json.
func (s *Server) serveFastCall(w http.ResponseWriter, r *http.Request, fc fastCall) {
	ti := auth.TokenInfoFromContext(r.Context())
	req := &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Meta: fc.meta, Name: fc.name, Arguments: fc.args},
		Extra:  &mcp.RequestExtra{TokenInfo: ti, Header: r.Header},
	}
	var (
		res *mcp.CallToolResult
		err error
	)
	// The result written as bytes (fastresult.go), where it is, after
	// the envelope's start.
	raw := &rawAnswer{prefix: append(append([]byte(`{"jsonrpc":"2.0","id":`), fc.id...), `,"result":`...)}
	if caller, cerr := callerFromToken(req); cerr != nil {
		err = cerr
	} else {
		// The call ends when its HTTP request does (2026-07-28 has no
		// resumption), as PropagateRequestCancellation makes it on the
		// SDK's path.
		mc := fc.modern
		mc.raw = raw
		res, err = s.runTool(r.Context(), req, caller, mc, true)
	}
	var result any = res
	if task, ok := asTaskAnswer(err); ok {
		// An operator's approval for a client that declared the tasks
		// extension: the call is answered with its task (tasks.go), as
		// the middleware answers it on the SDK's path.
		result, err = task, nil
	}
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.Header().Set("Content-Type", "application/json")
	if err == nil && raw.out != nil {
		w.WriteHeader(http.StatusOK)
		w.Write(append(raw.out, '}'))
		return
	}
	buf := bytes.NewBuffer(make([]byte, 0, 512))
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.Write(fc.id)
	status := http.StatusOK
	if err == nil {
		buf.WriteString(`,"result":`)
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false) // as the SDK encodes its messages
		if err = enc.Encode(result); err == nil {
			buf.Truncate(buf.Len() - 1) // Encode's newline
		}
	}
	if err != nil {
		buf.Truncate(len(`{"jsonrpc":"2.0","id":`) + len(fc.id))
		je := wireError(err)
		status = errorStatus(je.Code)
		data, merr := json.Marshal(je)
		if merr != nil {
			data, _ = json.Marshal(&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()})
		}
		buf.WriteString(`,"error":`)
		buf.Write(data)
	}
	buf.WriteByte('}')
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// wireError is err as the SDK sends a handler's error: a JSON-RPC error as
// it is, anything else with its message (and the code of a JSON-RPC error
// it wraps, 0 otherwise).
func wireError(err error) *jsonrpc.Error {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		if je == err {
			return je
		}
		return &jsonrpc.Error{Code: je.Code, Message: err.Error()}
	}
	return &jsonrpc.Error{Message: err.Error()}
}

// errorStatus is the HTTP status of a 2026-07-28 JSON-RPC error answer,
// as the SDK sets it (SEP-2575): 404 for method not found, 400 for
// invalid params, an unsupported version or missing capabilities, 200
// otherwise.
func errorStatus(code int64) int {
	switch code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return http.StatusOK
}
