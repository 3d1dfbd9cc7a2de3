package inputschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// kind is the type a compiled schema node accepts.
type kind uint8

const (
	kindObject kind = iota + 1
	kindArray
	kindString
	kindInteger
	kindNumber
	kindBoolean
	kindOneOf
)

var kindNames = map[string]kind{
	"object":  kindObject,
	"array":   kindArray,
	"string":  kindString,
	"integer": kindInteger,
	"number":  kindNumber,
	"boolean": kindBoolean,
}

func (k kind) String() string {
	for name, kk := range kindNames {
		if kk == k {
			return name
		}
	}
	return "oneOf"
}

// node is one checked schema object.
type node struct {
	kind kind
	ptr  string // schema pointer of this schema object
	// typePtr is where a type mismatch points: ptr+"/type", or ptr for the
	// root when it has no explicit type.
	typePtr string

	// kindObject: names holds every name of properties and required, sorted
	// by bytes (D11); required indexes it in the order of the required array.
	names    []member
	required []int
	closed   bool // additionalProperties: false
	index    map[string]int

	items *node // kindArray

	// kindInteger, kindNumber
	hasMin  bool
	min     dec[string]
	minText string

	branches []*node // kindOneOf
}

type member struct {
	name   string
	schema *node // nil when the name is only required, not in properties
}

// smallTable is the name count up to which lookups compare names one by one;
// beyond it they go through a map.
const smallTable = 8

// find returns the index of name in n.names, or -1.
func find[T text](n *node, name T) int {
	if n.index != nil {
		if i, ok := n.index[string(name)]; ok {
			return i
		}
		return -1
	}
	for i := range n.names {
		if len(n.names[i].name) == len(name) && n.names[i].name == string(name) {
			return i
		}
	}
	return -1
}

var allowedKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"additional_properties": true, "description": true, "minimum": true, "items": true, "oneOf": true,
	// An annotation of MCP 2026-07-28 (D5a): it names the HTTP header a
	// client mirrors the property's value into, and constrains no value.
	"x-mcp-header": true,
}

func compileBytes(data []byte, l Limits) (*Schema, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, schemaErr(ClassUnsupported, "", "", "tool schema is required", nil)
	}
	v, err := jsonstrict.Decode(data, &jsonstrict.Options{MaxDepth: l.MaxDepth, MaxBytes: l.MaxSchemaBytes})
	if err != nil {
		return nil, decodeError(StageSchema, "the schema is", err)
	}
	return compileValue(v, l)
}

// compileBytesAll is compileBytes collecting every error (see CompileAll).
func compileBytesAll(data []byte, l Limits) (*Schema, *ErrorList) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &ErrorList{Errors: []*Error{schemaErr(ClassUnsupported, "", "", "tool schema is required", nil)}}
	}
	v, err := jsonstrict.Decode(data, &jsonstrict.Options{MaxDepth: l.MaxDepth, MaxBytes: l.MaxSchemaBytes})
	if err != nil {
		return nil, &ErrorList{Errors: []*Error{decodeError(StageSchema, "the schema is", err)}}
	}
	if v == nil {
		return nil, &ErrorList{Errors: []*Error{schemaErr(ClassUnsupported, "", "", "tool schema is required", nil)}}
	}
	c := compiler{maxDepth: l.MaxDepth, all: true, maxErrors: l.MaxErrors}
	root, err := c.schema(v, "", 1, true)
	if err != nil {
		c.add(err)
	}
	if len(c.errs) > 0 {
		return nil, &ErrorList{Errors: c.errs, Truncated: c.truncated}
	}
	return &Schema{root: root, limits: l, argOpts: jsonstrict.Options{MaxDepth: l.MaxDepth, MaxBytes: l.MaxArgumentBytes}}, nil
}

func compileValue(v any, l Limits) (*Schema, error) {
	if v == nil {
		return nil, schemaErr(ClassUnsupported, "", "", "tool schema is required", nil)
	}
	c := compiler{maxDepth: l.MaxDepth}
	root, err := c.schema(v, "", 1, true)
	if err != nil {
		return nil, err
	}
	return &Schema{root: root, limits: l, argOpts: jsonstrict.Options{MaxDepth: l.MaxDepth, MaxBytes: l.MaxArgumentBytes}}, nil
}

type compiler struct {
	maxDepth int
	// headers are the x-mcp-header names met so far, folded to lower
	// case, with where (D5a: unique without case in one schema).
	headers map[string]string
	// all: collect errors (CompileAll) instead of stopping at the first. A
	// schema object still stops at its first error other than an unknown
	// keyword; its parent records that error and goes on with its siblings.
	all       bool
	maxErrors int
	errs      []*Error
	truncated bool
}

