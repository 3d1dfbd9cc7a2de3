// Package inputschema validates tool-call arguments against a strict,
// fail-closed subset of JSON Schema, as an execution gateway must.
//
// The contract is the seed's, pinned decision by decision in
// docs/inputschema-spec.md (D1-D18) at the root of this repository. In short:
//
//   - Supported keywords: type (object, array, string, integer, number,
//     boolean), properties, required, additionalProperties (boolean; the alias
//     additional_properties is accepted), description, minimum (inclusive),
//     items (one schema), oneOf (may hold only oneOf and description).
//   - Anything else is refused, never ignored: a schema that is valid JSON
//     Schema but outside the subset fails with class unsupported_capability; a
//     malformed schema, malformed JSON and arguments that break a constraint
//     fail with class validation.
//   - The whole schema is checked once, by [Compile] or [CompileValue]; the
//     resulting [*Schema] is immutable, safe for concurrent use, and meant to be
//     reused for every call.
//   - Arguments are validated as JSON bytes ([Schema.ValidateJSON], strict
//     decoding: no duplicate names, valid UTF-8, no lone surrogates, no
//     trailing data, bounded depth and size, exact numbers) or as an already
//     decoded Go value ([Schema.Validate]). Validation never changes them.
//   - Errors are [*Error] values (or an [*ErrorList] from the all-errors
//     methods) carrying class, stage, message, path, pointer, schema pointer,
//     keyword and details; which error comes first is deterministic (D11).
//
// The package uses the standard library only.
package inputschema

// Default limits; see [Limits].
const (
	DefaultMaxDepth         = 128
	DefaultMaxSchemaBytes   = 1 << 20 // 1 MiB
	DefaultMaxArgumentBytes = 4 << 20 // 4 MiB
	DefaultMaxErrors        = 1000
)

// Limits bound the work one schema or one call can cause. A zero field takes
// its default.
type Limits struct {
	// MaxDepth is the deepest nesting of arrays and objects accepted in a
	// schema document and in arguments (the root object is depth 1).
	// Default 128.
	MaxDepth int
	// MaxSchemaBytes caps the size of a schema given as JSON. Default 1 MiB.
	MaxSchemaBytes int
	// MaxArgumentBytes caps the size of arguments given as JSON. Default 4 MiB.
	MaxArgumentBytes int
	// MaxErrors caps how many errors the all-errors methods list; past it the
	// list is marked Truncated. Default 1000.
	MaxErrors int
}

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxSchemaBytes <= 0 {
		l.MaxSchemaBytes = DefaultMaxSchemaBytes
	}
	if l.MaxArgumentBytes <= 0 {
		l.MaxArgumentBytes = DefaultMaxArgumentBytes
	}
	if l.MaxErrors <= 0 {
		l.MaxErrors = DefaultMaxErrors
	}
	return l
}

// CompileOptions configure [Compile] and [CompileValue]. A nil *CompileOptions
// means the defaults.
type CompileOptions struct {
	Limits Limits
}

func (o *CompileOptions) limits() Limits {
	if o == nil {
		return Limits{}.withDefaults()
	}
	return o.Limits.withDefaults()
}
