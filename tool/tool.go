// Package tool is the one vocabulary of tools, below everything else: what
// the gateway, the backends, the configuration and the front ends share
// about a tool. It holds the descriptor ([Tool]), its safety flags, the
// validator it may bring, the stable error classes a call can end with,
// its definition hash, and the [Registry] an upstream registers its tools
// through; and what runs a call once the gateway has admitted it: the
// [Backend] interface, the [Call] it is handed and the [Result] it returns,
// the per-call interaction channels ([Asker], [Client]) and the sentinels
// [ErrNotStarted] and [ErrMalformedResult]; and [Func], a tool written as
// a typed Go function. A tool's [Tool.Source] and [Tool.MainArg] are
// recorded by whoever registers it, and read everywhere from there. A
// source of tools has the gateway record what it does beside its calls
// through a [Recorder] ([Event]). The command backend
// (backend/command), the built-in tools and MCP upstreams implement
// [Backend].
//
// A tool from a source the gateway does not control may carry that
// source's own descriptor ([Tool.Descriptor]): it is what clients are
// served, only the name rewritten ([Served]), and every member of it is
// part of the definition hash ([HashOf]).
//
// It imports nothing of Backplane's but internal/canonjson and
// internal/jsonstrict, so that a backend describes and registers its tools
// without importing the gateway, and the gateway uses these names as they
// are (no aliases).
package tool

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/internal/canonjson"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// Safety flags describe what a tool does, for policy and approval.
type Safety struct {
	ReadOnly         bool `json:"read_only" yaml:"read_only"`
	Idempotent       bool `json:"idempotent" yaml:"idempotent"`
	RequiresApproval bool `json:"requires_approval" yaml:"requires_approval"`
}

// Validator validates argument bytes, reporting every violation as an
// *inputschema.Error or *inputschema.ErrorList. *inputschema.Schema is one.
type Validator interface {
	ValidateJSONAll(args []byte) error
}

// Tool is a tool descriptor with its backend.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of the arguments, kept unchanged (D20).
	InputSchema json.RawMessage
	Safety      Safety
	// Timeout bounds one call; 0 means the gateway's default.
	Timeout time.Duration
	Backend Backend
	// Validator, when set, replaces the subset validator for this tool: an
	// explicit choice of another boundary (D21), never a fallback.
	Validator Validator
	// Pinned tools come from a source the gateway does not control (an MCP
	// upstream). Their definition hash is recorded at first registration;
	// after a change, calls fail with forbidden until an operator accepts
	// the new definition (store.Pins.AcceptPin; `backplane tools accept`).
	Pinned bool
	// HoldUnseen, for a pinned tool, holds a definition whose name was
	// never pinned before instead of accepting it at first sight: a tool
	// an upstream adds while running is reviewed like a changed one.
	HoldUnseen bool
	// Descriptor, when set, is the source's own descriptor of the tool (an
	// MCP upstream's tools/list object, its bytes as they came): what
	// clients are served ([Served]: only the name rewritten), so that
	// nothing the source declared (title, icons, outputSchema, every
	// annotation, execution, _meta, members yet to be specified) is lost
	// on the way. Everything in it is part of the definition ([HashOf]).
	// nil for the gateway's own tools, which are served from the fields
	// above (but a [Func] tool with an output schema).
	Descriptor json.RawMessage
	// OutputSchema, for a tool without a Descriptor (the built-in tools),
	// is the JSON Schema of its structured result when it is not an
	// error: served as the tool's outputSchema, part of its definition
	// ([HashOf]). A Descriptor carries its own and this is then ignored.
	OutputSchema json.RawMessage
	// Source says where the tool comes from, recorded by whoever
	// registers it so that no reader guesses it from the name: the
	// section of the configuration ([SourceBuiltin], [SourceTools], or
	// [ServerSource] of an upstream server's name), or "" (a tool an
	// embedder registers). Not part of the definition.
	Source string
	// MainArg names the top-level member of the arguments that the tool
	// is mainly about (the command of bash, the path of read, the one a
	// configuration names with main_arg), recorded at registration for
	// what shows a call in a few words; "" when it has none. The policy
	// matches TOOL(PATTERN) entries against the same member (it is given
	// the configuration's main arguments when compiled, before any tool is
	// registered). Not part of the definition.
	MainArg string
}

// The sources of [Tool.Source]: the configuration's sections.
const (
	SourceBuiltin = "builtin" // a built-in tool (builtin:)
	SourceTools   = "tools"   // a command tool of the configuration (tools:)
	sourceServer  = "server " // before an upstream server's name (servers:)
)

// ServerSource is the [Tool.Source] of the tools of the upstream server
// named name.
func ServerSource(name string) string { return sourceServer + name }

// SourceServer returns the upstream server's name of a [Tool.Source] made
// by [ServerSource], and whether it is one.
func SourceServer(source string) (string, bool) {
	return strings.CutPrefix(source, sourceServer)
}

