// Package draft2020 is the explicit second validator boundary of the tool
// input schema contract (D21 in docs/inputschema-spec.md): where a host
// chooses it for a tool source, a tool's input schema is the complete JSON
// Schema (draft 2020-12, or an older draft the schema declares), not the
// subset of package inputschema. It validates with
// github.com/santhosh-tekuri/jsonschema/v6 and implements tool.Validator.
//
// What it promises:
//
//   - Strict JSON. Schema bytes and argument bytes are decoded with
//     internal/jsonstrict (D3): duplicate member names, invalid UTF-8, lone
//     surrogates, trailing data, nesting deeper than [Options.MaxDepth] and
//     documents larger than [Options.MaxSchemaBytes] or
//     [Options.MaxArgumentBytes] are refused with class validation (stage
//     schema, or stage arguments at path $arguments with details offset and
//     reason). Numbers keep their literal text (json.Number): nothing is
//     rounded through float64.
//   - Dialect. The root's $schema is honoured when it names a draft the
//     library implements: 2020-12, 2019-09, draft-07, draft-06 or draft-04
//     (http or https, with or without an empty fragment; MCP servers often
//     declare http://json-schema.org/draft-07/schema#). Without $schema the
//     schema is draft 2020-12, set explicitly rather than left to the
//     library's "latest". Any other $schema, including the undated
//     https://json-schema.org/schema whose meaning moves over time, is
//     unsupported_capability with keyword $schema.
//   - No external references. The compiler's loader refuses every URL: no
//     file is opened and no network is used. References within the schema
//     document work (#/$defs/x, #/definitions/x, anchors, and $id-identified
//     resources embedded in the document), as do the drafts' own metaschemas,
//     which are embedded in the library and never fetched. A schema that needs
//     anything else fails closed at compile time: unsupported_capability,
//     stage schema, keyword $ref (or $schema for a custom metaschema), with
//     the reference in the message and details. So does a relative reference
//     (or $id) under an opaque base URI such as a urn: $id, which the library
//     would otherwise resolve to the base document itself.
//   - format is an annotation, never asserted, whatever the draft. (The
//     library asserts format by default for draft-07 and older; this package
//     removes those assertions after compiling.) Content keywords
//     (contentEncoding, contentMediaType, contentSchema) are annotations too,
//     which is the library's default, kept.
//   - Fail closed. Any other schema the library cannot compile (not valid
//     against its metaschema, a pattern Go's regexp cannot compile, a $ref to
//     a missing pointer, ...) is unsupported_capability at stage schema: a
//     schema is never silently weakened. A missing schema (empty or JSON
//     null) is unsupported_capability ("tool schema is required"); a root
//     that is neither an object nor a boolean is validation (both as D4).
//     A reference loop, which the library finds only when a value reaches
//     it, is unsupported_capability at stage arguments, alone in the list.
//     Keywords no draft defines are ignored, as JSON Schema requires (the
//     subset refuses them; this boundary covers the standard, not typos).
//   - Bounded numbers. The library compares numbers as big.Rat, whose cost
//     grows with the digits and the exponent of the literal; a number with
//     more than 1000 digits before its exponent or an exponent beyond ±1000 (in the
//     schema or in the arguments) is refused as unsupported_capability rather
//     than evaluated at unbounded cost. 1e400 is fine; 1e999999 is not.
//   - Arguments must be a JSON object (D2): anything else is validation at
//     $arguments with details type object, before the schema is consulted.
//   - Errors. A failed validation is an *inputschema.ErrorList of
//     *inputschema.Error, class validation, stage arguments, each with
//     message, path (display form, $arguments.a[0]["b.c"]), pointer (RFC 6901
//     into the arguments), schema_pointer (RFC 6901 into the schema document,
//     resolvable there; when the failure was reached through a $ref, details
//     keyword_location holds the evaluation path), keyword and details. The
//     library's error tree is flattened: conjunctive nodes (the root, allOf,
//     $ref, groups) dissolve into their causes; a required or
//     additionalProperties failure is split into one error per property, as
//     inputschema reports them; disjunctive or negative keywords (anyOf,
//     oneOf, not, contains, propertyNames) are one error each, at the value
//     they judged, explained by details (for anyOf and oneOf, each branch's
//     first error under "branches"). Errors are sorted by pointer then schema
//     pointer (array indexes numerically), exact repeats removed, and capped
//     at [Options.MaxErrors] with Truncated set. One difference with
//     inputschema's lists: once a value fails "type", the library checks no
//     other keyword of that schema object (0.5 against {"type":"integer",
//     "minimum":1} is one violation here, two there); the verdict is the same.
//
// A [Validator] is immutable and safe for concurrent use; compile once when
// the tool is registered.
package draft2020

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Default limits, the same as package inputschema's.
const (
	DefaultMaxSchemaBytes   = 1 << 20
	DefaultMaxDepth         = 128
	DefaultMaxArgumentBytes = 4 << 20
	DefaultMaxErrors        = 1000
)

