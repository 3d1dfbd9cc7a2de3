package draft2020

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Converting the library's error tree is done so that its cost follows the
// length of the list, not the size of the tree: 4 MiB of arguments can hold
// two million violations, and only MaxErrors are listed. The walk hands each
// violation, as a small pending entry holding just what ordering needs
// (instance location, schema pointer, keyword), to a selector that keeps the
// first MaxErrors+1 in list order; full errors, with messages, paths and
// details, are built only for those. Measured on two million violations:
// about 0.6 s and 110 MB here, against 1.8 s and 830 MB for the library's
// own validation of the same arguments (building every error first cost
// 2 GB).

// converter flattens one library error tree into contract errors.
type converter struct {
	v    *Validator
	inst any
}

// frame is where the walk stands in the schema: the absolute location of the
// schema the node belongs to (the library's SchemaURL, or a reference's
// target), the evaluation path so far (through $ref), and the last location
// known to be inside the schema document.
type frame struct {
	schemaURL string
	evalPath  string
	evalOK    bool
	lastDoc   string
}

// pending is one violation before it becomes an error: the library node,
// the frame of its parent (its own is derived when the error is built),
// which of the node's names it is about when the node splits (required,
// additionalProperties), and the ordering key.
type pending struct {
	e      *jsonschema.ValidationError
	parent *frame
	split  int
	seq    int    // order of report by the library
	sptr   string // schema pointer
	kw     string
	err    *inputschema.Error // built, once needed
}

// member is the name a split additionalProperties entry adds to the
// instance location (the forbidden member is reported at its own location,
// D17), or "" with ok false.
func (p *pending) member() (string, bool) {
	if k, ok := p.e.ErrorKind.(*kind.AdditionalProperties); ok {
		return k.Properties[p.split], true
	}
	return "", false
}

// inst is the instance location of p.
func (p *pending) inst() []string {
	if name, ok := p.member(); ok {
		return append(slices.Clip(p.e.InstanceLocation), name)
	}
	return p.e.InstanceLocation
}

// compareInst orders instance locations without building them.
func compareInst(a, b *pending) int {
	la, lb := a.e.InstanceLocation, b.e.InstanceLocation
	ma, hasA := a.member()
	mb, hasB := b.member()
	n := min(len(la), len(lb))
	for i := 0; i < n; i++ {
		if c := compareToken(la[i], lb[i]); c != 0 {
			return c
		}
	}
	// One location is a prefix of the other; the members, if any, come
	// next.
	switch {
	case len(la) == len(lb):
		switch {
		case hasA && hasB:
			return compareToken(ma, mb)
		case hasA:
			return 1
		case hasB:
			return -1
		}
		return 0
	case len(la) < len(lb):
		if !hasA {
			return -1
		}
		if c := compareToken(ma, lb[len(la)]); c != 0 {
			return c
		}
		if len(lb) == len(la)+1 && !hasB {
			return 0
		}
		return -1
	default:
		return -compareInst(b, a)
	}
}

func (v *Validator) convertErrors(root *jsonschema.ValidationError, inst any) error {
	c := converter{v: v, inst: inst}
	roots := []*jsonschema.ValidationError{root}
	for k := v.maxErrors + 1; ; k *= 4 {
		sel := c.selectFirst(roots, &frame{evalOK: true}, k)
		if len(sel.h) == 0 {
			// Never turn the library's "invalid" into "valid".
			return list(&inputschema.Error{Class: inputschema.ClassValidation, Stage: inputschema.StageArguments,
				Message: internalURLs(root.Error()), Path: "$arguments", Details: map[string]any{}})
		}
		errs, truncated := c.build(sel.sorted(), v.maxErrors)
		// Done, unless repeats among the kept entries took the places of
		// distinct errors that were let go: then keep more.
		if truncated || !sel.evicted {
			return &inputschema.ErrorList{Errors: errs, Truncated: truncated}
		}
	}
}

func isLoop(p *pending) bool {
	_, ok := p.e.ErrorKind.(*kind.RefCycle)
	return ok
}

