package bench

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"pgregory.net/rapid"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentbackplane/backplane/inputschema"
)

// defaultDifferentialChecks is how many generated cases TestDifferential
// runs when neither -rapid.checks nor RAPID_CHECKS says otherwise. Rapid's
// own default of 100 is too few to meet the rarer shapes (a oneOf where two
// branches accept, a number just below a decimal minimum).
const defaultDifferentialChecks = 1000

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !explicit["rapid.checks"] && !env {
		_ = flag.Set("rapid.checks", strconv.Itoa(defaultDifferentialChecks))
	}
	// A failure prints the seed that reproduces it; keep rapid from writing
	// fail files into the module's source tree.
	if _, env := os.LookupEnv("RAPID_NOFAILFILE"); !explicit["rapid.nofailfile"] && !env {
		_ = flag.Set("rapid.nofailfile", "true")
	}
	os.Exit(m.Run())
}

// ---------------------------------------------------------------------------
// Generated schemas

// genSchema is a schema inside the supported subset (seed table, D4-D10).
type genSchema struct {
	typ         string // object, array, string, integer, number, boolean; "" for a oneOf schema
	omitType    bool   // root only: "type" left out, which D4 allows
	props       []genProp
	emptyProps  bool     // object without properties: write "properties": {} rather than nothing
	required    []string // may repeat and may name absent properties (D9)
	additional  *bool    // nil: keyword absent
	minimum     string   // literal text; "" for none
	items       *genSchema
	oneOf       []*genSchema
	description *string
}

type genProp struct {
	name   string
	schema *genSchema
}

// propertyNames mixes plain identifiers with names that need quoting in a
// display path or escaping in a JSON pointer, the empty name, non-ASCII names
// and names equal to keywords (D5: inside properties they are just names).
var propertyNames = []string{
	"a", "b", "name", "id", "a.b", "x y", "~1", "a/b", "", "é", "日本", "0", "type", "required", "items",
}

// absentNames appear in required lists or as extra members but never in
// properties, so "required but not described" and "additional" both occur.
var absentNames = []string{"missing", "zz"}

// minimumLiterals covers integer, decimal and exponent spellings, negative
// zero, a bound that float64 cannot hold exactly, and one beyond its range.
var minimumLiterals = []string{
	"0", "-3", "2.5", "1e2", "0.1", "1", "1.0", "-0", "-2.5e-1", "1E1", "10e-1",
	"0.99999999999999999999", "12345678901234567890", "1e400",
}

const maxSchemaDepth = 4

func drawSchema(t *rapid.T, depth int) *genSchema {
	kinds := []string{"string", "integer", "number", "boolean"}
	if depth < maxSchemaDepth {
		kinds = append(kinds, "object", "object", "object", "array", "oneOf", "oneOf")
	}
	kind := rapid.SampledFrom(kinds).Draw(t, "kind")
	s := &genSchema{typ: kind}
	if rapid.IntRange(0, 3).Draw(t, "hasDescription") == 0 {
		d := rapid.SampledFrom([]string{"", "A value.", "Ünïcødé ✓", `quote " and \ backslash`}).Draw(t, "description")
		s.description = &d
	}
	switch kind {
	case "object":
		fillObject(t, s, depth, 0)
	case "array":
		if rapid.IntRange(0, 3).Draw(t, "hasItems") > 0 {
			s.items = drawSchema(t, depth+1)
		}
	case "integer", "number":
		if rapid.Bool().Draw(t, "hasMinimum") {
			s.minimum = rapid.SampledFrom(minimumLiterals).Draw(t, "minimum")
		}
	case "oneOf":
		s.typ = ""
		n := rapid.IntRange(1, 3).Draw(t, "branches")
		for i := range n {
			if i > 0 && rapid.Bool().Draw(t, "overlapBranch") {
				s.oneOf = append(s.oneOf, overlapping(t, s.oneOf[rapid.IntRange(0, i-1).Draw(t, "overlapWith")]))
				continue
			}
			s.oneOf = append(s.oneOf, drawSchema(t, depth+1))
		}
	}
	return s
}

