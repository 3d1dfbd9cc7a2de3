package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/tool"
	"github.com/agentbackplane/backplane/validator/draft2020"
)

// maxPages bounds a tools/list walk: a server whose cursors never end is
// refused rather than followed forever.
const maxPages = 1000

// maxResultDepth bounds the nesting of a result split by members:
// encoding/json's own limit, which bounded it before.
const maxResultDepth = 10000

// rawTool is one tool of a tools/list answer, as the server sent it.
type rawTool struct {
	Name        string
	Description string
	InputSchema json.RawMessage // the bytes of the answer, unchanged
	Annotations struct {
		ReadOnly, Idempotent, Destructive *bool
	}
	// Raw is the whole descriptor as the server sent it: served to
	// clients with only the name rewritten, and part of the definition.
	Raw json.RawMessage
	// Dropped, when not "", is why the tool is not offered: the SDK left
	// it out of its own reading of the page (headers.go).
	Dropped string
}

// upTool is a registered tool of the server.
type upTool struct {
	name    string // the server's name for it
	full    string // PREFIX TOOL (NAME.TOOL by default)
	desc    string
	schema  json.RawMessage
	raw     json.RawMessage // the descriptor as listed
	safety  tool.Safety
	backend *toolBackend
}

// listTools walks tools/list, page by page, from the raw answers.
func (u *Upstream) listTools(ctx context.Context, l *link) ([]rawTool, error) {
	var out []rawTool
	cursor := ""
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("tools/list: more than %d pages", maxPages)
		}
		e := &exchange{method: "tools/list"}
		nudge := l.nudgeWhileWaiting() // a stalled Go server: see nudge.go
		res, err := l.sess.ListTools(withExchange(ctx, e), &sdk.ListToolsParams{Cursor: cursor})
		nudge.stop()
		l.wire.forget(e)
		_, done, raw, rpcErr := e.state()
		if !done && err == nil && res != nil {
			// Answered from the SDK's cache (2026-07-28, within the
			// server's ttlMs): the page last read under this cursor.
			raw, done = l.page(cursor)
		} else if done && rpcErr == nil {
			l.keepPage(cursor, raw)
		}
		switch {
		case done && rpcErr != nil:
			return nil, fmt.Errorf("tools/list: the server answered with an error: %v", rpcErr)
		case !done && err != nil:
			return nil, fmt.Errorf("tools/list: %w", err)
		case !done:
			return nil, errors.New("tools/list: the answer was not seen on the wire")
		}
		// The raw answer is what counts, even when the SDK could not decode
		// it or left tools out (it drops some it deems invalid).
		tools, next, perr := parseToolsPage(raw)
		if perr != nil {
			return nil, fmt.Errorf("tools/list: %w", perr)
		}
		u.markDropped(l, tools, res)
		out = append(out, tools...)
		if next == "" {
			return out, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("tools/list: the cursor %q came back: the listing loops", next)
		}
		seen[next] = true
		cursor = next
	}
}