// order is the order of the list: instance location, then schema pointer
// (token by token, indexes numerically), then keyword, then message, then
// the order the library reported them in. For the keywords split into one
// error per name (required and its dependent forms) the message is skipped:
// those keep the order of the names in the schema, as inputschema reports
// required names (D14). Every other tie is broken by the message, so that
// the library's map walks (propertyNames over the members, for one) do not
// show in the order. A reference loop comes before everything.
func (c *converter) order(a, b *pending) int {
	if la, lb := isLoop(a), isLoop(b); la != lb {
		if la {
			return -1
		}
		return 1
	}
	if x := compareInst(a, b); x != 0 {
		return x
	}
	if x := comparePointers(a.sptr, b.sptr); x != 0 {
		return x
	}
	if x := strings.Compare(a.kw, b.kw); x != 0 {
		return x
	}
	if !splitKeywords[a.kw] {
		if x := strings.Compare(c.built(a).Message, c.built(b).Message); x != 0 {
			return x
		}
	}
	return a.seq - b.seq
}

var splitKeywords = map[string]bool{"required": true, "dependentRequired": true, "dependencies": true}

// selector keeps the k first violations in list order as the walk reports
// them, in a max-heap: memory and time stay proportional to k, not to the
// number of violations (two million fit in 4 MiB of arguments). Once a
// reference loop is seen, only loops are kept: a part of the schema that
// cannot be evaluated decides the call (unsupported_capability), alone.
type selector struct {
	c       *converter
	k       int
	h       []pending
	seq     int
	loops   bool
	evicted bool // some violation was let go
}

func (c *converter) selectFirst(roots []*jsonschema.ValidationError, parent *frame, k int) *selector {
	s := &selector{c: c, k: k}
	for _, e := range roots {
		c.walk(e, parent, s.add)
	}
	return s
}

func (s *selector) add(p pending) {
	p.seq = s.seq
	s.seq++
	if isLoop(&p) && !s.loops {
		s.loops, s.h, s.evicted = true, s.h[:0], false
	}
	if s.loops && !isLoop(&p) {
		return
	}
	if len(s.h) < s.k {
		s.h = append(s.h, p)
		s.up(len(s.h) - 1)
		return
	}
	s.evicted = true
	if s.c.order(&p, &s.h[0]) >= 0 {
		return
	}
	s.h[0] = p
	s.down(0)
}

func (s *selector) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if s.c.order(&s.h[i], &s.h[parent]) <= 0 {
			return
		}
		s.h[i], s.h[parent] = s.h[parent], s.h[i]
		i = parent
	}
}

func (s *selector) down(i int) {
	for {
		l, largest := 2*i+1, i
		if l < len(s.h) && s.c.order(&s.h[l], &s.h[largest]) > 0 {
			largest = l
		}
		if r := l + 1; r < len(s.h) && s.c.order(&s.h[r], &s.h[largest]) > 0 {
			largest = r
		}
		if largest == i {
			return
		}
		s.h[i], s.h[largest] = s.h[largest], s.h[i]
		i = largest
	}
}

// sorted returns the kept violations in list order.
func (s *selector) sorted() []pending {
	s.c.sort(s.h)
	return s.h
}

// sort sorts entries into list order.
func (c *converter) sort(ps []pending) {
	slices.SortFunc(ps, func(a, b pending) int {
		// a and b are copies: messages built for ties are not kept, but
		// ties on everything else are rare.
		return c.order(&a, &b)
	})
}

// build turns sorted entries into errors, dropping exact repeats (one schema
// reached twice, through two $refs to it, reports twice) and stopping at max;
// truncated reports that a further distinct error existed.
func (c *converter) build(ps []pending, max int) ([]*inputschema.Error, bool) {
	type key struct{ ptr, sptr, kw, msg string }
	seen := map[key]bool{}
	var out []*inputschema.Error
	for i := range ps {
		e := c.built(&ps[i])
		k := key{e.Pointer, e.SchemaPointer, e.Keyword, e.Message}
		if seen[k] {
			continue
		}
		if len(out) == max {
			return out, true
		}
		seen[k] = true
		out = append(out, e)
	}
	return out, false
}

