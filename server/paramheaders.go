package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Mcp-Param-* headers (2026-07-28, streamable HTTP, SEP-2243).
//
// A tool's input schema may mark a property with "x-mcp-header": NAME;
// a client then sends the property's value in the header Mcp-Param-NAME
// as well as in the body, so that what routes on headers (a balancer, a
// WAF) sees what the server will act on. A server that reads the body
// MUST reject, with HTTP 400 and -32020 (HeaderMismatch), a request whose
// header is missing, malformed or different from the body. The SDK checks
// this only for tools registered with it; Backplane's tools are the
// gateway's (served by the middleware), so the check is made here, before
// the SDK sees the request, for a tools/call at 2026-07-28 of a tool the
// caller may see (one it may not is left for the call to answer as
// unknown, whatever the headers say). Mcp-Method and Mcp-Name are the
// SDK's to check, and it does.
//
// A tool whose annotations are invalid (a name that is not a token, not
// unique, on a property that is not string, integer or boolean, or not
// reachable from the root through "properties" alone) is one a client
// drops from tools/list, as the revision says; its calls are not checked
// (a conforming client makes none), and the server logs it once.

// paramHeaderPrefix begins the header of an annotated property.
const paramHeaderPrefix = "Mcp-Param-"

// paramBinding is one annotated property: its path from the root of the
// arguments, and the name its header carries.
type paramBinding struct {
	path   []string
	header string
}

// errParamAnnotation is the error of a schema whose x-mcp-header
// annotations break the revision's rules.
var errParamAnnotation = errors.New("invalid x-mcp-header annotation")

// maxSafeInteger bounds an annotated integer: JavaScript's safe range.
const maxSafeInteger = 1<<53 - 1

// paramBindingsOf reads the x-mcp-header annotations of an input schema, in
// the order of their paths; an error wrapping errParamAnnotation says why
// they are invalid, if they are.
func paramBindingsOf(schema json.RawMessage) ([]paramBinding, error) {
	if !bytes.Contains(schema, []byte(`"x-mcp-header"`)) {
		return nil, nil
	}
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("%w: the schema is not JSON: %v", errParamAnnotation, err)
	}
	m, _ := root.(map[string]any)
	var out []paramBinding
	seen := map[string]string{}
	if err := walkAnnotations(m, true, nil, &out, seen); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b paramBinding) int { return slices.Compare(a.path, b.path) })
	return out, nil
}

