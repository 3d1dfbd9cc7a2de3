package gateway

import (
	"errors"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/tool"
)

// Sentinels, one per class: errors.Is(err, gateway.ErrForbidden).
// ErrNotFound and ErrMalformedResult are the store's and the backends'
// own sentinels, not copies: an unknown tool, approval request, intent or
// pin matches ErrNotFound alike, and a backend's unreadable answer matches
// ErrMalformedResult before and after the gateway classifies it.
var (
	ErrValidation       = errors.New(string(tool.ClassValidation))
	ErrUnsupported      = errors.New(string(tool.ClassUnsupported))
	ErrNotFound         = store.ErrNotFound
	ErrForbidden        = errors.New(string(tool.ClassForbidden))
	ErrApprovalRequired = errors.New(string(tool.ClassApprovalRequired))
	ErrBudgetExceeded   = errors.New(string(tool.ClassBudgetExceeded))
	ErrResourceConflict = errors.New(string(tool.ClassResourceConflict))
	ErrTimeout          = errors.New(string(tool.ClassTimeout))
	ErrCancelled        = errors.New(string(tool.ClassCancelled))
	ErrExecutionFailure = errors.New(string(tool.ClassExecutionFailure))
	ErrUnknownOutcome   = errors.New(string(tool.ClassUnknownOutcome))
	ErrMalformedResult  = tool.ErrMalformedResult
	ErrInvalidResult    = errors.New(string(tool.ClassInvalidResult))
	ErrInputRequired    = errors.New(string(tool.ClassInputRequired))
)

var sentinels = map[tool.Class]error{
	tool.ClassValidation: ErrValidation, tool.ClassUnsupported: ErrUnsupported, tool.ClassNotFound: ErrNotFound,
	tool.ClassForbidden: ErrForbidden, tool.ClassApprovalRequired: ErrApprovalRequired, tool.ClassBudgetExceeded: ErrBudgetExceeded,
	tool.ClassResourceConflict: ErrResourceConflict, tool.ClassTimeout: ErrTimeout, tool.ClassCancelled: ErrCancelled,
	tool.ClassExecutionFailure: ErrExecutionFailure, tool.ClassUnknownOutcome: ErrUnknownOutcome, tool.ClassMalformedResult: ErrMalformedResult,
	tool.ClassInvalidResult: ErrInvalidResult, tool.ClassInputRequired: ErrInputRequired,
}

// Error is what a refused or failed call returns. Its JSON form is the wire
// form handed back to callers.
type Error struct {
	Class   tool.Class `json:"class"`
	Message string     `json:"message"`
	CallID  string     `json:"call_id,omitempty"` // set once an intent exists
	Tool    string     `json:"tool,omitempty"`
	// Step is the pipeline step that refused or failed the call: lookup,
	// validate, authorize, approve, reserve, commit, invoke.
	Step    string         `json:"step"`
	Details map[string]any `json:"details"`
	// Errors lists every argument or schema violation (class validation or
	// unsupported_capability), so a model can fix all of them in one retry.
	Errors []*inputschema.Error `json:"errors,omitempty"`
	// Stage, Path, Pointer, SchemaPointer and Keyword repeat the first
	// violation's fields, for callers that read one error.
	Stage         string `json:"stage,omitempty"`
	Path          string `json:"path,omitempty"`
	Pointer       string `json:"pointer,omitempty"`
	SchemaPointer string `json:"schema_pointer,omitempty"`
	Keyword       string `json:"keyword,omitempty"`

	cause error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Class))
	if e.Tool != "" {
		b.WriteString(" (" + e.Tool + ")")
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}

// Unwrap exposes the class sentinel and the underlying cause, if any.
func (e *Error) Unwrap() []error {
	out := []error{sentinels[e.Class]}
	if e.cause != nil {
		out = append(out, e.cause)
	}
	return out
}

func newError(class tool.Class, step, msg string, details map[string]any) *Error {
	if details == nil {
		details = map[string]any{}
	}
	return &Error{Class: class, Step: step, Message: msg, Details: details}
}

// schemaError turns inputschema errors (one, or a list) into a gateway error
// that carries all of them.
func schemaError(step string, err error) *Error {
	var list []*inputschema.Error
	var el *inputschema.ErrorList
	var one *inputschema.Error
	switch {
	case errors.As(err, &el):
		list = el.Errors
	case errors.As(err, &one):
		list = []*inputschema.Error{one}
	default:
		e := newError(tool.ClassValidation, step, err.Error(), nil)
		e.cause = err
		return e
	}
	first := list[0]
	// The first violation's text without its class, which Error() adds.
	msg := strings.TrimPrefix(first.Error(), string(first.Class)+": ")
	if len(list) > 1 {
		msg += " (and " + strconv.Itoa(len(list)-1) + " more)"
	}
	e := newError(tool.Class(first.Class), step, msg, nil)
	e.Errors = list
	e.Stage, e.Path, e.Pointer, e.SchemaPointer, e.Keyword = string(first.Stage), first.Path, first.Pointer, first.SchemaPointer, first.Keyword
	if el != nil && el.Truncated {
		e.Details["truncated"] = true
	}
	e.cause = err
	return e
}