// built returns p's error, building it the first time.
func (c *converter) built(p *pending) *inputschema.Error {
	if p.err == nil {
		p.err = c.leaf(p)
	}
	return p.err
}

// enter computes the frame of node e from its parent's.
func enter(e *jsonschema.ValidationError, parent frame) frame {
	f := parent
	if parent.schemaURL != "" {
		if suffix, ok := strings.CutPrefix(e.SchemaURL, parent.schemaURL); ok {
			if p, err := url.PathUnescape(suffix); err == nil {
				suffix = p
			}
			f.evalPath += suffix
		} else {
			f.evalOK = false
		}
	}
	f.schemaURL = e.SchemaURL
	if ptr, ok := docPointer(e.SchemaURL); ok {
		f.lastDoc = ptr
	}
	return f
}

// docPointer returns the pointer into the schema document of a location, if
// it is in the document.
func docPointer(loc string) (string, bool) {
	frag, ok := strings.CutPrefix(loc, baseURL+"#")
	if !ok {
		return "", false
	}
	if p, err := url.PathUnescape(frag); err == nil {
		return p, true
	}
	return frag, true
}

// walk reports each violation under e to add, in the library's order.
func (c *converter) walk(e *jsonschema.ValidationError, parent *frame, add func(pending)) {
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf:
		// Conjunctions: each cause is a failure on its own.
		f := enter(e, *parent)
		for _, cause := range e.Causes {
			c.walk(cause, &f, add)
		}
		return
	case *kind.Reference:
		f := enter(e, *parent)
		f.evalPath += "/" + k.Keyword
		if ptr, ok := docPointer(e.SchemaURL); ok {
			f.lastDoc = ptr + "/" + escapeToken(k.Keyword)
		}
		f.schemaURL = k.URL
		if ptr, ok := docPointer(k.URL); ok {
			f.lastDoc = ptr
		}
		for _, cause := range e.Causes {
			c.walk(cause, &f, add)
		}
		return
	}
	kw, kwPath, n := c.shape(e)
	url := schemaURLOf(e)
	sptr := parent.lastDoc
	if p, ok := docPointer(url); ok {
		sptr = p
		if kwPath != "" {
			sptr += "/" + kwPath
		}
	}
	for i := range n {
		add(pending{e: e, parent: parent, split: i, sptr: sptr, kw: kw})
	}
}

// schemaURLOf is the location of the schema holding the failed keyword. The
// library reports propertyNames at the propertyNames schema; the error is
// the keyword's, on the object.
func schemaURLOf(e *jsonschema.ValidationError) string {
	if _, ok := e.ErrorKind.(*kind.PropertyNames); ok {
		return strings.TrimSuffix(e.SchemaURL, "/propertyNames")
	}
	return e.SchemaURL
}

// shape is what ordering needs of a leaf: its keyword, the keyword's path
// below the schema (escaped; "" for the schema itself) and how many errors
// it becomes.
func (c *converter) shape(e *jsonschema.ValidationError) (keyword, kwPath string, n int) {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		return "required", "required", len(k.Missing)
	case *kind.AdditionalProperties:
		// Sorted once, so that split i is the i-th name in byte order.
		slices.Sort(k.Properties)
		return "additionalProperties", "additionalProperties", len(k.Properties)
	case *kind.DependentRequired:
		return "dependentRequired", "dependentRequired/" + escapeToken(k.Prop), len(k.Missing)
	case *kind.Dependency:
		// The library names this keyword "dependency"; draft-07 spells it
		// "dependencies".
		return "dependencies", "dependencies/" + escapeToken(k.Prop), len(k.Missing)
	case *kind.ExclusiveMinimum:
		if c.isDraft4Flag(e, "exclusiveMinimum") {
			return "minimum", "minimum", 1
		}
	case *kind.ExclusiveMaximum:
		if c.isDraft4Flag(e, "exclusiveMaximum") {
			return "maximum", "maximum", 1
		}
	case *kind.Not:
		return "not", "not", 1
	case *kind.FalseSchema:
		return c.falseKeyword(e), "", 1
	case *kind.RefCycle:
		return "$ref", "", 1
	}
	p := e.ErrorKind.KeywordPath()
	if len(p) == 0 {
		return "", "", 1
	}
	return p[0], pointerOf(p)[1:], 1
}

