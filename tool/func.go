package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/jsonschema-go/jsonschema"
)

// FuncOptions are the choices of [Func]; nil means the defaults.
type FuncOptions struct {
	// InputSchema, when set, is the tool's input schema, used as given
	// instead of the one inferred from In; Register checks it like any
	// other (a schema outside the subset is registered and reported with
	// a *SchemaError). Arguments it accepts that In cannot hold are
	// refused as a validation error before anything is approved.
	InputSchema json.RawMessage
	// OutputSchema, when set, is the tool's output schema, used as given
	// instead of the one inferred from Out (which must then be a struct
	// or a map, see Func).
	OutputSchema json.RawMessage
	// Safety and Timeout are the tool's (Tool.Safety, Tool.Timeout).
	Safety  Safety
	Timeout time.Duration
}

// ErrFuncSchema is wrapped by Func's error when the schema it infers from In
// is outside the subset of package inputschema, or Out has no schema.
var ErrFuncSchema = errors.New("the type has no schema in the subset; give FuncOptions.InputSchema")

// Func describes a tool written as a Go function: name and description as
// in [Tool], fn its work. What the tool is:
//
//   - Its input schema is inferred from In by github.com/google/jsonschema-go
//     (jsonschema.For: a struct is an object whose fields are its properties
//     under their json names, required unless omitempty or omitzero, no
//     other member allowed; the jsonschema tag is a field's description),
//     with one narrowing: where it allows null beside a type (a slice, a
//     pointer), the schema asks for the type alone, as the subset has no
//     null (D7; a stricter schema, never a looser one). The result must be
//     within the subset (docs/inputschema-spec.md): a map, an interface, an
//     int8 to int32 or uint8 to uint32 field (their bounds are maximum),
//     or an In that is not a struct, is an error wrapping [ErrFuncSchema],
//     and nothing is inferred around it: give [FuncOptions.InputSchema].
//   - The arguments the gateway validated are read with package
//     internal/jsonstrict's rules (one meaning per document) and decoded
//     into In by github.com/go-json-experiment/json, whose member names
//     match exactly (encoding/json would read "TEXT" into a field the
//     schema calls "text"). Members In has no field for are left out. A
//     value In cannot hold (1.0 or 1e2 for an int, which are integers to
//     the schema: D12) is refused as a validation error before the call
//     is approved, reserved or recorded (the backend is a
//     Checker).
//   - fn runs once per call. What it returns is the call's result, an MCP
//     tool result ({content, structuredContent}) that the server hands on
//     as it is: when Out is a string (or a pointer to one), the string is
//     the one text block, as it is (no JSON quotes); when Out is a struct
//     or a map with string keys (or a pointer to one), it is encoded by
//     encoding/json into structuredContent and, as the same JSON text, the
//     text block, and the tool declares the output schema inferred from Out
//     (jsonschema.For, unchanged: it describes what encoding/json writes)
//     or [FuncOptions.OutputSchema]; any other Out is its JSON text in the
//     text block, without structuredContent or output schema. A nil
//     pointer is Out's zero value, a nil map an empty object.
//   - An error fn returns is the tool's own failure (a result with isError
//     and the error's text as its text block: the call ran), except an
//     error wrapping ErrNotStarted (the call provably did not run:
//     settled failed, its budget released) and any error once ctx is done
//     (the outcome is unknown, as for every backend), which are returned to
//     the gateway as they are. A panic in fn is recovered and returned to
//     the gateway as an error wrapping [ErrFuncPanic]: the outcome is
//     unknown (fn may have acted), the call settles uncertain.
//
// A tool with an output schema carries a [Tool.Descriptor] (name,
// description, inputSchema, outputSchema and the safety flags' hints),
// which is what clients are served; the others are served from the Tool's
// fields.
func Func[In, Out any](name, description string, fn func(context.Context, In) (Out, error), opts *FuncOptions) (Tool, error) {
	var o FuncOptions
	if opts != nil {
		o = *opts
	}
	if fn == nil {
		return Tool{}, fmt.Errorf("tool %s: fn is nil", name)
	}
	in := o.InputSchema
	if in == nil {
		var err error
		if in, err = inferInput[In](); err != nil {
			return Tool{}, fmt.Errorf("tool %s: input schema of %v: %w", name, reflect.TypeFor[In](), err)
		}
	}
	kind := outKindOf(reflect.TypeFor[Out]())
	out := o.OutputSchema
	if out != nil && kind != outStructured {
		return Tool{}, fmt.Errorf("tool %s: an output schema needs a struct or map Out, not %v", name, reflect.TypeFor[Out]())
	}
	if out == nil && kind == outStructured {
		s, err := jsonschema.ForType(derefType(reflect.TypeFor[Out]()), nil)
		if err != nil {
			return Tool{}, fmt.Errorf("tool %s: output schema of %v: %w: %w", name, reflect.TypeFor[Out](), ErrFuncSchema, err)
		}
		if out, err = json.Marshal(s); err != nil {
			return Tool{}, fmt.Errorf("tool %s: output schema of %v: %w", name, reflect.TypeFor[Out](), err)
		}
	}
	t := Tool{
		Name: name, Description: description, InputSchema: in, Safety: o.Safety, Timeout: o.Timeout,
		Backend: &funcBackend[In, Out]{fn: fn, kind: kind},
	}
	if out != nil {
		d, err := json.Marshal(funcDescriptor{Name: name, Description: description, InputSchema: in, OutputSchema: out,
			Annotations: annotationsOf(o.Safety)})
		if err != nil {
			return Tool{}, fmt.Errorf("tool %s: %w", name, err)
		}
		t.Descriptor = d
	}
	return t, nil
}