// overlapping returns a branch that accepts some of the values b accepts, so
// that "several branches match" is common rather than rare.
func overlapping(t *rapid.T, b *genSchema) *genSchema {
	c := *b
	switch b.typ {
	case "integer":
		c.typ = "number"
	case "number":
		c.typ = "integer"
	case "object":
		// Same shape, fewer demands.
		c.required = nil
		c.additional = nil
	}
	if c.typ == "integer" || c.typ == "number" {
		if rapid.Bool().Draw(t, "overlapMinimum") {
			c.minimum = rapid.SampledFrom(append([]string{""}, minimumLiterals...)).Draw(t, "overlapMinimumValue")
		}
	}
	return &c
}

// fillObject gives an object schema properties, required and
// additionalProperties. minProps is 1 at the root.
func fillObject(t *rapid.T, s *genSchema, depth, minProps int) {
	names := rapid.SliceOfNDistinct(rapid.SampledFrom(propertyNames), minProps, 4, rapid.ID[string]).Draw(t, "properties")
	for _, n := range names {
		s.props = append(s.props, genProp{name: n, schema: drawSchema(t, depth+1)})
	}
	if len(names) == 0 {
		s.emptyProps = rapid.Bool().Draw(t, "emptyProperties")
	}
	candidates := append(append([]string{}, names...), absentNames...)
	s.required = rapid.SliceOfN(rapid.SampledFrom(candidates), 0, 4).Draw(t, "required")
	switch rapid.IntRange(0, 2).Draw(t, "additionalProperties") {
	case 1:
		v := true
		s.additional = &v
	case 2:
		v := false
		s.additional = &v
	}
}

func drawRootSchema(t *rapid.T) *genSchema {
	s := &genSchema{typ: "object"}
	s.omitType = rapid.IntRange(0, 4).Draw(t, "rootOmitType") == 0
	if rapid.IntRange(0, 3).Draw(t, "rootHasDescription") == 0 {
		d := "A tool."
		s.description = &d
	}
	fillObject(t, s, 1, 1)
	return s
}

// writeSchema serializes deterministically. For the peer, dedupeRequired
// drops repeated names from required lists: the draft 2020-12 meta-schema
// demands unique items there while D9 allows repeats, and repeats do not
// change what a required list means.
func writeSchema(b *strings.Builder, s *genSchema, dedupeRequired bool) {
	b.WriteByte('{')
	first := true
	key := func(k string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(b, k, false)
		b.WriteByte(':')
	}
	if s.typ != "" && !s.omitType {
		key("type")
		writeString(b, s.typ, false)
	}
	if s.description != nil {
		key("description")
		writeString(b, *s.description, false)
	}
	if s.typ == "object" {
		if len(s.props) > 0 || s.emptyProps {
			key("properties")
			b.WriteByte('{')
			for i, p := range s.props {
				if i > 0 {
					b.WriteByte(',')
				}
				writeString(b, p.name, false)
				b.WriteByte(':')
				writeSchema(b, p.schema, dedupeRequired)
			}
			b.WriteByte('}')
		}
		if len(s.required) > 0 {
			key("required")
			b.WriteByte('[')
			seen := map[string]bool{}
			n := 0
			for _, r := range s.required {
				if dedupeRequired && seen[r] {
					continue
				}
				seen[r] = true
				if n > 0 {
					b.WriteByte(',')
				}
				n++
				writeString(b, r, false)
			}
			b.WriteByte(']')
		}
		if s.additional != nil {
			key("additionalProperties")
			b.WriteString(strconv.FormatBool(*s.additional))
		}
	}
	if s.minimum != "" {
		key("minimum")
		b.WriteString(s.minimum)
	}
	if s.items != nil {
		key("items")
		writeSchema(b, s.items, dedupeRequired)
	}
	if s.typ == "" {
		key("oneOf")
		b.WriteByte('[')
		for i, br := range s.oneOf {
			if i > 0 {
				b.WriteByte(',')
			}
			writeSchema(b, br, dedupeRequired)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
}

// ---------------------------------------------------------------------------
// Generated JSON values

// jv is a JSON value that keeps what encoding into Go values would lose:
// number literals as written, member order, and how strings are escaped.
type jv struct {
	kind    byte // 'n' null, 't' true, 'f' false, 'd' number, 's' string, 'a' array, 'o' object
	text    string
	escape  bool // write non-ASCII as \u escapes
	elems   []jv
	members []jmember
}

type jmember struct {
	name   string
	escape bool
	val    jv
}

func writeValue(b *strings.Builder, v jv) {
	switch v.kind {
	case 'n':
		b.WriteString("null")
	case 't':
		b.WriteString("true")
	case 'f':
		b.WriteString("false")
	case 'd':
		b.WriteString(v.text)
	case 's':
		writeString(b, v.text, v.escape)
	case 'a':
		b.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				b.WriteByte(',')
			}
			writeValue(b, e)
		}
		b.WriteByte(']')
	case 'o':
		b.WriteByte('{')
		for i, m := range v.members {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, m.name, m.escape)
			b.WriteByte(':')
			writeValue(b, m.val)
		}
		b.WriteByte('}')
	default:
		panic("bad kind " + string(v.kind))
	}
}