// isDraft4Flag reports a draft-04 exclusiveMinimum/Maximum, a boolean beside
// minimum/maximum: the bound, and so the keyword at fault, is the other one.
func (c *converter) isDraft4Flag(e *jsonschema.ValidationError, kw string) bool {
	v, ok := c.keywordValue(e, kw)
	_, isBool := v.(bool)
	return ok && isBool
}

// keywordValue is the value of a keyword in the schema document, for the
// details (the literal the schema wrote, e.g. minimum's json.Number).
func (c *converter) keywordValue(e *jsonschema.ValidationError, kw string) (any, bool) {
	p, ok := docPointer(e.SchemaURL)
	if !ok {
		return nil, false
	}
	return lookup(c.v.doc, p+"/"+escapeToken(kw))
}

// instanceValue is the argument value at e's location.
func (c *converter) instanceValue(e *jsonschema.ValidationError) any {
	v, _ := lookup(c.inst, pointerOf(e.InstanceLocation))
	return v
}

func article(t string) string {
	switch t {
	case "integer", "object", "array":
		return "an " + t
	case "null":
		return t
	}
	return "a " + t
}

// ratText writes a bound the library holds as a big.Rat, exactly: it came
// from a JSON decimal, so its denominator is 2^a·5^b and max(a, b) places,
// at most the denominator's bit length, suffice.
func ratText(r *big.Rat) json.Number {
	if r == nil {
		return ""
	}
	if r.IsInt() {
		return json.Number(r.Num().String())
	}
	s := r.FloatString(r.Denom().BitLen())
	s = strings.TrimRight(s, "0")
	return json.Number(strings.TrimSuffix(s, "."))
}

