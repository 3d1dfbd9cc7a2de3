package inputschema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// There are two walkers with one shape: value* over decoded Go values and
// tape* over a strictly parsed document. Both visit in the order of D11 and
// D14 (required names in their order, then forbidden additional members by
// name, then present properties by name, array elements by index), so the
// first error reported is the first error of the all-errors list, and both
// forms of the same arguments give the same errors.

// validator is the per-call state, pooled so a valid call allocates nothing.
type validator struct {
	all       bool // report every error, not just the first
	probe     int  // > 0 while trying oneOf branches: no errors are built
	maxErrors int
	errs      []*Error
	truncated bool
	depth     int
	maxDepth  int

	path   []segment // the instance location of the value being checked
	slots  []slot    // per open object: the value found for each schema name
	numbuf []byte
	parser jsonstrict.Parser
	doc    *jsonstrict.Doc
}

// segment is one step of an instance location: a member name or an index.
type segment struct {
	name  string
	index int // -1 for a member name
}

// slot records the member found for one name of an object's schema: the Go
// value, or the tape index (0 = absent: index 0 is the root, never a member).
type slot struct {
	has  bool
	val  any
	tape int
}

var validators = sync.Pool{New: func() any { return new(validator) }}

func (s *Schema) getValidator(all bool) *validator {
	v := validators.Get().(*validator)
	v.all, v.probe, v.errs, v.truncated, v.depth = all, 0, nil, false, 0
	v.maxErrors, v.maxDepth = s.limits.MaxErrors, s.limits.MaxDepth
	v.path, v.slots = v.path[:0], v.slots[:0]
	return v
}

func (s *Schema) putValidator(v *validator) {
	v.errs, v.doc = nil, nil
	clear(v.slots[:cap(v.slots)]) // drop references to the caller's values
	validators.Put(v)
}

func (v *validator) result() error {
	if len(v.errs) == 0 {
		return nil
	}
	if !v.all {
		return v.errs[0]
	}
	return &ErrorList{Errors: v.errs, Truncated: v.truncated}
}

func (s *Schema) validateValue(args any, all bool) error {
	v := s.getValidator(all)
	defer s.putValidator(v)
	v.value(s.root, args)
	return v.result()
}

func (s *Schema) validateJSON(args []byte, all bool) error {
	v := s.getValidator(all)
	defer s.putValidator(v)
	doc, err := v.parser.Parse(args, &s.argOpts)
	if err != nil {
		e := decodeError(StageArguments, "the arguments are", err)
		if all {
			return &ErrorList{Errors: []*Error{e}}
		}
		return e
	}
	v.doc = doc
	v.tape(s.root, 0)
	return v.result()
}

// more reports whether to go on after a failure.
func (v *validator) more() bool { return v.all && v.probe == 0 && !v.truncated }

// fail records an error at the current instance location.
func (v *validator) fail(keyword, schemaPtr, msg string, details map[string]any) {
	if v.probe > 0 {
		return
	}
	if len(v.errs) >= v.maxErrors {
		v.truncated = true
		return
	}
	if details == nil {
		details = map[string]any{}
	}
	path, ptr := v.location()
	v.errs = append(v.errs, &Error{
		Class: ClassValidation, Stage: StageArguments, Message: msg,
		Path: path, Pointer: ptr, SchemaPointer: schemaPtr, Keyword: keyword, Details: details,
	})
}

