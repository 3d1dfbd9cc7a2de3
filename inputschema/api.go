package inputschema

import "github.com/agentbackplane/backplane/internal/jsonstrict"

// Schema is a compiled, checked tool input schema. It is immutable and safe
// for concurrent use; compile once when the tool is registered, validate every
// call with it.
type Schema struct {
	root    *node
	limits  Limits
	argOpts jsonstrict.Options // decoding limits for arguments, kept to avoid a per-call allocation
}

// Compile checks a schema given as JSON text (strictly decoded, D3) and
// compiles it. The error, if any, is an [*Error] at stage "schema".
func Compile(data []byte, opts *CompileOptions) (*Schema, error) {
	return compileBytes(data, opts.limits())
}

// CompileAll is Compile reporting every error of the schema, for tooling
// that shows a schema's author all there is to fix (lint): nil with the
// schema, or an [*ErrorList] at stage "schema" whose first error is the one
// Compile returns. Listed are every unsupported keyword of every schema
// object, and in each schema object the first other error found there (a
// later check of the same object depends on the earlier ones); nested
// schemas are checked whatever their siblings hold. A document that cannot
// be decoded is a list of one. At most Limits.MaxErrors are listed.
func CompileAll(data []byte, opts *CompileOptions) (*Schema, error) {
	s, err := compileBytesAll(data, opts.limits())
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CompileValue checks and compiles a host-authored schema given as Go values
// (D1): map[string]any, []any, []string, string, bool, nil, Go numbers,
// json.Number. The value is not retained.
func CompileValue(schema any, opts *CompileOptions) (*Schema, error) {
	return compileValue(schema, opts.limits())
}

// Validate checks decoded arguments (D2): map[string]any at the root, with
// values of the types encoding/json produces (float64 or json.Number for
// numbers), Go integer types also accepted. It returns nil or the first
// violation (D11) as an [*Error]. It never modifies args.
func (s *Schema) Validate(args any) error {
	return s.validateValue(args, false)
}

// ValidateAll is Validate reporting every violation: nil or an [*ErrorList].
func (s *Schema) ValidateAll(args any) error {
	return s.validateValue(args, true)
}

// ValidateJSON strictly decodes args (D3) and validates them. It returns nil
// or the first violation as an [*Error]; a decoding error comes before any
// schema violation. It allocates nothing for valid arguments once warm.
func (s *Schema) ValidateJSON(args []byte) error {
	return s.validateJSON(args, false)
}

// ValidateJSONAll is ValidateJSON reporting every violation: nil or an
// [*ErrorList].
func (s *Schema) ValidateJSONAll(args []byte) error {
	return s.validateJSON(args, true)
}

// ArgumentLimits are the limits [Schema.ValidateJSON] and
// [Schema.ValidateJSONAll] parse arguments under (the schema's Limits,
// defaults filled in).
func (s *Schema) ArgumentLimits() jsonstrict.Options { return s.argOpts }

// ValidateDocAll is ValidateJSONAll for arguments already parsed strictly
// under [Schema.ArgumentLimits] (the gateway parses once, for validation
// and for the digest): the same errors, in the same order, as
// ValidateJSONAll gives for the bytes doc was parsed from. It allocates
// nothing for valid arguments once warm.
func (s *Schema) ValidateDocAll(doc *jsonstrict.Doc) error {
	v := s.getValidator(true)
	defer s.putValidator(v)
	v.doc = doc
	v.tape(s.root, 0)
	return v.result()
}