// Class is a stable error class string; callers (and models) match on it.
// It is an error too, so that a call's error matches its class:
// errors.Is(err, tool.ClassForbidden).
type Class string

// Error is the class's name.
func (c Class) Error() string { return string(c) }

const (
	ClassValidation       Class = "validation"
	ClassUnsupported      Class = "unsupported_capability"
	ClassNotFound         Class = "not_found"
	ClassForbidden        Class = "forbidden"
	ClassApprovalRequired Class = "approval_required"
	ClassBudgetExceeded   Class = "budget_exceeded"
	ClassResourceConflict Class = "resource_conflict"
	ClassTimeout          Class = "timeout"
	ClassCancelled        Class = "cancelled"
	ClassExecutionFailure Class = "execution_failure"
	ClassUnknownOutcome   Class = "unknown_outcome"
	ClassMalformedResult  Class = "malformed_result"
	// ClassInputRequired: the backend answered that the call cannot
	// complete before the client answers its requests (MCP 2026-07-28
	// input_required, see InputRequiredError); the call did not complete,
	// and its retry carrying the answers is a call of its own.
	ClassInputRequired Class = "input_required"
	// ClassInvalidResult: the tool ran and its structuredContent breaks
	// its declared outputSchema; the result is not handed on as a success.
	ClassInvalidResult Class = "invalid_result"
)

// Registry is where a source of tools (an MCP upstream) registers them.
// *gateway.Gateway is one.
//
// Register adds t. It refuses, registering nothing, a tool without a name
// or a backend, a name outside [A-Za-z0-9_.-]{1,128} (the error wraps
// [ErrBadName]), and a name already registered (the error wraps
// [ErrAlreadyRegistered]). A tool whose input schema the registry's
// validator refuses is registered all the same, unchanged (D20), and
// reported with a *[SchemaError]: every call of it then fails with that
// error before its backend runs.
//
// Unregister removes the named tool and reports whether it was registered.
// A source unregisters only the names it registered itself.
type Registry interface {
	Register(ctx context.Context, t Tool) error
	Unregister(name string) bool
}

// MaxNameLen is the longest tool, prompt or resource name accepted.
const MaxNameLen = 128

// ErrBadName is wrapped by Register's error (and [CheckName]'s) when a name
// is outside [A-Za-z0-9_.-]{1,128}.
var ErrBadName = errors.New("its name is not 1 to 128 of A-Z a-z 0-9 _ . -")

// CheckName refuses a name outside [A-Za-z0-9_.-]{1,128}: the names the
// configuration accepts for its own tools. A name comes back in tables,
// log lines and policy patterns: one with a control, a newline or a bidi
// character could forge a row or read as another tool, and one with a
// space or a glob character would be matched by patterns it does not
// spell.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return ErrBadName
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return ErrBadName
		}
	}
	return nil
}

// ErrAlreadyRegistered is wrapped by Register's error when the name is taken.
var ErrAlreadyRegistered = errors.New("a tool is already registered under that name")

// SchemaError reports a tool that Register registered although its input
// schema is outside what the validator accepts.
type SchemaError struct {
	Tool string
	Err  error
}

func (e *SchemaError) Error() string { return "tool " + e.Tool + ": " + e.Err.Error() }

func (e *SchemaError) Unwrap() error { return e.Err }

// HashOf is t's definition hash: [DefinitionHash] of its name,
// description, input schema and safety flags, and with them every member
// of its [Tool.Descriptor] that those do not already say (its title,
// icons, output schema, annotations other than readOnlyHint and
// idempotentHint, execution, _meta, ...): a change of output schema or of
// destructiveHint is a changed definition, held until an operator accepts
// it. A descriptor that says nothing more (or none) gives the hash
// DefinitionHash gives, so that pins recorded before descriptors counted
// still hold for tools that declare nothing else. A tool without a
// descriptor but with an [Tool.OutputSchema] hashes as the descriptor
// declaring it would: the output schema counts the same either way.
func HashOf(t Tool) string {
	extra := descriptorExtra(t.Descriptor)
	if len(t.Descriptor) == 0 && len(t.OutputSchema) > 0 {
		var out any = string(t.OutputSchema)
		if v, err := jsonstrict.Decode(t.OutputSchema, descriptorLimits); err == nil {
			out = v
		}
		extra = map[string]any{"outputSchema": out}
	}
	if extra == nil {
		return DefinitionHash(t.Name, t.Description, t.InputSchema, t.Safety)
	}
	return definitionHash(t.Name, t.Description, t.InputSchema, t.Safety, extra)
}