// leaf builds the error of one pending violation.
func (c *converter) leaf(p *pending) *inputschema.Error {
	e := p.e
	f := enter(e, *p.parent)
	kw, kwPath, _ := c.shape(e)
	if _, ok := e.ErrorKind.(*kind.PropertyNames); ok {
		f.evalPath = strings.TrimSuffix(f.evalPath, "/propertyNames")
	}
	ptr := pointerOf(p.inst())
	details := map[string]any{}
	out := &inputschema.Error{
		Class: inputschema.ClassValidation, Stage: inputschema.StageArguments,
		Path: displayPath(c.inst, ptr), Pointer: ptr, SchemaPointer: p.sptr, Keyword: kw, Details: details,
	}
	suffix := ""
	if kwPath != "" {
		suffix = "/" + kwPath
	}
	if _, ok := docPointer(schemaURLOf(e)); !ok {
		details["schema_location"] = schemaURLOf(e) + suffix
	}
	if f.evalOK && f.evalPath+suffix != p.sptr {
		details["keyword_location"] = f.evalPath + suffix
	}
	// bound reports a numeric limit with the schema's own literal (the
	// library's big.Rat when the schema is not in the document).
	bound := func(verb string, rat *big.Rat) {
		want, ok := c.keywordValue(e, kw)
		if _, isNum := want.(json.Number); !ok || !isNum {
			want = ratText(rat)
		}
		out.Message = fmt.Sprintf("%s %v", verb, want)
		details[kw] = want
		details["actual"] = c.instanceValue(e)
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, t := range k.Want {
			want[i] = article(t)
		}
		got := k.Got
		if got == "number" && slices.Contains(k.Want, "integer") {
			got = "a number with a fractional part"
		}
		// The schema's own value, in its order (the library sorts).
		var typ any = k.Want
		if len(k.Want) == 1 {
			typ = k.Want[0]
		} else if lit, ok := c.keywordValue(e, "type"); ok {
			if names, ok := lit.([]any); ok && len(names) == len(k.Want) {
				typ = names
				for i, n := range names {
					want[i] = article(fmt.Sprint(n))
				}
			}
		}
		out.Message = "must be " + strings.Join(want, " or ") + ", not " + got
		details["type"], details["actual"] = typ, got
	case *kind.Required:
		name := k.Missing[p.split]
		out.Message = fmt.Sprintf("missing required property %q", name)
		details["property"] = name
	case *kind.AdditionalProperties:
		name := k.Properties[p.split]
		out.Message = fmt.Sprintf("property %q is not allowed", name)
		details["property"] = name
	case *kind.DependentRequired:
		name := k.Missing[p.split]
		out.Message = fmt.Sprintf("missing property %q, required when %q is present", name, k.Prop)
		details["property"], details["required_by"] = name, k.Prop
	case *kind.Dependency:
		name := k.Missing[p.split]
		out.Message = fmt.Sprintf("missing property %q, required when %q is present", name, k.Prop)
		details["property"], details["required_by"] = name, k.Prop
	case *kind.Enum:
		out.Message = "must be one of the values of enum"
		details["enum"], _ = c.keywordValue(e, "enum")
	case *kind.Const:
		out.Message = "must be the value of const"
		details["const"], _ = c.keywordValue(e, "const")
	case *kind.Minimum:
		bound("must be at least", k.Want)
	case *kind.Maximum:
		bound("must be at most", k.Want)
	case *kind.ExclusiveMinimum:
		bound("must be greater than", k.Want)
	case *kind.ExclusiveMaximum:
		bound("must be less than", k.Want)
	case *kind.MultipleOf:
		bound("must be a multiple of", k.Want)
	case *kind.MinLength:
		out.Message = fmt.Sprintf("must be at least %d characters long, not %d", k.Want, k.Got)
		details["minLength"], details["actual"] = k.Want, k.Got
	case *kind.MaxLength:
		out.Message = fmt.Sprintf("must be at most %d characters long, not %d", k.Want, k.Got)
		details["maxLength"], details["actual"] = k.Want, k.Got
	case *kind.Pattern:
		out.Message = fmt.Sprintf("must match the pattern %q", k.Want)
		details["pattern"] = k.Want
	case *kind.MinItems:
		out.Message = fmt.Sprintf("must have at least %d items, not %d", k.Want, k.Got)
		details["minItems"], details["actual"] = k.Want, k.Got
	case *kind.MaxItems:
		out.Message = fmt.Sprintf("must have at most %d items, not %d", k.Want, k.Got)
		details["maxItems"], details["actual"] = k.Want, k.Got
	case *kind.MinProperties:
		out.Message = fmt.Sprintf("must have at least %d properties, not %d", k.Want, k.Got)
		details["minProperties"], details["actual"] = k.Want, k.Got
	case *kind.MaxProperties:
		out.Message = fmt.Sprintf("must have at most %d properties, not %d", k.Want, k.Got)
		details["maxProperties"], details["actual"] = k.Want, k.Got
	case *kind.UniqueItems:
		out.Message = fmt.Sprintf("items %d and %d must not be equal", k.Duplicates[0], k.Duplicates[1])
		details["duplicates"] = []int{k.Duplicates[0], k.Duplicates[1]}
	case *kind.AnyOf:
		out.Message = "must match at least one anyOf branch, but matches none"
		details["branches"] = c.branches(e, &f)
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			out.Message = "must match exactly one oneOf branch, but matches none"
			details["matches"], details["branches"] = 0, c.branches(e, &f)
		} else {
			out.Message = fmt.Sprintf("must match exactly one oneOf branch, but matches more than one (branches %d and %d)", k.Subschemas[0], k.Subschemas[1])
			details["matched_branches"] = slices.Clone(k.Subschemas)
		}
	case *kind.Not:
		out.Message = "must not match the schema of not"
	case *kind.Contains:
		out.Message = "must contain at least one item that matches contains"
	case *kind.MinContains:
		out.Message = fmt.Sprintf("must contain at least %d items that match contains, not %d", k.Want, len(k.Got))
		details["minContains"], details["matched"] = k.Want, slices.Clone(k.Got)
	case *kind.MaxContains:
		out.Message = fmt.Sprintf("must contain at most %d items that match contains, not %d", k.Want, len(k.Got))
		details["maxContains"], details["matched"] = k.Want, slices.Clone(k.Got)
	case *kind.PropertyNames:
		out.Message = fmt.Sprintf("property name %q does not match propertyNames", k.Property)
		details["property"] = k.Property
		if why := c.first(e.Causes, &f); why != nil {
			details["reason"] = why.Message
		}
	case *kind.FalseSchema:
		out.Message = "no value is allowed here (the schema is false)"
		if n := len(e.InstanceLocation); n > 0 && (kw == "properties" || kw == "patternProperties" ||
			kw == "additionalProperties" || kw == "unevaluatedProperties") {
			if _, isObj := c.parentValue(e).(map[string]any); isObj {
				name := e.InstanceLocation[n-1]
				details["property"] = name
				out.Message = fmt.Sprintf("property %q is not allowed", name)
			}
		} else if kw == "unevaluatedItems" || kw == "items" || kw == "prefixItems" {
			out.Message = "item is not allowed"
		}
	case *kind.Format:
		// Not compiled in (dropFormats); kept so that a library change
		// would still be reported, not lost.
		out.Message = kindMessage(k)
		details["format"] = k.Want
	case *kind.RefCycle:
		// A schema that loops on itself ({"$defs":{"a":{"$ref":"#/$defs/b"},
		// "b":{"$ref":"#/$defs/a"}}}) cannot be evaluated: the schema's
		// fault, not the arguments', and only visible here.
		out.Class = inputschema.ClassUnsupported
		out.Message = internalURLs(kindMessage(k))
	default:
		out.Message = internalURLs(kindMessage(k))
	}
	return out
}