// funcDescriptor is an MCP tool descriptor, as the server writes one from
// a Tool's fields, with the output schema beside.
type funcDescriptor struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Annotations  *annotations    `json:"annotations,omitempty"`
}

type annotations struct {
	ReadOnlyHint   bool `json:"readOnlyHint,omitempty"`
	IdempotentHint bool `json:"idempotentHint,omitempty"`
}

// annotationsOf are the hints the server gives a tool without a
// descriptor (server's toolOf), so that a descriptor changes nothing else.
func annotationsOf(s Safety) *annotations {
	if !s.ReadOnly && !s.Idempotent {
		return nil
	}
	return &annotations{ReadOnlyHint: s.ReadOnly, IdempotentHint: s.Idempotent}
}

// inferInput is In's schema, narrowed (see Func) and checked against the
// subset.
func inferInput[In any]() (json.RawMessage, error) {
	rt := derefType(reflect.TypeFor[In]())
	if rt.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: only a struct is an object the subset can describe", ErrFuncSchema)
	}
	s, err := jsonschema.ForType(rt, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFuncSchema, err)
	}
	dropNull(s)
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if _, err := inputschema.Compile(b, nil); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFuncSchema, err)
	}
	return b, nil
}

// dropNull narrows every type list of null and one type to that type.
func dropNull(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && s.Types[0] == "null" {
		s.Type, s.Types = s.Types[1], nil
	}
	for _, p := range s.Properties {
		dropNull(p)
	}
	dropNull(s.Items)
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// outKind is how a result of Out is written.
type outKind int

const (
	outJSON       outKind = iota // its JSON text
	outText                      // a string, as it is
	outStructured                // an object: structuredContent and its text
)

func outKindOf(t reflect.Type) outKind {
	switch t := derefType(t); t.Kind() {
	case reflect.String:
		return outText
	case reflect.Struct:
		return outStructured
	case reflect.Map:
		if t.Key().Kind() == reflect.String {
			return outStructured
		}
	}
	return outJSON
}

// funcBackend runs Func's fn.
type funcBackend[In, Out any] struct {
	fn   func(context.Context, In) (Out, error)
	kind outKind
}

// strictLimits bound the strict reading of arguments the gateway has
// already bounded by its own limits (inputschema.Limits): here only one
// meaning per document is checked.
var strictLimits = &jsonstrict.Options{MaxDepth: 10000, MaxBytes: 1 << 30}

// decode reads args into an In.
func (b *funcBackend[In, Out]) decode(args json.RawMessage) (In, error) {
	var in In
	if err := jsonstrict.Valid(args, strictLimits); err != nil {
		return in, err
	}
	if err := jsonv2.Unmarshal(args, &in); err != nil {
		return in, fmt.Errorf("the arguments do not fit %v: %w", reflect.TypeFor[In](), err)
	}
	return in, nil
}

// Check implements Checker.
func (b *funcBackend[In, Out]) Check(args json.RawMessage) error {
	_, err := b.decode(args)
	return err
}

// Invoke implements Backend.
func (b *funcBackend[In, Out]) Invoke(ctx context.Context, call *Call) (*Result, error) {
	in, err := b.decode(call.Arguments)
	if err != nil {
		// Check passed these very bytes: not reached through the gateway.
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	out, err := b.run(ctx, in)
	if err != nil {
		if errors.Is(err, ErrNotStarted) || errors.Is(err, ErrFuncPanic) || ctx.Err() != nil {
			return nil, err
		}
		return toolResult(callResult{Content: []textBlock{{"text", err.Error()}}, IsError: true})
	}
	v := reflect.ValueOf(&out).Elem()
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v = reflect.Zero(v.Type().Elem())
			continue
		}
		v = v.Elem()
	}
	if b.kind == outText {
		return toolResult(callResult{Content: []textBlock{{"text", v.String()}}})
	}
	j, err := marshal(v.Interface())
	if err != nil {
		// fn ran: its result cannot be written.
		return nil, fmt.Errorf("%w: %w", ErrMalformedResult, err)
	}
	r := callResult{Content: []textBlock{{"text", string(j)}}}
	if b.kind == outStructured {
		if v.Kind() == reflect.Map && v.IsNil() {
			j = []byte("{}")
			r.Content[0].Text = "{}"
		}
		r.StructuredContent = j
	}
	return toolResult(r)
}

// run calls fn, a panic in it an error: fn may have acted before it, so the
// outcome is unknown, and one tool's bug must not end the gateway.
func (b *funcBackend[In, Out]) run(ctx context.Context, in In) (out Out, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrFuncPanic, p)
		}
	}()
	return b.fn(ctx, in)
}

// ErrFuncPanic is wrapped by the error of a [Func] tool's call whose
// function panicked.
var ErrFuncPanic = errors.New("the tool's function panicked")

// callResult is an MCP tool result.
type callResult struct {
	Content           []textBlock     `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError,omitempty"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func toolResult(r callResult) (*Result, error) {
	b, err := marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedResult, err)
	}
	return &Result{Content: b, IsError: r.IsError}, nil
}

// marshal is json.Marshal without HTML escaping (a text block keeps its
// "<" as written) and without the trailing newline of an Encoder.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
