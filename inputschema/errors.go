package inputschema

import (
	"encoding/json"
	"strings"
)

// Class is the error class of the contract: a stable string callers match on.
type Class string

const (
	// ClassValidation: a malformed schema for a supported keyword, malformed
	// JSON, or arguments that do not satisfy the schema.
	ClassValidation Class = "validation"
	// ClassUnsupported: a schema that is valid JSON Schema 2020-12 but uses
	// something outside the supported subset (and a missing schema, D4).
	ClassUnsupported Class = "unsupported_capability"
)

// Stage says where an error arose.
type Stage string

const (
	// StageSchema: the preflight check of the schema, at compile time.
	StageSchema Stage = "schema"
	// StageArguments: decoding or validating the arguments of one call.
	StageArguments Stage = "arguments"
)

// Error is every error this package returns, alone or inside an [*ErrorList].
// Match it with errors.As. The JSON form (struct tags) is the wire form the
// gateway and the command line hand back to callers.
type Error struct {
	Class   Class  `json:"class"`
	Stage   Stage  `json:"stage"`
	Message string `json:"message"`
	// Path is the display form of the instance location: "$arguments",
	// "$arguments.options[1].label", `$arguments["a.b"]`. Empty at the schema stage.
	Path string `json:"path"`
	// Pointer is the RFC 6901 pointer of the instance location ("" is the root).
	Pointer string `json:"pointer"`
	// SchemaPointer is the RFC 6901 pointer into the schema of the offending
	// keyword or schema object.
	SchemaPointer string `json:"schema_pointer"`
	// Keyword is the schema keyword at fault, when one is.
	Keyword string `json:"keyword"`
	// Details holds machine-readable facts such as "property", "type",
	// "minimum", "keywords", "matches" or "offset". Never nil.
	Details map[string]any `json:"details"`
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Class))
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	} else if e.Stage == StageSchema && e.SchemaPointer != "" {
		b.WriteString("schema ")
		b.WriteString(quotePointer(e.SchemaPointer))
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

func quotePointer(p string) string {
	q, _ := json.Marshal(p)
	return string(q)
}

// ErrorList is what the all-errors methods return: every violation, in the
// order of D11 (the first one is the error the single-error methods return).
// errors.As(err, &e) with e of type *Error finds the first.
type ErrorList struct {
	Errors []*Error `json:"errors"`
	// Truncated reports that more violations existed than
	// [Limits.MaxErrors] allowed to be listed.
	Truncated bool `json:"truncated,omitempty"`
}

func (l *ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	if l.Truncated {
		b.WriteString("; (more errors not listed)")
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As access to each listed error.
func (l *ErrorList) Unwrap() []error {
	out := make([]error, len(l.Errors))
	for i, e := range l.Errors {
		out[i] = e
	}
	return out
}