// location renders the current path in display and RFC 6901 forms.
func (v *validator) location() (string, string) {
	var path, ptr strings.Builder
	path.WriteString("$arguments")
	for _, s := range v.path {
		if s.index >= 0 {
			i := strconv.Itoa(s.index)
			path.WriteString("[" + i + "]")
			ptr.WriteString("/" + i)
			continue
		}
		name := s.name
		if isIdentifier(name) {
			path.WriteString("." + name)
		} else {
			q, _ := json.Marshal(name)
			path.WriteString("[" + string(q) + "]")
		}
		ptr.WriteString("/" + escapePointer(name))
	}
	return path.String(), ptr.String()
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

func (v *validator) typeError(n *node, got string) {
	if v.probe > 0 {
		return
	}
	v.fail("type", n.typePtr, "must be "+article(n.kind.String())+", not "+got,
		map[string]any{"type": n.kind.String(), "actual": got})
}

func article(t string) string {
	if t == "integer" || t == "object" || t == "array" {
		return "an " + t
	}
	return "a " + t
}

// ---- decoded Go values ----

func (v *validator) value(n *node, x any) bool {
	switch n.kind {
	case kindOneOf:
		return v.oneOf(n, x, 0)
	case kindObject:
		m, ok := x.(map[string]any)
		if !ok {
			v.typeError(n, goJSONType(x))
			return false
		}
		return v.object(n, m)
	case kindArray:
		a, ok := x.([]any)
		if !ok {
			v.typeError(n, goJSONType(x))
			return false
		}
		if n.items == nil { // items is optional: any elements
			return true
		}
		if !v.enter() {
			return false
		}
		valid := true
		for i, e := range a {
			v.path = append(v.path, segment{index: i})
			ok := v.value(n.items, e)
			v.path = v.path[:len(v.path)-1]
			if !ok {
				valid = false
				if !v.more() {
					break
				}
			}
		}
		v.depth--
		return valid
	case kindString:
		if _, ok := x.(string); !ok {
			v.typeError(n, goJSONType(x))
			return false
		}
		return true
	case kindBoolean:
		if _, ok := x.(bool); !ok {
			v.typeError(n, goJSONType(x))
			return false
		}
		return true
	}
	// kindInteger, kindNumber
	switch num := x.(type) {
	case json.Number:
		return numberCheck(v, n, string(num))
	case jsonstrict.Number:
		return numberCheck(v, n, string(num))
	}
	lit, ok := appendNumber(v.numbuf[:0], x)
	if !ok {
		v.typeError(n, goJSONType(x))
		return false
	}
	v.numbuf = lit
	return numberCheck(v, n, lit)
}

// numberCheck applies integer and minimum (D12, D13) to a number literal.
func numberCheck[T text](v *validator, n *node, lit T) bool {
	d, ok := parseDec(lit)
	if !ok {
		v.typeError(n, "malformed number "+strconv.Quote(string(lit)))
		return false
	}
	valid := true
	if n.kind == kindInteger && !d.isInteger() {
		v.typeError(n, "a number with a fractional part")
		valid = false
		if !v.more() {
			return false
		}
	}
	if n.hasMin && cmpDec(&d, &n.min) < 0 {
		v.fail("minimum", n.ptr+"/minimum", fmt.Sprintf("must be at least %s", n.minText),
			map[string]any{"minimum": json.Number(n.minText), "actual": json.Number(string(lit))})
		valid = false
	}
	return valid
}

// enter counts one level of nesting; decoded values can be arbitrarily deep,
// even cyclic, so they are bounded as JSON text is.
func (v *validator) enter() bool {
	v.depth++
	if v.depth > v.maxDepth {
		v.fail("", "", fmt.Sprintf("arguments nested deeper than the limit of %d", v.maxDepth), nil)
		v.depth--
		return false
	}
	return true
}

func (v *validator) object(n *node, m map[string]any) bool {
	if !v.enter() {
		return false
	}
	// One lookup per schema name; members that are not properties are
	// counted rather than found, since listing them is only needed to
	// report them.
	slots := v.pushSlots(len(n.names))
	base := len(v.slots) - len(slots)
	props := 0
	for i := range n.names {
		x, ok := m[n.names[i].name]
		slots[i] = slot{has: ok, val: x}
		if ok && n.names[i].schema != nil {
			props++
		}
	}
	valid := v.objectRules(n, slots)
	if n.closed && props < len(m) {
		valid = false
		if v.probe == 0 {
			extra := make([]string, 0, len(m)-props)
			for k := range m {
				if i := find(n, k); i < 0 || n.names[i].schema == nil {
					extra = append(extra, k)
				}
			}
			v.additional(n, extra)
		}
	}
	if valid || v.more() {
		for i := range n.names {
			p := &n.names[i]
			if p.schema == nil || !slots[i].has {
				continue
			}
			v.path = append(v.path, segment{name: p.name, index: -1})
			ok := v.value(p.schema, slots[i].val)
			v.path = v.path[:len(v.path)-1]
			if !ok {
				valid = false
				if !v.more() {
					break
				}
			}
		}
	}
	v.slots = v.slots[:base]
	v.depth--
	return valid
}

// pushSlots reserves n zeroed slots for one object. Nested objects may
// reallocate v.slots, so the caller's slice can go stale: every slot is
// zeroed here, when reserved, never trusted from an earlier object.
func (v *validator) pushSlots(n int) []slot {
	base := len(v.slots)
	v.slots = slices.Grow(v.slots, n)[:base+n]
	slots := v.slots[base:]
	clear(slots)
	return slots
}

// objectRules checks required names, in the order of the required array.
func (v *validator) objectRules(n *node, slots []slot) bool {
	valid := true
	for _, i := range n.required {
		if !slots[i].has {
			valid = false
			v.fail("required", n.ptr+"/required", fmt.Sprintf("missing required property %q", n.names[i].name),
				map[string]any{"property": n.names[i].name})
			if !v.more() {
				return false
			}
		}
	}
	return valid
}

// additional reports members forbidden by additionalProperties: false, by
// name (D11), each at its own location.
func (v *validator) additional(n *node, extra []string) {
	if len(v.errs) > 0 && !v.more() {
		return
	}
	slices.Sort(extra)
	for _, k := range extra {
		v.path = append(v.path, segment{name: k, index: -1})
		v.fail("additionalProperties", n.ptr+"/additionalProperties", fmt.Sprintf("property %q is not allowed", k),
			map[string]any{"property": k})
		v.path = v.path[:len(v.path)-1]
		if !v.more() {
			break
		}
	}
}

// oneOf requires exactly one branch to accept the value (D16). Branches are
// tried without building errors; only a failure explains itself, with each
// branch's first error when none matched.
// x is the decoded value, or tapeAt the tape index when validating a tape.
func (v *validator) oneOf(n *node, x any, tapeAt int) bool {
	try := func(b *node) bool {
		if v.doc != nil {
			return v.tape(b, tapeAt)
		}
		return v.value(b, x)
	}
	matches := 0
	v.probe++
	for _, b := range n.branches {
		if try(b) {
			matches++
		}
	}
	v.probe--
	if matches == 1 {
		return true
	}
	if v.probe > 0 {
		return false
	}
	details := map[string]any{"matches": matches}
	if matches == 0 {
		// Explain each branch by its first error, for a caller (often a
		// model) to see what each alternative wanted.
		saveErrs, saveAll, saveTrunc := v.errs, v.all, v.truncated
		var why []map[string]any
		for i, b := range n.branches {
			v.errs, v.all, v.truncated = nil, false, false
			try(b)
			if len(v.errs) > 0 {
				e := v.errs[0]
				why = append(why, map[string]any{"branch": i, "message": e.Message, "pointer": e.Pointer, "schema_pointer": e.SchemaPointer, "keyword": e.Keyword})
			}
		}
		v.errs, v.all, v.truncated = saveErrs, saveAll, saveTrunc
		details["branches"] = why
	}
	v.fail("oneOf", n.ptr+"/oneOf", fmt.Sprintf("must match exactly one oneOf branch, but matches %d", matches), details)
	return false
}

// ---- strictly parsed JSON (tape) ----

func (v *validator) tape(n *node, i int) bool {
	d := v.doc
	k := d.Kind(i)
	switch n.kind {
	case kindOneOf:
		return v.oneOf(n, nil, i)
	case kindObject:
		if k != jsonstrict.KindObject {
			v.typeError(n, k.String())
			return false
		}
		return v.tapeObject(n, i)
	case kindArray:
		if k != jsonstrict.KindArray {
			v.typeError(n, k.String())
			return false
		}
		if n.items == nil {
			return true
		}
		valid := true
		idx := 0
		for j, end := i+1, d.Next(i); j < end; j = d.Next(j) {
			v.path = append(v.path, segment{index: idx})
			ok := v.tape(n.items, j)
			v.path = v.path[:len(v.path)-1]
			idx++
			if !ok {
				valid = false
				if !v.more() {
					break
				}
			}
		}
		return valid
	case kindString:
		if k != jsonstrict.KindString {
			v.typeError(n, k.String())
			return false
		}
		return true
	case kindBoolean:
		if k != jsonstrict.KindTrue && k != jsonstrict.KindFalse {
			v.typeError(n, k.String())
			return false
		}
		return true
	}
	if k != jsonstrict.KindNumber {
		v.typeError(n, k.String())
		return false
	}
	return numberCheck(v, n, d.Raw(i))
}

func (v *validator) tapeObject(n *node, i int) bool {
	d := v.doc
	slots := v.pushSlots(len(n.names))
	base := len(v.slots) - len(slots)
	unknown := 0
	end := d.Next(i)
	for j := i + 1; j < end; j = d.Next(j + 1) {
		if at := find(n, d.Raw(j)); at >= 0 {
			slots[at] = slot{has: true, tape: j + 1}
			if n.names[at].schema != nil {
				continue
			}
		}
		unknown++
	}
	valid := v.objectRules(n, slots)
	if n.closed && unknown > 0 {
		valid = false
		if v.probe == 0 {
			extra := make([]string, 0, unknown)
			for j := i + 1; j < end; j = d.Next(j + 1) {
				if at := find(n, d.Raw(j)); at < 0 || n.names[at].schema == nil {
					extra = append(extra, d.Str(j))
				}
			}
			v.additional(n, extra)
		}
	}
	if valid || v.more() {
		for at := range n.names {
			p := &n.names[at]
			if p.schema == nil || !slots[at].has {
				continue
			}
			v.path = append(v.path, segment{name: p.name, index: -1})
			ok := v.tape(p.schema, slots[at].tape)
			v.path = v.path[:len(v.path)-1]
			if !ok {
				valid = false
				if !v.more() {
					break
				}
			}
		}
	}
	v.slots = v.slots[:base]
	return valid
}