// add records an error in collect mode.
func (c *compiler) add(err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = schemaErr(ClassValidation, "", "", err.Error(), nil)
	}
	if len(c.errs) >= c.maxErrors {
		c.truncated = true
		return
	}
	c.errs = append(c.errs, e)
}

// childFailed handles a nested schema's error: in collect mode it is
// recorded and the caller goes on (false); otherwise the caller returns it.
func (c *compiler) childFailed(err error) bool {
	if err == nil {
		return false
	}
	if c.all {
		c.add(err)
		return false
	}
	return true
}

// header checks an x-mcp-header annotation h at ptr, on a schema of kind
// k (D5a): a non-empty HTTP token, unique without case in the schema, on
// a string, integer or boolean property reached from the root through
// properties alone.
func (c *compiler) header(h any, ptr string, k kind) error {
	hptr := ptr + "/x-mcp-header"
	name, ok := h.(string)
	if !ok || name == "" || !isToken(name) {
		return schemaErr(ClassValidation, hptr, "x-mcp-header", "x-mcp-header must be a non-empty HTTP token (RFC 9110 tchar)", nil)
	}
	if k != kindString && k != kindInteger && k != kindBoolean {
		return schemaErr(ClassUnsupported, hptr, "x-mcp-header", "x-mcp-header applies to a string, integer or boolean property", map[string]any{"type": k.String()})
	}
	if !staticallyReachable(ptr) {
		return schemaErr(ClassUnsupported, hptr, "x-mcp-header", "x-mcp-header applies only to a property reached from the root through properties alone", nil)
	}
	key := strings.ToLower(name)
	if other, dup := c.headers[key]; dup {
		return schemaErr(ClassValidation, hptr, "x-mcp-header", fmt.Sprintf("x-mcp-header %q is used at %s too (names are compared without case)", name, other), nil)
	}
	if c.headers == nil {
		c.headers = map[string]string{}
	}
	c.headers[key] = hptr
	return nil
}

// staticallyReachable reports whether the schema at ptr is reached from
// the root through properties alone (/properties/a/properties/b).
func staticallyReachable(ptr string) bool {
	if ptr == "" {
		return false // the root is no property
	}
	segs := strings.Split(ptr[1:], "/")
	if len(segs)%2 != 0 {
		return false
	}
	for i := 0; i < len(segs); i += 2 {
		if segs[i] != "properties" {
			return false
		}
	}
	return true
}

// isToken reports whether s is an HTTP token (RFC 9110: 1*tchar).
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

func schemaErr(class Class, ptr, keyword, msg string, details map[string]any) *Error {
	if details == nil {
		details = map[string]any{}
	}
	return &Error{Class: class, Stage: StageSchema, Message: msg, SchemaPointer: ptr, Keyword: keyword, Details: details}
}