// first is the first violation, in the list's order, under causes.
func (c *converter) first(causes []*jsonschema.ValidationError, f *frame) *inputschema.Error {
	sel := c.selectFirst(causes, f, 1)
	if len(sel.h) == 0 {
		return nil
	}
	return c.built(&sel.h[0])
}

// branches explains a failed anyOf or oneOf: each branch's first error, as
// inputschema does for oneOf. Every branch failed, so the causes are the
// branches in order.
func (c *converter) branches(e *jsonschema.ValidationError, f *frame) []map[string]any {
	var why []map[string]any
	for i, cause := range e.Causes {
		first := c.first([]*jsonschema.ValidationError{cause}, f)
		if first == nil {
			continue
		}
		why = append(why, map[string]any{"branch": i, "message": first.Message, "pointer": first.Pointer,
			"schema_pointer": first.SchemaPointer, "keyword": first.Keyword})
	}
	return why
}

// singleSchemaKeywords are the keywords whose value is one schema: a false
// schema there is that keyword's refusal.
var singleSchemaKeywords = map[string]bool{
	"additionalProperties": true, "unevaluatedProperties": true, "unevaluatedItems": true,
	"items": true, "additionalItems": true, "contains": true, "propertyNames": true,
	"not": true, "if": true, "then": true, "else": true, "contentSchema": true,
}

// falseKeyword names the keyword holding a false schema.
func (c *converter) falseKeyword(e *jsonschema.ValidationError) string {
	loc, _ := docPointer(e.SchemaURL)
	toks := tokensOf(loc)
	switch {
	case len(toks) >= 1 && singleSchemaKeywords[toks[len(toks)-1]]:
		return toks[len(toks)-1]
	case len(toks) >= 2 && containers[toks[len(toks)-2]]:
		return toks[len(toks)-2]
	}
	return ""
}

func (c *converter) parentValue(e *jsonschema.ValidationError) any {
	n := len(e.InstanceLocation)
	v, _ := lookup(c.inst, pointerOf(e.InstanceLocation[:n-1]))
	return v
}