// descriptorExtra is what a descriptor declares beyond the name,
// description, input schema and the two hints the safety flags carry, as a
// decoded JSON value; nil when nothing. A descriptor that is not a JSON
// object is kept whole, as its text: it still counts.
func descriptorExtra(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	v, err := jsonstrict.Decode(raw, descriptorLimits)
	if err != nil {
		return string(raw)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, v := range m {
		switch k {
		case "name", "description", "inputSchema":
			continue
		case "annotations":
			if a, ok := v.(map[string]any); ok {
				rest := map[string]any{}
				for ak, av := range a {
					// Said by the safety flags (tightened over a
					// process's life, so not the hint as last listed).
					if ak == "readOnlyHint" || ak == "idempotentHint" {
						if _, isBool := av.(bool); isBool {
							continue
						}
					}
					rest[ak] = av
				}
				if len(rest) == 0 {
					continue
				}
				v = rest
			}
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// descriptorLimits bound the reading of a descriptor: far beyond what a
// tools/list answer holds (its source read it whole already), so that a
// deep or large one is still served and hashed as it is.
var descriptorLimits = &jsonstrict.Options{MaxDepth: 10000, MaxBytes: 64 << 20}

// Served is the descriptor clients are served for t: its Descriptor with
// the "name" member's value replaced by t.Name (the prefixed name) and
// every other member, in its order, as the source sent it. ok is false when
// t has no descriptor or it is not a JSON object (then the caller describes
// t from its fields).
func Served(t Tool) (json.RawMessage, bool) {
	if len(t.Descriptor) == 0 {
		return nil, false
	}
	ms, err := jsonstrict.Members(t.Descriptor, descriptorLimits)
	if err != nil {
		return nil, false
	}
	name, _ := json.Marshal(t.Name)
	b := make([]byte, 0, len(t.Descriptor)+len(name))
	b = append(b, '{')
	named := false
	for _, m := range ms {
		if m.Name == "name" {
			if named {
				continue // a duplicate: one name, the gateway's
			}
			named = true
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(m.Name)
		b = append(b, k...)
		b = append(b, ':')
		if m.Name == "name" {
			b = append(b, name...)
		} else {
			b = append(b, m.Raw...)
		}
	}
	if !named {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"name":`...)
		b = append(b, name...)
	}
	return append(b, '}'), true
}

// DefinitionHash is the SHA-256 of the canonical JSON of a tool's name,
// description, input schema (the raw bytes when they are not JSON) and
// safety flags. The flags are part of the definition because they decide
// whether a call needs approval: an upstream that flips readOnlyHint to
// shed the approval step changes its tool, and a pinned tool is then held
// back like any other change; an approval is bound to them as well.
func DefinitionHash(name, description string, schema json.RawMessage, safety Safety) string {
	return definitionHash(name, description, schema, safety, nil)
}

// definitionHash is DefinitionHash with the descriptor's extra members
// under "descriptor" when there are any.
func definitionHash(name, description string, schema json.RawMessage, safety Safety, extra any) string {
	var s any = string(schema)
	if v, err := jsonstrict.Decode(schema, nil); err == nil {
		s = v
	}
	def := func(schema any) map[string]any {
		d := map[string]any{"name": name, "description": description, "inputSchema": schema, "safety": map[string]any{
			"read_only": safety.ReadOnly, "idempotent": safety.Idempotent, "requires_approval": safety.RequiresApproval}}
		if extra != nil {
			d["descriptor"] = extra
		}
		return d
	}
	// Unprefixed, unlike an argument digest: pins store these hashes, and a
	// schema whose numbers were already in RFC 8785's shortest form keeps
	// the hash it had, so its pin still holds after an upgrade; one with
	// other literals (1.0, 1e3, integers beyond 2^53) gets a new hash and is
	// held back as changed, the safe side.
	sum, err := canonjson.Sum(def(s))
	if err != nil {
		sum, err = canonjson.Sum(def(string(schema)))
	}
	if err != nil && extra != nil {
		// Numbers canonjson cannot write in the extra members: their text
		// still counts.
		extra = fmt.Sprint(extra)
		sum, _ = canonjson.Sum(def(string(schema)))
	}
	return hex.EncodeToString(sum[:])
}

// BuiltinNames returns the names of the built-in tools (package
// backend/builtin), in the order they are listed to a model, most used
// first: the one list of them (the configuration's default of
// builtin.enable, the embedded schemas' order, serve's summary).
func BuiltinNames() []string {
	return []string{"read", "bash", "grep", "glob", "write", "url_fetch", "edit", "ls", "ask_user_question"}
}

// OutputSchemaOf is the output schema t declares: its descriptor's
// outputSchema member when it has a descriptor (nil when that has none or
// it is null), else [Tool.OutputSchema].
func OutputSchemaOf(t Tool) json.RawMessage {
	if len(t.Descriptor) == 0 {
		return t.OutputSchema
	}
	ms, err := jsonstrict.Members(t.Descriptor, descriptorLimits)
	if err != nil {
		return nil
	}
	var out json.RawMessage
	for _, m := range ms {
		if m.Name == "outputSchema" {
			out = m.Raw // the last one, as a JSON reader keeps it
		}
	}
	if string(out) == "null" {
		return nil
	}
	return out
}