// schema checks one schema object at ptr and compiles it. Within one schema
// object the checks run in a fixed order (D11): first every key by name for
// an unknown keyword (so a {"$ref": ...} property schema is reported as the
// $ref it is, not as a missing type), then the alias conflict and
// description, then oneOf or type (every later check depends on it), then
// each keyword by name, descending into nested schemas as it goes.
func (c *compiler) schema(v any, ptr string, depth int, root bool) (*node, error) {
	if depth > c.maxDepth {
		return nil, schemaErr(ClassValidation, ptr, "", fmt.Sprintf("schema nested deeper than the limit of %d", c.maxDepth), nil)
	}
	m, ok := v.(map[string]any)
	if !ok {
		switch v.(type) {
		case bool:
			if !root {
				return nil, schemaErr(ClassUnsupported, ptr, "", "boolean schemas are not supported", nil)
			}
		case nil:
			if root {
				return nil, schemaErr(ClassUnsupported, ptr, "", "tool schema is required", nil)
			}
		}
		return nil, schemaErr(ClassValidation, ptr, "", "a schema must be a JSON object, not "+goJSONType(v), nil)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !allowedKeywords[k] {
			err := schemaErr(ClassUnsupported, ptr+"/"+escapePointer(k), k, fmt.Sprintf("keyword %q is not supported", k), nil)
			if !c.all {
				return nil, err
			}
			c.add(err) // and go on: the other checks ignore unknown keywords
		}
	}
	_, hasAP := m["additionalProperties"]
	_, hasAlias := m["additional_properties"]
	if hasAP && hasAlias {
		return nil, schemaErr(ClassValidation, ptr+"/additional_properties", "additional_properties",
			"additionalProperties and its alias additional_properties are both present", nil)
	}
	if d, ok := m["description"]; ok {
		if _, ok := d.(string); !ok {
			return nil, schemaErr(ClassValidation, ptr+"/description", "description", "description must be a string", nil)
		}
	}
	if one, ok := m["oneOf"]; ok {
		if _, ok := m["x-mcp-header"]; ok {
			return nil, schemaErr(ClassUnsupported, ptr+"/x-mcp-header", "x-mcp-header", "x-mcp-header applies to a string, integer or boolean property, not to a oneOf", nil)
		}
		return c.oneOf(m, keys, one, ptr, depth, root)
	}

	n := &node{ptr: ptr, typePtr: ptr + "/type"}
	t, hasType := m["type"]
	switch {
	case !hasType && root:
		n.kind, n.typePtr = kindObject, ptr
	case !hasType:
		return nil, schemaErr(ClassValidation, ptr, "type", "type is required", nil)
	default:
		name, ok := t.(string)
		if ok && root && name != "object" {
			return nil, schemaErr(ClassUnsupported, ptr+"/type", "type", "only object tool schemas are supported", map[string]any{"type": name})
		}
		if !ok {
			if isArray(t) {
				return nil, schemaErr(ClassUnsupported, ptr+"/type", "type", "type unions (a list of types) are not supported", nil)
			}
			return nil, schemaErr(ClassValidation, ptr+"/type", "type", "type must be a string", nil)
		}
		if n.kind, ok = kindNames[name]; !ok {
			return nil, schemaErr(ClassUnsupported, ptr+"/type", "type", fmt.Sprintf("type %q is not supported", name), map[string]any{"type": name})
		}
	}
	if root && n.kind != kindObject {
		return nil, schemaErr(ClassUnsupported, ptr+"/type", "type", "only object tool schemas are supported", map[string]any{"type": n.kind.String()})
	}

	if h, ok := m["x-mcp-header"]; ok {
		if err := c.header(h, ptr, n.kind); err != nil {
			return nil, err
		}
	}

	props := map[string]*node{}
	var required []string
	for _, k := range keys {
		val := m[k]
		kptr := ptr + "/" + k
		if !applies(k, n.kind) {
			return nil, schemaErr(ClassUnsupported, kptr, k, fmt.Sprintf("keyword is unsupported for this type: %s does not apply to %s", k, n.kind), map[string]any{"type": n.kind.String()})
		}
		switch k {
		case "properties":
			pm, ok := val.(map[string]any)
			if !ok {
				return nil, schemaErr(ClassValidation, kptr, k, "properties must be an object of schemas", nil)
			}
			names := make([]string, 0, len(pm))
			for name := range pm {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				child, err := c.schema(pm[name], kptr+"/"+escapePointer(name), depth+1, false)
				if c.childFailed(err) {
					return nil, err
				}
				props[name] = child
			}
		case "required":
			list, ok := stringList(val)
			if !ok {
				return nil, schemaErr(ClassValidation, kptr, k, "required must be an array of strings", nil)
			}
			required = list
		case "additionalProperties", "additional_properties":
			switch b := val.(type) {
			case bool:
				n.closed = !b
			case map[string]any:
				return nil, schemaErr(ClassUnsupported, kptr, k, k+" must be a boolean: schemas for additional properties are not supported", nil)
			default:
				return nil, schemaErr(ClassValidation, kptr, k, k+" must be a boolean", nil)
			}
		case "minimum":
			lit, ok := numberLiteral(val)
			if !ok {
				return nil, schemaErr(ClassValidation, kptr, k, "minimum must be a JSON number", nil)
			}
			n.hasMin, n.minText = true, lit
			n.min, _ = parseDec(lit)
		case "items":
			switch val.(type) {
			case map[string]any:
				child, err := c.schema(val, kptr, depth+1, false)
				if c.childFailed(err) {
					return nil, err
				}
				n.items = child
			case bool:
				return nil, schemaErr(ClassUnsupported, kptr, k, "boolean items schemas are not supported", nil)
			default:
				if isArray(val) {
					return nil, schemaErr(ClassUnsupported, kptr, k, "tuple-style items (an array of schemas) are not supported", nil)
				}
				return nil, schemaErr(ClassValidation, kptr, k, "items must be a schema object", nil)
			}
		}
	}
	if n.kind == kindObject {
		n.buildNames(props, required)
	}
	return n, nil
}