// parseToolsPage reads one tools/list result: its tools, each kept as its
// raw bytes, and its nextCursor.
func parseToolsPage(raw []byte) ([]rawTool, string, error) {
	m, err := members(raw)
	if err != nil {
		return nil, "", fmt.Errorf("the result: %w", err)
	}
	var next string
	if c, ok := m["nextCursor"]; ok && string(c) != "null" {
		if err := json.Unmarshal(c, &next); err != nil {
			return nil, "", errors.New("nextCursor is not a string")
		}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(m["tools"], &items); err != nil || m["tools"] == nil {
		return nil, "", errors.New("tools is not an array")
	}
	out := make([]rawTool, 0, len(items))
	for i, item := range items {
		t, err := parseTool(item)
		if err != nil {
			return nil, "", fmt.Errorf("tool %d: %w", i, err)
		}
		out = append(out, t)
	}
	return out, next, nil
}

// parseTool reads one tool descriptor: the members the gateway uses, and
// the whole of it as it came (the input schema and everything else).
func parseTool(raw []byte) (rawTool, error) {
	t := rawTool{Raw: json.RawMessage(bytes.Clone(raw))}
	m, err := members(raw)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(m["name"], &t.Name); err != nil || t.Name == "" {
		return t, errors.New("name is missing or not a non-empty string")
	}
	if d, ok := m["description"]; ok && string(d) != "null" {
		if err := json.Unmarshal(d, &t.Description); err != nil {
			return t, fmt.Errorf("%s: description is not a string", t.Name)
		}
	}
	t.InputSchema = json.RawMessage(bytes.Clone(m["inputSchema"]))
	if a, ok := m["annotations"]; ok && string(a) != "null" {
		am, err := members(a)
		if err != nil {
			return t, fmt.Errorf("%s: annotations: %w", t.Name, err)
		}
		t.Annotations.ReadOnly = hint(am["readOnlyHint"])
		t.Annotations.Idempotent = hint(am["idempotentHint"])
		t.Annotations.Destructive = hint(am["destructiveHint"])
	}
	return t, nil
}

// hint reads a boolean hint; anything but true or false is no hint.
func hint(raw json.RawMessage) *bool {
	var b bool
	if raw == nil || json.Unmarshal(raw, &b) != nil || string(raw) == "null" {
		return nil
	}
	return &b
}

// members splits a JSON object into its members' raw values, keyed by their
// exact (unescaped) names. Duplicate names are refused: an object that says
// two things has no meaning to keep.
func members(raw []byte) (map[string]json.RawMessage, error) {
	// One strict pass over the object (its members' exact bytes), rather
	// than a token-by-token json.Decoder, which copies what it reads.
	ms, err := jsonstrict.Members(raw, &jsonstrict.Options{MaxDepth: maxResultDepth, MaxBytes: maxCapture})
	if err != nil {
		if errors.Is(err, jsonstrict.ErrKind) {
			return nil, errors.New("not a JSON object")
		}
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(ms))
	for _, m := range ms {
		if _, dup := out[m.Name]; dup {
			return nil, fmt.Errorf("the member %q appears twice", m.Name)
		}
		out[m.Name] = m.Raw
	}
	return out, nil
}

// safetyOf maps a tool's annotations to the gateway's flags: hints the
// server gives about itself. Only readOnlyHint true spares the approval,
// and not when destructiveHint is true beside it: a server that says both
// contradicts itself, and the claim that costs it the approval is the one
// believed.
func safetyOf(t rawTool) tool.Safety {
	destructive := t.Annotations.Destructive != nil && *t.Annotations.Destructive
	ro := t.Annotations.ReadOnly != nil && *t.Annotations.ReadOnly && !destructive
	return tool.Safety{
		ReadOnly:         ro,
		Idempotent:       t.Annotations.Idempotent != nil && *t.Annotations.Idempotent,
		RequiresApproval: !ro,
	}
}

// tighten keeps the stricter of two safety flag sets: a server that drops a
// tool's approval by changing its annotations does not get it dropped.
func tighten(old, new tool.Safety) tool.Safety {
	return tool.Safety{
		ReadOnly:         old.ReadOnly && new.ReadOnly,
		Idempotent:       old.Idempotent && new.Idempotent,
		RequiresApproval: old.RequiresApproval || new.RequiresApproval,
	}
}

// validatorFor returns the validator of a tool's input schema under the
// server's choice: nil for the subset (the gateway's own), else a draft
// 2020-12 validator, or one that refuses every call when the schema cannot
// be compiled (fail closed, never a fallback to another validator). When
// the input schema is usable but the output schema (output, nil when the
// tool declares none) is not, under the same validator, every call is
// refused the same way, before the server is reached: a result the
// gateway cannot check is never handed on.
func (u *Upstream) validatorFor(full string, schema, output json.RawMessage) tool.Validator {
	var in tool.Validator
	if u.srv.Validator == ValidatorDraft2020 {
		v, err := draft2020.Compile(schema, u.d2020)
		if err != nil {
			u.log.Warn("upstream tool schema refused; its calls will be refused", "tool", full, "validator", ValidatorDraft2020, "error", err.Error())
			return u.refusal(err, "")
		}
		in = v
	} else if _, err := inputschema.Compile(schema, nil); err != nil {
		return nil // the gateway's own subset refuses it, saying why
	}
	if output == nil {
		return in
	}
	if _, err := u.compileOutput(output); err != nil {
		u.log.Warn("upstream tool output schema refused; its calls will be refused", "tool", full, "validator", u.srv.Validator, "error", err.Error())
		return u.refusal(err, "outputSchema")
	}
	return in
}

// compileOutput compiles an output schema with the server's validator.
func (u *Upstream) compileOutput(schema json.RawMessage) (tool.Validator, error) {
	if u.srv.Validator == ValidatorDraft2020 {
		return draft2020.Compile(schema, u.d2020)
	}
	return inputschema.Compile(schema, nil)
}

// outputSchemaOf is a descriptor's outputSchema, nil when it has none.
func outputSchemaOf(raw json.RawMessage) json.RawMessage {
	m, err := members(raw)
	if err != nil {
		return nil
	}
	if o, ok := m["outputSchema"]; ok && string(o) != "null" {
		return o
	}
	return nil
}

// refusal is the validator that refuses every call because of err, the
// compiler's refusal of the input schema (which "") or of the output
// schema ("outputSchema").
func (u *Upstream) refusal(err error, which string) refusal {
	validator := u.srv.Validator
	e := &inputschema.Error{Message: err.Error()}
	var ie *inputschema.Error
	if errors.As(err, &ie) {
		c := *ie
		e = &c
	}
	// Whatever the compiler's class (a malformed schema is validation to
	// it), the call is refused because of the schema, not the arguments.
	e.Class, e.Stage = inputschema.ClassUnsupported, inputschema.StageSchema
	if which == "" {
		e.Message = "the " + validator + " validator cannot use this schema: " + e.Message
	} else {
		e.Message = "the " + validator + " validator cannot check this tool's output schema, so its results could not be checked: " + e.Message +
			fixFor(u.srv.Name, validator)
		e.SchemaPointer = "/" + which + e.SchemaPointer
	}
	return refusal{err: e, validator: validator, which: which}
}

// fixFor is what to change for a server whose validator refuses a schema
// the other would take.
func fixFor(server, validator string) string {
	if validator == ValidatorDraft2020 {
		return ""
	}
	return " (validator: " + ValidatorDraft2020 + " on server " + server + " accepts JSON Schema 2020-12 in full)"
}

// refusal is the validator of a schema that could not be compiled: every
// call fails with its error, before the server is reached.
type refusal struct {
	err       *inputschema.Error
	validator string
	which     string // "" for the input schema, "outputSchema"
}

func (r refusal) ValidateJSONAll([]byte) error {
	e := *r.err // a copy: callers may hold on to it
	e.Details = map[string]any{"validator": r.validator}
	if r.which != "" {
		e.Details["schema"] = r.which
	}
	for k, v := range r.err.Details {
		e.Details[k] = v
	}
	return &e
}

// Refusal is why every call is refused: the schema cannot be used.
func (r refusal) Refusal() error { return r.ValidateJSONAll(nil) }

// sync brings the gateway's registrations up to date with a listing. At
// start (atStart) a collision or a failed registration is an error;
// later, the tool concerned is left out and logged.
func (u *Upstream) sync(ctx context.Context, tools []rawTool, atStart bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return ErrClosed
	}
	listed := map[string]bool{}
	dropped := map[string]string{}
	for _, t := range tools {
		full := u.srv.ToolPrefix() + t.Name
		if t.Dropped != "" {
			if _, again := u.dropped[full]; !again {
				u.log.Warn("upstream tool not offered", "tool", termtext.Line(full), "reason", t.Dropped)
			}
			dropped[full] = t.Dropped
			continue // and unregistered below, if it was registered
		}
		if tool.CheckName(t.Name) != nil || tool.CheckName(full) != nil {
			// Left out, not fatal: the server's other tools still serve. A
			// name with a control or a newline would forge lines wherever
			// it is printed; termtext shows what it holds.
			u.log.Error("upstream tool refused: its name is not 1 to 128 of A-Z a-z 0-9 _ . -", "tool", termtext.Line(full))
			continue
		}
		if listed[t.Name] {
			if atStart {
				return fmt.Errorf("tools/list names %s twice", t.Name)
			}
			u.log.Error("upstream tool listed twice; the first is kept", "tool", full)
			continue
		}
		listed[t.Name] = true
		safety := safetyOf(t)
		old, had := u.tools[t.Name]
		if had {
			safety = tighten(old.safety, safety)
			if old.desc == t.Description && bytes.Equal(old.schema, t.InputSchema) && bytes.Equal(old.raw, t.Raw) && old.safety == safety {
				continue
			}
			u.unregister(old)
			delete(u.tools, t.Name)
		}
		output := outputSchemaOf(t.Raw)
		b := &toolBackend{u: u, name: t.Name}
		if output != nil {
			// nil when it cannot be compiled: the tool's validator then
			// refuses every call (validatorFor), so none reaches Invoke.
			b.output, _ = u.compileOutput(output)
			b.hasOutput = true
		}
		// A tool new to this connection after the first start: held if
		// never pinned before (gateway: HoldUnseen), unless the operator
		// trusts the server's additions.
		holdUnseen := !atStart && !had && !u.srv.AcceptAddedTools
		err := u.reg.Register(ctx, tool.Tool{
			Name:        full,
			Description: t.Description,
			InputSchema: t.InputSchema,
			Safety:      safety,
			Backend:     b,
			Validator:   u.validatorFor(full, t.InputSchema, output),
			Pinned:      true,
			HoldUnseen:  holdUnseen,
			Descriptor:  t.Raw,
			Source:      tool.ServerSource(u.srv.Name),
			MainArg:     u.srv.MainArg,
		})
		var se *tool.SchemaError
		switch {
		case err == nil, errors.As(err, &se):
			if err != nil {
				// Registered unchanged; every call fails with this (D20).
				u.log.Warn("upstream tool schema refused by the subset validator; its calls will be refused", "tool", full, "error", err.Error())
			}
			u.tools[t.Name] = &upTool{name: t.Name, full: full, desc: t.Description, schema: t.InputSchema, raw: t.Raw, safety: safety, backend: b}
			if had {
				u.log.Info("upstream tool changed", "tool", full)
			} else if holdUnseen {
				u.log.Warn("upstream tool added while running: held until an operator accepts it (backplane tools accept), unless it was accepted before; accept_added_tools: true on the server accepts such tools at first sight", "tool", full)
			} else if !atStart {
				u.log.Info("upstream tool added", "tool", full)
			}
			continue
		case errors.Is(err, tool.ErrAlreadyRegistered):
			err = &CollisionError{Tool: full}
		}
		if atStart {
			return err
		}
		u.log.Error("upstream tool left out", "tool", full, "error", err.Error())
	}
	for name, old := range u.tools {
		if !listed[name] {
			u.unregister(old)
			delete(u.tools, name)
			u.log.Info("upstream tool removed", "tool", old.full)
		}
	}
	u.dropped = dropped
	return nil
}

// CollisionError is a tool of the server whose name (with its prefix) is
// already registered by another tool.
type CollisionError struct {
	Tool string // the name both would have
}

func (e *CollisionError) Error() string {
	return fmt.Sprintf("tool %s collides with a tool already registered under that name", e.Tool)
}

// Unwrap makes errors.Is(err, tool.ErrAlreadyRegistered) hold.
func (e *CollisionError) Unwrap() error { return tool.ErrAlreadyRegistered }

// unregister removes t from the registry. Only tools this upstream
// registered are in u.tools, and a registry refuses a second registration
// of a name, so the registration under t.full is ours.
func (u *Upstream) unregister(t *upTool) {
	u.reg.Unregister(t.full)
}

func (u *Upstream) unregisterAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for name, t := range u.tools {
		u.unregister(t)
		delete(u.tools, name)
	}
}
