package upstream

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/validator/draft2020"
)

// Visibility is what a server's validator makes of its tools: how many are
// callable, the keywords that refuse the rest, and how many of those the
// other validator would accept.
type Visibility struct {
	Server    string
	Validator string
	Tools     int
	Callable  int
	// Keywords counts the refused tools per keyword at fault (the class
	// when the error names no keyword); a tool counts once per keyword.
	Keywords map[string]int
	// OtherValidator would accept OtherAccepts of the refused tools.
	OtherValidator string
	OtherAccepts   int
	// RefusedTools are the refused tools (by their registered names, in
	// name order), each with every keyword at fault.
	RefusedTools []RefusedTool
}

// RefusedTool is a tool every call of which the server's validator
// refuses, and why.
type RefusedTool struct {
	Name string `json:"name"`
	// Keywords are every keyword at fault (the class when an error names
	// none), sorted, each once.
	Keywords []string `json:"keywords"`
	// OtherAccepts says the other validator would accept it.
	OtherAccepts bool `json:"other_accepts"`
	// Reason, when set, says why the tool is not offered at all (no
	// validator would change that): its x-mcp-header annotations are
	// invalid (keyword x-mcp-header).
	Reason string `json:"reason,omitempty"`
}

// Fix is the configuration line that would make the other validator
// check the server's tools: "validator: draft2020-12" (or subset).
func (v Visibility) Fix() string { return "validator: " + v.OtherValidator }

// Refused is the number of tools every call of which is refused.
func (v Visibility) Refused() int { return v.Tools - v.Callable }

// String is the summary for people, with the setting to change.
func (v Visibility) String() string {
	s := fmt.Sprintf("server %s: %d of %d tools callable under validator %s", v.Server, v.Callable, v.Tools, v.Validator)
	if v.Refused() == 0 {
		return s
	}
	keys := slices.Sorted(maps.Keys(v.Keywords))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s (%d)", k, v.Keywords[k])
	}
	s += fmt.Sprintf("; %d refused because of %s", v.Refused(), strings.Join(parts, ", "))
	if v.OtherAccepts > 0 {
		s += fmt.Sprintf("; validator: %s on this server would accept %d of them", v.OtherValidator, v.OtherAccepts)
	}
	return s
}

// Visibility reports what the server's validator makes of its registered
// tools now.
func (u *Upstream) Visibility() Visibility {
	u.mu.Lock()
	schemas := make([][]byte, 0, len(u.tools))
	outputs := make([][]byte, 0, len(u.tools))
	names := make([]string, 0, len(u.tools))
	for _, t := range u.tools {
		schemas = append(schemas, t.schema)
		outputs = append(outputs, outputSchemaOf(t.raw))
		names = append(names, t.full)
	}
	dropped := u.droppedTools()
	u.mu.Unlock()
	v := Visibility{Server: u.srv.Name, Validator: u.srv.Validator, Tools: len(schemas), Keywords: map[string]int{}}
	v.OtherValidator = ValidatorDraft2020
	if v.Validator == ValidatorDraft2020 {
		v.OtherValidator = ValidatorSubset
	}
	for i, schema := range schemas {
		errs := u.toolErrors(v.Validator, schema, outputs[i])
		if len(errs) == 0 {
			v.Callable++
			continue
		}
		seen := map[string]bool{}
		rt := RefusedTool{Name: names[i]}
		for _, e := range errs {
			k := e.Keyword
			if k == "" {
				k = string(e.Class)
			}
			if !seen[k] {
				seen[k] = true
				v.Keywords[k]++
				rt.Keywords = append(rt.Keywords, k)
			}
		}
		slices.Sort(rt.Keywords)
		if len(u.toolErrors(v.OtherValidator, schema, outputs[i])) == 0 {
			v.OtherAccepts++
			rt.OtherAccepts = true
		}
		v.RefusedTools = append(v.RefusedTools, rt)
	}
	v.Tools += len(dropped)
	for _, rt := range dropped {
		v.Keywords[keywordHeader]++
		v.RefusedTools = append(v.RefusedTools, rt)
	}
	slices.SortFunc(v.RefusedTools, func(a, b RefusedTool) int { return strings.Compare(a.Name, b.Name) })
	return v
}

// droppedTools are the tools not offered, as refused tools; u.mu held.
func (u *Upstream) droppedTools() []RefusedTool {
	out := make([]RefusedTool, 0, len(u.dropped))
	for name, why := range u.dropped {
		out = append(out, RefusedTool{Name: name, Keywords: []string{keywordHeader}, Reason: why})
	}
	return out
}

// toolErrors are every error that makes validator refuse a tool's calls:
// its input schema's, else its output schema's (nil: none declared).
func (u *Upstream) toolErrors(validator string, schema, output []byte) []*inputschema.Error {
	errs := u.schemaErrors(validator, schema)
	if len(errs) == 0 && output != nil {
		errs = u.schemaErrors(validator, output)
	}
	return errs
}

// schemaErrors are every error that makes validator refuse schema.
func (u *Upstream) schemaErrors(validator string, schema []byte) []*inputschema.Error {
	var err error
	if validator == ValidatorDraft2020 {
		_, err = draft2020.Compile(schema, u.d2020)
	} else {
		_, err = inputschema.CompileAll(schema, nil)
	}
	if err == nil {
		return nil
	}
	var list *inputschema.ErrorList
	if errors.As(err, &list) && len(list.Errors) > 0 {
		return list.Errors
	}
	var e *inputschema.Error
	if errors.As(err, &e) {
		return []*inputschema.Error{e}
	}
	return []*inputschema.Error{{Class: inputschema.ClassUnsupported, Message: err.Error()}}
}

// logVisibility logs the summary at start: a warning when tools are
// refused, naming the setting that would accept them.
func (u *Upstream) logVisibility() {
	v := u.Visibility()
	if v.Refused() == 0 {
		u.log.Info(v.String(), "validator", v.Validator, "tools", v.Tools, "callable", v.Callable)
		return
	}
	u.log.Warn(v.String(), "validator", v.Validator, "tools", v.Tools, "callable", v.Callable,
		"refused", v.Refused(), "refused_by_keyword", v.Keywords, "other_validator", v.OtherValidator, "other_accepts", v.OtherAccepts)
}

// Accepts reports what validator would make of the server's registered
// tools now, whichever validator the server was connected with: how many
// it accepts, and the ones it refuses with every keyword at fault (in name
// order). backplane servers add compares the two validators with it.
func (u *Upstream) Accepts(validator string) (accepted int, refused []RefusedTool) {
	u.mu.Lock()
	type one struct {
		name           string
		schema, output []byte
	}
	tools := make([]one, 0, len(u.tools))
	for _, t := range u.tools {
		tools = append(tools, one{t.full, t.schema, outputSchemaOf(t.raw)})
	}
	refused = u.droppedTools()
	u.mu.Unlock()
	for _, t := range tools {
		errs := u.toolErrors(validator, t.schema, t.output)
		if len(errs) == 0 {
			accepted++
			continue
		}
		rt := RefusedTool{Name: t.name}
		for _, e := range errs {
			k := e.Keyword
			if k == "" {
				k = string(e.Class)
			}
			if !slices.Contains(rt.Keywords, k) {
				rt.Keywords = append(rt.Keywords, k)
			}
		}
		slices.Sort(rt.Keywords)
		refused = append(refused, rt)
	}
	slices.SortFunc(refused, func(a, b RefusedTool) int { return strings.Compare(a.Name, b.Name) })
	return accepted, refused
}