// oneOf checks a schema holding oneOf (D10).
func (c *compiler) oneOf(m map[string]any, keys []string, val any, ptr string, depth int, root bool) (*node, error) {
	if root {
		return nil, schemaErr(ClassUnsupported, ptr+"/oneOf", "oneOf", "only object tool schemas are supported: a root oneOf is not", nil)
	}
	var siblings []string
	for _, k := range keys {
		if k != "oneOf" && k != "description" {
			siblings = append(siblings, k)
		}
	}
	if len(siblings) > 0 {
		return nil, schemaErr(ClassUnsupported, ptr+"/oneOf", "oneOf",
			"a oneOf schema may hold only oneOf and description; found "+strings.Join(siblings, ", "),
			map[string]any{"keywords": siblings})
	}
	list, ok := val.([]any)
	if !ok || len(list) == 0 {
		return nil, schemaErr(ClassValidation, ptr+"/oneOf", "oneOf", "oneOf must be a non-empty array of schemas", nil)
	}
	n := &node{kind: kindOneOf, ptr: ptr, typePtr: ptr + "/oneOf"}
	for i, b := range list {
		child, err := c.schema(b, ptr+"/oneOf/"+strconv.Itoa(i), depth+1, false)
		if c.childFailed(err) {
			return nil, err
		}
		n.branches = append(n.branches, child)
	}
	return n, nil
}

func (n *node) buildNames(props map[string]*node, required []string) {
	seen := map[string]bool{}
	for name, child := range props {
		n.names = append(n.names, member{name: name, schema: child})
		seen[name] = true
	}
	for _, name := range required {
		if !seen[name] {
			n.names = append(n.names, member{name: name})
			seen[name] = true
		}
	}
	slices.SortFunc(n.names, func(a, b member) int { return strings.Compare(a.name, b.name) })
	if len(n.names) > smallTable {
		n.index = make(map[string]int, len(n.names))
		for i, mb := range n.names {
			n.index[mb.name] = i
		}
	}
	// Repeats in required are allowed (D9); each name is checked once, at its
	// first place.
	done := map[string]bool{}
	for _, name := range required {
		if !done[name] {
			n.required = append(n.required, find(n, name))
			done[name] = true
		}
	}
}

func applies(keyword string, k kind) bool {
	switch keyword {
	case "properties", "required", "additionalProperties", "additional_properties":
		return k == kindObject
	case "items":
		return k == kindArray
	case "minimum":
		return k == kindInteger || k == kindNumber
	}
	return true
}

func isArray(v any) bool {
	switch v.(type) {
	case []any, []string:
		return true
	}
	return false
}

func stringList(v any) ([]string, bool) {
	switch l := v.(type) {
	case []string:
		return l, true
	case []any:
		out := make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out[i] = s
		}
		return out, true
	}
	return nil, false
}

// numberLiteral returns the JSON text of a number given as any Go number
// type, json.Number or jsonstrict.Number. Floats are written as encoding/json
// would write them (shortest form that reads back the same); NaN and
// infinities are not JSON numbers.
func numberLiteral(v any) (string, bool) {
	var buf [32]byte
	b, ok := appendNumber(buf[:0], v)
	if !ok {
		switch x := v.(type) {
		case json.Number:
			_, ok = parseDec(string(x))
			return string(x), ok
		case jsonstrict.Number:
			_, ok = parseDec(string(x))
			return string(x), ok
		}
		return "", false
	}
	return string(b), true
}

// appendNumber appends the literal of a Go number value; ok is false for
// anything else (including json.Number, which callers handle as text).
func appendNumber(dst []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return dst, false
		}
		return strconv.AppendFloat(dst, x, 'g', -1, 64), true
	case float32:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, false
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 32), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	}
	return dst, false
}

// goJSONType names the JSON type of a Go value, or describes the Go type.
func goJSONType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case map[string]any:
		return "object"
	case []any, []string:
		return "array"
	case json.Number, jsonstrict.Number:
		return "number"
	default:
		if _, ok := appendNumber(nil, x); ok {
			return "number"
		}
		if f, ok := x.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return "non-finite float"
		}
		return fmt.Sprintf("Go type %T", v)
	}
}

// escapePointer escapes one RFC 6901 reference token.
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// decodeError turns a strict-decoding failure into the contract's error.
func decodeError(stage Stage, what string, err error) *Error {
	e := &Error{Class: ClassValidation, Stage: stage, Message: what + " not valid JSON: " + err.Error(), Details: map[string]any{}}
	var je *jsonstrict.Error
	if errors.As(err, &je) {
		e.Details["offset"] = je.Offset
		e.Details["reason"] = decodeReason(je.Err)
	}
	if stage == StageArguments {
		e.Path = "$arguments"
	}
	return e
}

func decodeReason(err error) string {
	switch err {
	case jsonstrict.ErrDuplicateName:
		return "duplicate_name"
	case jsonstrict.ErrInvalidUTF8:
		return "invalid_utf8"
	case jsonstrict.ErrLoneSurrogate:
		return "lone_surrogate"
	case jsonstrict.ErrTrailingData:
		return "trailing_data"
	case jsonstrict.ErrTooDeep:
		return "too_deep"
	case jsonstrict.ErrTooLarge:
		return "too_large"
	}
	return "syntax"
}