// walkAnnotations visits the schema object node; static says it is
// reached from the root through "properties" alone (path is the property
// names).
func walkAnnotations(node map[string]any, static bool, path []string, out *[]paramBinding, seen map[string]string) error {
	if node == nil {
		return nil
	}
	where := "/" + strings.Join(path, "/")
	if v, ok := node["x-mcp-header"]; ok {
		name, isString := v.(string)
		typ, _ := node["type"].(string)
		switch {
		case !static || len(path) == 0:
			return fmt.Errorf("%w: at %s: only a property reached from the root through properties alone may carry one", errParamAnnotation, where)
		case !isString || name == "" || !isToken(name):
			return fmt.Errorf("%w: at %s: the header name must be a non-empty HTTP token", errParamAnnotation, where)
		case typ != "string" && typ != "integer" && typ != "boolean":
			return fmt.Errorf("%w: at %s: only a string, integer or boolean property may carry one (type %q)", errParamAnnotation, where, typ)
		}
		key := strings.ToLower(name)
		if other, dup := seen[key]; dup {
			return fmt.Errorf("%w: at %s: header name %q is used at %s too (names are compared without case)", errParamAnnotation, where, name, other)
		}
		seen[key] = where
		*out = append(*out, paramBinding{path: slices.Clone(path), header: name})
	}
	for k, v := range node {
		switch k {
		case "x-mcp-header", "const", "enum", "default", "examples", "required":
			// values, not schemas
		case "properties":
			props, _ := v.(map[string]any)
			for name, sub := range props {
				sm, _ := sub.(map[string]any)
				if err := walkAnnotations(sm, static, append(slices.Clone(path), name), out, seen); err != nil {
					return err
				}
			}
		default:
			// Any other place a schema may sit (items, oneOf, $defs, ...):
			// not statically reachable.
			if err := walkNested(v, out, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

func walkNested(v any, out *[]paramBinding, seen map[string]string) error {
	switch x := v.(type) {
	case map[string]any:
		return walkAnnotations(x, false, nil, out, seen)
	case []any:
		for _, e := range x {
			if err := walkNested(e, out, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110 tchar).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// matchParamHeaders checks the Mcp-Param-* headers of h against the call's
// arguments for the annotated properties bs, as the revision's server
// validation says: a value in the body needs its header, equal once
// decoded (an integer compared as a number); an absent or null one, none.
// The error says what does not hold.
func matchParamHeaders(h http.Header, args json.RawMessage, bs []paramBinding) error {
	if len(bs) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) > 0 && json.Unmarshal(args, &obj) != nil {
		obj = nil // not an object: the call's validation refuses it
	}
	for _, b := range bs {
		name := paramHeaderPrefix + b.header
		values := h.Values(name)
		raw, present := lookupPath(obj, b.path)
		if !present || string(raw) == "null" {
			if len(values) > 0 {
				return fmt.Errorf("header mismatch: %s is sent, but parameter %q is absent or null", name, strings.Join(b.path, "."))
			}
			continue
		}
		if len(values) == 0 {
			return fmt.Errorf("header mismatch: %s is missing for parameter %q", name, strings.Join(b.path, "."))
		}
		if len(values) > 1 {
			return fmt.Errorf("header mismatch: %s is sent %d times", name, len(values))
		}
		got, err := decodeParamHeader(values[0])
		if err != nil {
			return fmt.Errorf("header mismatch: %s: %v", name, err)
		}
		if !paramEqual(got, raw) {
			return fmt.Errorf("header mismatch: %s does not match parameter %q in the body", name, strings.Join(b.path, "."))
		}
	}
	return nil
}

func lookupPath(obj map[string]json.RawMessage, path []string) (json.RawMessage, bool) {
	cur, ok := obj[path[0]]
	for _, p := range path[1:] {
		if !ok {
			return nil, false
		}
		var next map[string]json.RawMessage
		if json.Unmarshal(cur, &next) != nil {
			return nil, false
		}
		cur, ok = next[p]
	}
	return cur, ok
}

// decodeParamHeader is a header's value: plain visible ASCII (with inner
// spaces and tabs), or the =?base64?...?= form of any UTF-8.
func decodeParamHeader(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			return "", errors.New("the value has characters a header may not carry unencoded")
		}
	}
	if enc, ok := strings.CutPrefix(v, "=?base64?"); ok {
		if enc, ok = strings.CutSuffix(enc, "?="); ok {
			b, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				return "", errors.New("the value's Base64 does not decode")
			}
			return string(b), nil
		}
	}
	return v, nil
}

// paramEqual reports whether a decoded header value equals the body's
// raw JSON value (a string, a boolean, or an integer in the safe range).
func paramEqual(header string, raw json.RawMessage) bool {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return false
	}
	switch x := v.(type) {
	case string:
		return header == x
	case bool:
		return header == strconv.FormatBool(x)
	case json.Number:
		body, err := strconv.ParseFloat(x.String(), 64)
		if err != nil || body != math.Trunc(body) || math.Abs(body) > maxSafeInteger {
			return false
		}
		h, err := strconv.ParseFloat(strings.TrimSpace(header), 64)
		return err == nil && h == body
	}
	return false
}

// paramHeaderCache keeps each tool definition's bindings (by definition
// hash), read once.
type paramHeaderCache struct{ m sync.Map } // defHash -> paramCacheEntry

type paramCacheEntry struct {
	bs  []paramBinding
	err error
}

// bindingsOf returns the bindings of the tool name as the caller may see
// it, and whether there is such a tool.
func (s *Server) bindingsOf(caller, name string) ([]paramBinding, error, bool) {
	if !s.g.Visible(caller, name) {
		return nil, nil, false
	}
	t, hash, ok := s.g.Tool(name)
	if !ok {
		return nil, nil, false
	}
	if e, ok := s.paramHeaders.m.Load(hash); ok {
		pe := e.(paramCacheEntry)
		return pe.bs, pe.err, true
	}
	bs, err := paramBindingsOf(t.InputSchema)
	if err != nil {
		s.log.Warn("tool with invalid x-mcp-header annotations: a 2026-07-28 client drops it, and its calls' Mcp-Param headers are not checked", "tool", name, "error", err.Error())
	}
	s.paramHeaders.m.Store(hash, paramCacheEntry{bs, err})
	return bs, err, true
}

// checkParamHeaders answers HTTP 400 with -32020 a 2026-07-28 tools/call
// whose Mcp-Param-* headers do not hold against its body (see above); any
// other request goes on untouched, its body unread.
func (s *Server) checkParamHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil || r.Header.Get("Mcp-Method") != "tools/call" ||
			r.Header.Get("Mcp-Protocol-Version") < ModernProtocolVersion {
			next.ServeHTTP(w, r)
			return
		}
		ti := auth.TokenInfoFromContext(r.Context())
		name, err := decodeParamHeader(r.Header.Get("Mcp-Name"))
		if ti == nil || err != nil {
			next.ServeHTTP(w, r) // the SDK answers the name
			return
		}
		bs, berr, ok := s.bindingsOf(ti.UserID, name)
		if !ok || berr != nil || len(bs) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		body, read := peekBody(r)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if !read || json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" || msg.Params.Name != name {
			next.ServeHTTP(w, r) // a batch, or not this call: the SDK's to answer
			return
		}
		if err := matchParamHeaders(r.Header, msg.Params.Arguments, bs); err != nil {
			s.refusals.warn(s.log, "param headers "+ti.UserID, "2026-07-28 call refused: its Mcp-Param headers do not match its body", "caller", ti.UserID, "tool", name, "reason", err.Error())
			id := msg.ID
			if len(id) == 0 {
				id = json.RawMessage("null")
			}
			text, _ := json.Marshal(err.Error())
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%s}}`+"\n", id, mcp.CodeHeaderMismatch, text)
			return
		}
		next.ServeHTTP(w, r)
	})
}