// Bounds on number literals, so that the library's exact (big.Rat)
// arithmetic stays cheap: measured at about 10µs per number at these bounds,
// against 26ms for 1e999999 and a panic in the library beyond 1e1000000.
const (
	maxNumberDigits   = 1000
	maxNumberExponent = 1000
)

// Options bound a [Compile] and the validations of its [Validator]. A nil
// *Options, or a zero field, means the default.
type Options struct {
	// MaxSchemaBytes caps the size of the schema document. Default 1 MiB.
	MaxSchemaBytes int
	// MaxDepth is the deepest nesting of arrays and objects accepted in the
	// schema and in arguments (a top-level object is depth 1). Default 128.
	MaxDepth int
	// MaxArgumentBytes caps the size of the arguments of one call.
	// Default 4 MiB.
	MaxArgumentBytes int
	// MaxErrors caps how many errors one validation lists; past it the list
	// is marked Truncated. Default 1000.
	MaxErrors int
}

func (o *Options) withDefaults() Options {
	var l Options
	if o != nil {
		l = *o
	}
	if l.MaxSchemaBytes <= 0 {
		l.MaxSchemaBytes = DefaultMaxSchemaBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxArgumentBytes <= 0 {
		l.MaxArgumentBytes = DefaultMaxArgumentBytes
	}
	if l.MaxErrors <= 0 {
		l.MaxErrors = DefaultMaxErrors
	}
	return l
}

// baseURL names the schema document inside the compiler. It is hierarchical
// so that a relative reference such as "other.json" resolves to a URL (and
// is then refused by the loader): with an opaque base (a urn:) the library
// was seen to accept such a reference without ever loading it. The scheme is
// not one anything could fetch.
const baseURL = "inline:///schema.json"

// Validator validates tool arguments against one compiled schema.
type Validator struct {
	schema      *jsonschema.Schema
	doc         any  // the decoded schema (json.Number numbers), read-only: keyword values for details
	rootHasType bool // where a non-object root points: /type, or the root
	argOpts     jsonstrict.Options
	maxErrors   int
}

// Compile strictly decodes a tool input schema and compiles it. The error,
// if any, is an *inputschema.Error at stage schema, of class validation
// (malformed JSON, a root that is no schema) or unsupported_capability
// (everything this boundary declines, see the package documentation).
func Compile(schema []byte, opts *Options) (*Validator, error) {
	return compile(schema, opts, nil)
}

// errExternal is what the loader answers to every URL.
var errExternal = errors.New("external references are refused by this validator")

// refusingLoader is the compiler's only URLLoader. It never reads a file or
// opens a connection; seen, when set (by tests), records each URL asked for.
type refusingLoader struct{ seen func(url string) }

func (l refusingLoader) Load(url string) (any, error) {
	if l.seen != nil {
		l.seen(url)
	}
	return nil, errExternal
}

// compile is Compile with a hook to observe the loader.
func compile(schema []byte, opts *Options, seen func(string)) (v *Validator, err error) {
	l := opts.withDefaults()
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil, schemaErr(inputschema.ClassUnsupported, "", "", "tool schema is required", nil)
	}
	doc, err := jsonstrict.Decode(schema, &jsonstrict.Options{MaxDepth: l.MaxDepth, MaxBytes: l.MaxSchemaBytes})
	if err != nil {
		return nil, decodeError(inputschema.StageSchema, "the schema is", err)
	}
	switch doc.(type) {
	case nil:
		return nil, schemaErr(inputschema.ClassUnsupported, "", "", "tool schema is required", nil)
	case map[string]any, bool:
	default:
		return nil, schemaErr(inputschema.ClassValidation, "", "",
			"the schema must be a JSON object or a boolean, not "+jsonType(doc), map[string]any{"actual": jsonType(doc)})
	}
	var nc numberCheck
	doc = nc.convert(doc)
	if nc.bad != "" {
		return nil, schemaErr(inputschema.ClassUnsupported, nc.pointer(), "", numberMessage(nc.bad), numberDetails())
	}
	root, _ := doc.(map[string]any)
	if e := checkDialect(root); e != nil {
		return nil, e
	}
	if e := checkOpaqueBases(doc, isDraft4(root)); e != nil {
		return nil, e
	}

	// The library may panic on inputs its authors did not foresee; that is
	// a schema this boundary cannot vouch for, so it fails closed.
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, schemaErr(inputschema.ClassUnsupported, "", "",
				fmt.Sprintf("the draft 2020-12 validator cannot compile this schema: %v", r), nil)
		}
	}()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{seen: seen})
	// Deliberately not called: AssertFormat, AssertContent, AssertVocabs.
	if err := c.AddResource(baseURL, doc); err != nil {
		return nil, compileError(doc, err)
	}
	sch, err := c.Compile(baseURL)
	if err != nil {
		return nil, compileError(doc, err)
	}
	dropFormats(sch, map[*jsonschema.Schema]bool{})
	_, hasType := root["type"]
	return &Validator{
		schema:      sch,
		doc:         doc,
		rootHasType: hasType,
		argOpts:     jsonstrict.Options{MaxDepth: l.MaxDepth, MaxBytes: l.MaxArgumentBytes},
		maxErrors:   l.MaxErrors,
	}, nil
}