// writeString writes a JSON string. With escapeAll every rune outside
// printable ASCII becomes a \u escape (a surrogate pair above U+FFFF), so
// decoders must unescape before comparing names.
func writeString(b *strings.Builder, s string, escapeAll bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x20 || escapeAll && r > 0x7e:
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				fmt.Fprintf(b, `\u%04x\u%04x`, hi, lo)
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

var sampleStrings = []string{
	"", "hello", "é", "日本語", "😀", `a"b`, "line\nbreak", "\x00", `\`, "</script>", "\u2028", "1", "true", "null",
}

func drawString(t *rapid.T) jv {
	var s string
	if rapid.Bool().Draw(t, "sampleString") {
		s = rapid.SampledFrom(sampleStrings).Draw(t, "string")
	} else {
		s = rapid.StringN(0, 6, -1).Draw(t, "string")
	}
	return jv{kind: 's', text: s, escape: rapid.IntRange(0, 3).Draw(t, "escapeString") == 0}
}

// unboundedBases are where numbers are drawn around when a schema has no
// minimum: zero, fractions, integers beyond float64's exact range, and
// magnitudes beyond its range.
var unboundedBases = []string{"0", "1", "-1", "2.5", "-7", "12345678901234567890", "-12345678901234567890", "1e400", "1e-30"}

// deltas move a number to, just below, just above or far from its base.
var deltas = []string{"0", "0", "0", "0", "1", "-1", "1", "3", "1e20", "0.5", "-0.5", "0.1", "-0.1", "1e-20", "-1e-20"}

// drawNumber draws a number literal near minimum (or near an interesting
// base when minimum is ""), written in one of several equivalent spellings.
// With integral set it mostly draws whole numbers (the least one at or above
// base+delta), so that an integer schema is not mostly failing on fractions.
func drawNumber(t *rapid.T, minimum string, integral bool) jv {
	base := minimum
	if base == "" || rapid.IntRange(0, 5).Draw(t, "ignoreMinimum") == 0 {
		base = rapid.SampledFrom(unboundedBases).Draw(t, "numberBase")
	}
	r, ok := new(big.Rat).SetString(base)
	if !ok {
		panic("bad base " + base)
	}
	d, _ := new(big.Rat).SetString(rapid.SampledFrom(deltas).Draw(t, "delta"))
	r.Add(r, d)
	if integral && !r.IsInt() && rapid.IntRange(0, 3).Draw(t, "keepFraction") > 0 {
		// Ceiling: for a positive denominator, Div rounds toward -infinity.
		c := new(big.Int).Div(r.Num(), r.Denom())
		r.SetInt(c.Add(c, big.NewInt(1)))
	}
	style := rapid.IntRange(0, 4).Draw(t, "numberStyle")
	text := formatDecimal(r, style)
	if r.Sign() == 0 && rapid.Bool().Draw(t, "negativeZero") {
		text = rapid.SampledFrom([]string{"-0", "-0.0", "-0e3", "0e-5", "0.000"}).Draw(t, "zeroSpelling")
	}
	return jv{kind: 'd', text: text}
}

// formatDecimal writes r, which must have a finite decimal expansion, as a
// JSON number: 0 plain ("1250", "0.125"), 1 plain with a trailing zero
// ("1250.0"), 2 integer mantissa and exponent ("125e1"), 3 scientific
// ("1.25E+3"), 4 scientific with lower-case e and no plus sign.
func formatDecimal(r *big.Rat, style int) string {
	x := new(big.Rat).Abs(r)
	ten := big.NewRat(10, 1)
	exp := 0
	for !x.IsInt() {
		x.Mul(x, ten)
		exp--
		if exp < -2000 {
			panic("no finite decimal expansion: " + r.String())
		}
	}
	digits := x.Num().String()
	for len(digits) > 1 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	if digits == "0" {
		exp = 0
	}
	sign := ""
	if r.Sign() < 0 {
		sign = "-"
	}
	plain := func() string {
		if exp >= 0 {
			if digits == "0" {
				return "0"
			}
			return digits + strings.Repeat("0", exp)
		}
		p := len(digits) + exp
		if p > 0 {
			return digits[:p] + "." + digits[p:]
		}
		return "0." + strings.Repeat("0", -p) + digits
	}
	switch style {
	case 0:
		return sign + plain()
	case 1:
		p := plain()
		if strings.Contains(p, ".") {
			return sign + p + "0"
		}
		return sign + p + ".0"
	case 2:
		return sign + digits + "e" + strconv.Itoa(exp)
	default:
		mant := digits[:1]
		if len(digits) > 1 {
			mant += "." + digits[1:]
		}
		e := exp + len(digits) - 1
		if style == 3 {
			if e >= 0 {
				return sign + mant + "E+" + strconv.Itoa(e)
			}
			return sign + mant + "E" + strconv.Itoa(e)
		}
		return sign + mant + "e" + strconv.Itoa(e)
	}
}

const maxValueDepth = 6

// drawArbitrary draws any JSON value: the "wrong type" mutation.
func drawArbitrary(t *rapid.T, depth int) jv {
	kinds := []byte("ntfds")
	if depth < maxValueDepth {
		kinds = append(kinds, 'a', 'o')
	}
	switch k := rapid.SampledFrom(kinds).Draw(t, "arbitraryKind"); k {
	case 'd':
		return drawNumber(t, "", false)
	case 's':
		return drawString(t)
	case 'a':
		n := rapid.IntRange(0, 2).Draw(t, "arbitraryLen")
		v := jv{kind: 'a'}
		for range n {
			v.elems = append(v.elems, drawArbitrary(t, depth+1))
		}
		return v
	case 'o':
		names := rapid.SliceOfNDistinct(rapid.SampledFrom(propertyNames), 0, 2, rapid.ID[string]).Draw(t, "arbitraryNames")
		v := jv{kind: 'o'}
		for _, n := range names {
			v.members = append(v.members, jmember{name: n, val: drawArbitrary(t, depth+1)})
		}
		return v
	default:
		return jv{kind: k}
	}
}

// drawValue draws a value shaped like s, with occasional mutations: a wrong
// type or null anywhere, missing required members, extra members, numbers
// around the minimum.
func drawValue(t *rapid.T, s *genSchema, depth int) jv {
	mutate := 24
	if depth == 1 {
		mutate = 49 // a non-object root fails at once and tests nothing else
	}
	if depth >= maxValueDepth || rapid.IntRange(0, mutate).Draw(t, "mutateType") == 0 {
		return drawArbitrary(t, depth)
	}
	switch s.typ {
	case "":
		br := s.oneOf[rapid.IntRange(0, len(s.oneOf)-1).Draw(t, "branch")]
		return drawValue(t, br, depth)
	case "string":
		return drawString(t)
	case "boolean":
		if rapid.Bool().Draw(t, "bool") {
			return jv{kind: 't'}
		}
		return jv{kind: 'f'}
	case "integer", "number":
		return drawNumber(t, s.minimum, s.typ == "integer")
	case "array":
		n := rapid.IntRange(0, 3).Draw(t, "arrayLen")
		v := jv{kind: 'a'}
		for range n {
			if s.items != nil {
				v.elems = append(v.elems, drawValue(t, s.items, depth+1))
			} else {
				v.elems = append(v.elems, drawArbitrary(t, depth+1))
			}
		}
		return v
	case "object":
		return drawObject(t, s, depth)
	}
	panic("bad schema type " + s.typ)
}

func drawObject(t *rapid.T, s *genSchema, depth int) jv {
	v := jv{kind: 'o'}
	used := map[string]bool{}
	add := func(name string, val jv) {
		used[name] = true
		esc := rapid.IntRange(0, 4).Draw(t, "escapeName") == 0
		v.members = append(v.members, jmember{name: name, escape: esc, val: val})
	}
	required := map[string]bool{}
	for _, r := range s.required {
		required[r] = true
	}
	described := map[string]bool{}
	for _, p := range s.props {
		described[p.name] = true
		// Optional properties are often left out, as in real calls; a
		// required one only by mutation.
		present := rapid.IntRange(0, 11).Draw(t, "dropRequiredProperty") > 0
		if !required[p.name] {
			present = rapid.Bool().Draw(t, "includeOptional")
		}
		if present {
			add(p.name, drawValue(t, p.schema, depth+1))
		}
	}
	for _, r := range s.required {
		if !used[r] && !described[r] && rapid.IntRange(0, 7).Draw(t, "dropRequired") > 0 {
			add(r, drawArbitrary(t, depth+1))
		}
	}
	if rapid.IntRange(0, 7).Draw(t, "addExtra") == 0 {
		var pool []string
		for _, n := range append(append([]string{}, absentNames...), propertyNames...) {
			if !described[n] {
				pool = append(pool, n)
			}
		}
		for range rapid.IntRange(1, 2).Draw(t, "extraCount") {
			name := rapid.SampledFrom(pool).Draw(t, "extraName")
			if !used[name] { // never a duplicate member name
				add(name, drawArbitrary(t, depth+1))
			}
		}
	}
	// Member order in the text must not matter (D11 orders by name).
	v.members = rapid.Permutation(v.members).Draw(t, "memberOrder")
	return v
}

// ---------------------------------------------------------------------------
// The property

// diffCase is one generated schema and value with everything needed to
// explain a disagreement.
type diffCase struct {
	schemaText, peerSchemaText, valueText string
}

func (c *diffCase) explain(format string, args ...any) string {
	return fmt.Sprintf(format, args...) +
		"\nschema:      " + c.schemaText +
		"\npeer schema: " + c.peerSchemaText +
		"\nvalue:       " + c.valueText
}

func verdict(err error) string {
	if err == nil {
		return "valid"
	}
	return "invalid: " + err.Error()
}

// firstError returns the *inputschema.Error an error is or begins with.
func firstError(err error) *inputschema.Error {
	var e *inputschema.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// sameFirstError reports whether two single-error results agree on what the
// contract pins: class, stage, instance location, schema location, keyword.
func sameFirstError(a, b *inputschema.Error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Class == b.Class && a.Stage == b.Stage && a.Pointer == b.Pointer && a.Path == b.Path &&
		a.SchemaPointer == b.SchemaPointer && a.Keyword == b.Keyword
}

func describe(e *inputschema.Error) string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("class=%s stage=%s path=%s pointer=%q schema_pointer=%q keyword=%q message=%q",
		e.Class, e.Stage, e.Path, e.Pointer, e.SchemaPointer, e.Keyword, e.Message)
}

// checkAllAgrees checks an all-errors result against the single-error result
// of the same input: both nil, or a list whose first entry is that error.
func checkAllAgrees(t *rapid.T, c *diffCase, what string, single, all error) {
	if single == nil || all == nil {
		if single != all {
			t.Fatalf("%s", c.explain("%s: single-error verdict %s, all-errors verdict %s", what, verdict(single), verdict(all)))
		}
		return
	}
	var list *inputschema.ErrorList
	if !errors.As(all, &list) || len(list.Errors) == 0 {
		t.Fatalf("%s", c.explain("%s: all-errors method returned %T (%v), want a non-empty *inputschema.ErrorList", what, all, all))
	}
	if s := firstError(single); !sameFirstError(s, list.Errors[0]) {
		t.Fatalf("%s", c.explain("%s: first listed error differs from the single error\nsingle: %s\nfirst:  %s",
			what, describe(s), describe(list.Errors[0])))
	}
}

// guard runs one call of the code under test and turns a panic into a
// failure that shows the generated case, which rapid's traceback alone does
// not.
func guard(t *rapid.T, c *diffCase, what string, call func() error) error {
	_, err := guard2(t, c, what, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

func guard2[R any](t *rapid.T, c *diffCase, what string, call func() (R, error)) (r R, err error) {
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("%s", c.explain("%s panicked: %v", what, p))
		}
	}()
	return call()
}

// emptyPools drops what sync.Pools hold (a pool is emptied over two
// collections), so that the next validation starts from fresh state. Each
// generated case then behaves the same however many cases ran before it, so
// rapid can reproduce and shrink a failure that depends on validator state.
func emptyPools() {
	runtime.GC()
	runtime.GC()
}

func TestDifferential(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gs := drawRootSchema(t)
		var sb, pb, vb strings.Builder
		writeSchema(&sb, gs, false)
		writeSchema(&pb, gs, true)
		value := drawValue(t, gs, 1)
		writeValue(&vb, value)
		jsonFirst := rapid.Bool().Draw(t, "validateJSONFirst")
		c := &diffCase{schemaText: sb.String(), peerSchemaText: pb.String(), valueText: vb.String()}
		schemaBytes := []byte(c.schemaText)
		valueBytes := []byte(c.valueText)
		if !utf8.Valid(valueBytes) {
			t.Fatalf("%s", c.explain("generator produced invalid UTF-8"))
		}

		bp, err := guard2(t, c, "Compile", func() (*inputschema.Schema, error) { return inputschema.Compile(schemaBytes, nil) })
		if err != nil {
			t.Fatalf("%s", c.explain("backplane refused a schema inside the subset: %v", err))
		}
		if string(schemaBytes) != c.schemaText {
			t.Fatalf("%s", c.explain("Compile modified the schema bytes"))
		}
		peer, err := compileSanthosh([]byte(c.peerSchemaText))
		if err != nil {
			t.Fatalf("%s", c.explain("santhosh refused the schema: %v", err))
		}
		decoded, err := decodeUseNumber(valueBytes)
		if err != nil {
			t.Fatalf("%s", c.explain("encoding/json could not decode the value: %v", err))
		}
		pristine, _ := decodeUseNumber(valueBytes)

		// The first call of a case runs on fresh validator state (which of
		// the two forms goes first is drawn); the other runs on state the
		// first one left behind.
		emptyPools()
		var bpErr, decErr error
		validateJSON := func() error {
			return guard(t, c, "ValidateJSON", func() error { return bp.ValidateJSON(valueBytes) })
		}
		validate := func() error {
			return guard(t, c, "Validate", func() error { return bp.Validate(decoded) })
		}
		if jsonFirst {
			bpErr, decErr = validateJSON(), validate()
		} else {
			decErr, bpErr = validate(), validateJSON()
		}
		if string(valueBytes) != c.valueText {
			t.Fatalf("%s", c.explain("ValidateJSON modified the argument bytes"))
		}
		if bpErr != nil && firstError(bpErr) == nil {
			t.Fatalf("%s", c.explain("ValidateJSON returned %T, want *inputschema.Error: %v", bpErr, bpErr))
		}
		if decErr != nil && firstError(decErr) == nil {
			t.Fatalf("%s", c.explain("Validate returned %T, want *inputschema.Error: %v", decErr, decErr))
		}

		// Verdict on bytes, against the peer's verdict on the same text.
		peerValue, err := santhosh.UnmarshalJSON(strings.NewReader(c.valueText))
		if err != nil {
			t.Fatalf("%s", c.explain("santhosh could not decode the value: %v", err))
		}
		peerErr := peer.Validate(peerValue)
		if gs.omitType && value.kind != 'o' {
			// Spec-mandated difference (D2): arguments must be an object even
			// when the root schema leaves out "type", while JSON Schema lets a
			// schema without "type" accept any value. Only backplane's verdict
			// is checked here.
			e := firstError(bpErr)
			if e == nil || e.Class != inputschema.ClassValidation || e.Pointer != "" {
				t.Fatalf("%s", c.explain("non-object arguments: backplane %s, want a validation error at the root (D2)", verdict(bpErr)))
			}
		} else if (bpErr == nil) != (peerErr == nil) {
			t.Fatalf("%s", c.explain("verdicts differ\nbackplane: %s\nsanthosh:  %s", verdict(bpErr), verdict(peerErr)))
		}

		// Decoded arguments (encoding/json, exact numbers) give the same
		// first error as bytes, and validating them changes nothing.
		if !sameFirstError(firstError(decErr), firstError(bpErr)) {
			t.Fatalf("%s", c.explain("Validate(decoded) and ValidateJSON(bytes) differ (ValidateJSON ran first: %v)\nValidate:     %s\nValidateJSON: %s",
				jsonFirst, describe(firstError(decErr)), describe(firstError(bpErr))))
		}

		// The all-errors forms start with the single error.
		checkAllAgrees(t, c, "ValidateJSONAll", bpErr, guard(t, c, "ValidateJSONAll", func() error { return bp.ValidateJSONAll(valueBytes) }))
		checkAllAgrees(t, c, "ValidateAll", decErr, guard(t, c, "ValidateAll", func() error { return bp.ValidateAll(decoded) }))
		if !reflect.DeepEqual(decoded, pristine) {
			t.Fatalf("%s", c.explain("validation modified the decoded arguments\nbefore: %#v\nafter:  %#v", pristine, decoded))
		}

		// A host-authored schema (CompileValue) behaves like its JSON text.
		schemaValue, err := decodeUseNumber(schemaBytes)
		if err != nil {
			t.Fatalf("%s", c.explain("encoding/json could not decode the schema: %v", err))
		}
		bpv, err := guard2(t, c, "CompileValue", func() (*inputschema.Schema, error) { return inputschema.CompileValue(schemaValue, nil) })
		if err != nil {
			t.Fatalf("%s", c.explain("CompileValue refused a schema that Compile accepted: %v", err))
		}
		if vErr := guard(t, c, "Validate (CompileValue schema)", func() error { return bpv.Validate(decoded) }); !sameFirstError(firstError(vErr), firstError(decErr)) {
			t.Fatalf("%s", c.explain("CompileValue schema and Compile schema differ\nCompileValue: %s\nCompile:      %s",
				describe(firstError(vErr)), describe(firstError(decErr))))
		}

		// Pooled validator state is reused: calls on the state left by all
		// the calls above repeat the first results.
		if again := validateJSON(); !sameFirstError(firstError(again), firstError(bpErr)) {
			t.Fatalf("%s", c.explain("ValidateJSON differs on reused state\nfirst:  %s\nreused: %s",
				describe(firstError(bpErr)), describe(firstError(again))))
		}
		if again := validate(); !sameFirstError(firstError(again), firstError(decErr)) {
			t.Fatalf("%s", c.explain("Validate differs on reused state\nfirst:  %s\nreused: %s",
				describe(firstError(decErr)), describe(firstError(again))))
		}
	})
}

// TestFormatDecimal pins the literal writer the generator depends on: every
// spelling must be valid JSON and denote exactly the same number.
func TestFormatDecimal(t *testing.T) {
	for _, lit := range []string{"0", "1", "-1", "2.5", "-0.25", "100", "1e2", "12345678901234567890", "0.000125", "1e-30", "1e40"} {
		want, _ := new(big.Rat).SetString(lit)
		for style := range 5 {
			got := formatDecimal(want, style)
			r, ok := new(big.Rat).SetString(got)
			if !ok || r.Cmp(want) != 0 {
				t.Errorf("formatDecimal(%s, %d) = %q, which is not the same number", lit, style, got)
			}
			if !jsonNumber(got) {
				t.Errorf("formatDecimal(%s, %d) = %q is not a JSON number", lit, style, got)
			}
		}
	}
}

// jsonNumber reports whether s is exactly one RFC 8259 number.
func jsonNumber(s string) bool {
	v, err := decodeUseNumber([]byte(s))
	n, ok := v.(json.Number)
	return err == nil && ok && string(n) == s
}