// ValidateJSONAll strictly decodes args and validates them, reporting every
// violation: nil or an *inputschema.ErrorList (see the package
// documentation for its content and order). It never modifies args.
func (v *Validator) ValidateJSONAll(args []byte) error {
	return v.validateJSON(args, true)
}

// validateJSON is ValidateJSONAll; requireObject=false lifts D2, for the
// conformance tests whose instances are not objects.
func (v *Validator) validateJSON(args []byte, requireObject bool) error {
	x, err := jsonstrict.Decode(args, &v.argOpts)
	if err != nil {
		return list(decodeError(inputschema.StageArguments, "the arguments are", err))
	}
	if _, ok := x.(map[string]any); !ok && requireObject {
		ptr := ""
		if v.rootHasType {
			ptr = "/type"
		}
		got := jsonType(x)
		return list(&inputschema.Error{
			Class: inputschema.ClassValidation, Stage: inputschema.StageArguments,
			Message: "must be an object, not " + got, Path: "$arguments", Pointer: "",
			SchemaPointer: ptr, Keyword: "type",
			Details: map[string]any{"type": "object", "actual": got},
		})
	}
	var nc numberCheck
	x = nc.convert(x)
	if nc.bad != "" {
		ptr := nc.pointer()
		return list(&inputschema.Error{
			Class: inputschema.ClassUnsupported, Stage: inputschema.StageArguments,
			Message: numberMessage(nc.bad), Path: displayPath(x, ptr), Pointer: ptr,
			Details: numberDetails(),
		})
	}
	return v.validate(x)
}

// validate runs the library on converted values and converts its verdict.
func (v *Validator) validate(x any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			// Fail closed: a library failure refuses the call.
			err = list(&inputschema.Error{
				Class: inputschema.ClassUnsupported, Stage: inputschema.StageArguments,
				Message: fmt.Sprintf("the draft 2020-12 validator failed on these arguments: %v", r),
				Path:    "$arguments", Details: map[string]any{},
			})
		}
	}()
	verr := v.schema.Validate(x)
	if verr == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return list(&inputschema.Error{
			Class: inputschema.ClassValidation, Stage: inputschema.StageArguments,
			Message: verr.Error(), Path: "$arguments", Details: map[string]any{},
		})
	}
	return v.convertErrors(ve, x)
}

func list(e *inputschema.Error) *inputschema.ErrorList {
	return &inputschema.ErrorList{Errors: []*inputschema.Error{e}}
}

func schemaErr(class inputschema.Class, ptr, keyword, msg string, details map[string]any) *inputschema.Error {
	if details == nil {
		details = map[string]any{}
	}
	return &inputschema.Error{Class: class, Stage: inputschema.StageSchema, Message: msg,
		SchemaPointer: ptr, Keyword: keyword, Details: details}
}

// decodeError turns a strict-decoding failure into the contract's error, as
// inputschema does (same message, details offset and reason).
func decodeError(stage inputschema.Stage, what string, err error) *inputschema.Error {
	e := &inputschema.Error{Class: inputschema.ClassValidation, Stage: stage,
		Message: what + " not valid JSON: " + err.Error(), Details: map[string]any{}}
	var je *jsonstrict.Error
	if errors.As(err, &je) {
		e.Details["offset"] = je.Offset
		e.Details["reason"] = decodeReason(je.Err)
	}
	if stage == inputschema.StageArguments {
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

// jsonType names the JSON type of a decoded value.
func jsonType(x any) string {
	switch x.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "number"
}

// dropFormats removes the format assertions the library compiles in for
// draft-07 and older (and for any dialect whose vocabulary asks for them):
// in this boundary format is an annotation. Every schema reachable from the
// root through an applicator or a reference is visited; schemas reachable
// only through $dynamicRef exist in 2020-12 only, where the library compiles
// no format assertion in the first place.
func dropFormats(s *jsonschema.Schema, seen map[*jsonschema.Schema]bool) {
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	s.Format = nil
	one := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else,
		s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020,
		s.UnevaluatedItems, s.ContentSchema}
	if s.DynamicRef != nil {
		one = append(one, s.DynamicRef.Ref)
	}
	for _, x := range one {
		dropFormats(x, seen)
	}
	for _, group := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf, s.PrefixItems} {
		for _, x := range group {
			dropFormats(x, seen)
		}
	}
	for _, x := range s.Properties {
		dropFormats(x, seen)
	}
	for _, x := range s.PatternProperties {
		dropFormats(x, seen)
	}
	for _, x := range s.DependentSchemas {
		dropFormats(x, seen)
	}
	for _, x := range s.Dependencies {
		if x, ok := x.(*jsonschema.Schema); ok {
			dropFormats(x, seen)
		}
	}
	for _, x := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch x := x.(type) {
		case *jsonschema.Schema:
			dropFormats(x, seen)
		case []*jsonschema.Schema:
			for _, y := range x {
				dropFormats(y, seen)
			}
		}
	}
}
