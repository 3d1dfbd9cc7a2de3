package schematool

import (
	"errors"
	"fmt"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// LintReport is what Lint found, in the form `backplane schema lint --json`
// prints.
type LintReport struct {
	Tools   []LintEntry `json:"tools"`
	Summary LintSummary `json:"summary"`
}

// LintEntry is the verdict on one tool of the catalog.
type LintEntry struct {
	Index int     `json:"index"`
	Name  *string `json:"name"` // null when the entry has none
	OK    bool    `json:"ok"`
	// Error is the first error: the one the gateway reports when it
	// registers the tool.
	Error *inputschema.Error `json:"error,omitempty"`
	// Errors lists every error of the tool (see inputschema.CompileAll),
	// Error first; Truncated when Limits.MaxErrors cut the list.
	Errors    []*inputschema.Error `json:"errors,omitempty"`
	Truncated bool                 `json:"truncated,omitempty"`
}

// LintSummary counts the verdicts. ByKeyword counts the tools outside the
// subset by the keyword of their first error (by its class when it names no
// keyword).
type LintSummary struct {
	Total       int            `json:"total"`
	Supported   int            `json:"supported"`
	Unsupported int            `json:"unsupported"`
	ByKeyword   map[string]int `json:"by_keyword"`
}

// Lint checks every tool of a catalog, an MCP tools/list result
// ({"tools":[{"name","description","inputSchema"},...]}, other members
// ignored) or a bare array of tools, compiling each inputSchema byte for
// byte as the gateway does at registration, and listing every error. A tool
// entry that is not an object, has no string name, repeats a member or
// repeats an earlier tool's name is an error of that entry (stage
// StageInput). The error, wrapping ErrCatalog, means the catalog itself
// cannot be read.
func Lint(catalog []byte, opts *Options) (*LintReport, error) {
	o := opts.orDefault()
	tools, err := catalogTools(catalog)
	if err != nil {
		return nil, err
	}
	report := &LintReport{Tools: []LintEntry{}, Summary: LintSummary{ByKeyword: map[string]int{}}}
	names := map[string]bool{}
	for i, raw := range tools {
		entry := lintTool(i, raw, names, &o)
		report.Tools = append(report.Tools, entry)
		report.Summary.Total++
		if entry.OK {
			report.Summary.Supported++
			continue
		}
		report.Summary.Unsupported++
		key := entry.Error.Keyword
		if key == "" {
			key = string(entry.Error.Class)
		}
		report.Summary.ByKeyword[key]++
	}
	return report, nil
}

// envelopeOpts bound an envelope: its size is bounded by the caller, and its
// nesting generously, so that a carried document's depth is judged by the
// validator (at its stage, under its limit), not here.
var envelopeOpts = &jsonstrict.Options{MaxDepth: 1 << 16, MaxBytes: 1 << 30}

// catalogTools finds the tool list: the "tools" member of a tools/list
// result (other members, such as nextCursor, are ignored), or a bare array.
func catalogTools(data []byte) ([][]byte, error) {
	if len(data) > MaxCatalogBytes {
		return nil, fmt.Errorf("%w: catalog is larger than %d bytes", ErrCatalog, MaxCatalogBytes)
	}
	kind, err := jsonstrict.SyntaxKind(data, envelopeOpts)
	if err != nil {
		return nil, fmt.Errorf("%w: catalog is not valid JSON: %v", ErrCatalog, err)
	}
	switch kind {
	case jsonstrict.KindArray:
		tools, err := jsonstrict.Elements(data, envelopeOpts)
		if err != nil {
			return nil, fmt.Errorf("%w: catalog is %v", ErrCatalog, err)
		}
		return tools, nil
	case jsonstrict.KindObject:
		members, err := jsonstrict.Members(data, envelopeOpts)
		if err != nil {
			return nil, fmt.Errorf("%w: catalog is %v", ErrCatalog, err)
		}
		var toolsRaw []byte
		for _, m := range members {
			if m.Name != "tools" {
				continue
			}
			if toolsRaw != nil {
				return nil, fmt.Errorf(`%w: catalog has more than one "tools" member`, ErrCatalog)
			}
			toolsRaw = m.Raw
		}
		if toolsRaw == nil {
			return nil, fmt.Errorf(`%w: catalog has no "tools" member; expected a tools/list result or an array of tools`, ErrCatalog)
		}
		tools, err := jsonstrict.Elements(toolsRaw, envelopeOpts)
		if err != nil {
			return nil, fmt.Errorf(`%w: catalog's "tools" is not an array: %v`, ErrCatalog, err)
		}
		return tools, nil
	}
	return nil, fmt.Errorf("%w: catalog is a JSON %s; expected a tools/list result or an array of tools", ErrCatalog, kind)
}

// lintTool checks one tool entry; names collects the names seen so far.
func lintTool(index int, raw []byte, names map[string]bool, o *Options) LintEntry {
	entry := LintEntry{Index: index}
	fail := func(msg string) LintEntry {
		entry.Error = &inputschema.Error{
			Class:   inputschema.ClassValidation,
			Stage:   StageInput,
			Message: msg,
			Details: map[string]any{"index": index},
		}
		entry.Errors = []*inputschema.Error{entry.Error}
		return entry
	}
	members, err := jsonstrict.Members(raw, envelopeOpts)
	if err != nil {
		if errors.Is(err, jsonstrict.ErrKind) {
			return fail("tool entry is not a JSON object")
		}
		return fail("tool entry is not a valid JSON object: " + err.Error())
	}
	var nameRaw, schemaRaw []byte
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m.Name] {
			return fail(fmt.Sprintf("tool entry has a duplicate member %q", m.Name))
		}
		seen[m.Name] = true
		switch m.Name {
		case "name":
			nameRaw = m.Raw
		case "inputSchema":
			schemaRaw = m.Raw
		}
	}
	if nameRaw != nil {
		if v, err := jsonstrict.Decode(nameRaw, nil); err == nil {
			if s, ok := v.(string); ok {
				entry.Name = &s
			}
		}
	}
	switch {
	case nameRaw == nil:
		return fail("tool entry has no name")
	case entry.Name == nil:
		return fail("tool name is not a strict JSON string")
	case *entry.Name == "":
		return fail("tool name is empty")
	case names[*entry.Name]:
		return fail(fmt.Sprintf("tool name %q repeats an earlier tool's name", *entry.Name))
	}
	names[*entry.Name] = true
	copts := &inputschema.CompileOptions{Limits: o.Limits}
	if schemaRaw == nil {
		// A missing schema is the validator's verdict (D4), not a catalog
		// fault: ask it, as the gateway would.
		_, err = inputschema.CompileValue(nil, copts)
	} else {
		_, err = inputschema.CompileAll(schemaRaw, copts)
	}
	if err == nil {
		entry.OK = true
		return entry
	}
	var list *inputschema.ErrorList
	if !errors.As(err, &list) {
		e, convErr := SchemaError(err)
		if convErr != nil {
			return fail(convErr.Error())
		}
		list = &inputschema.ErrorList{Errors: []*inputschema.Error{e}}
	}
	for _, e := range list.Errors {
		entry.Errors = append(entry.Errors, Wire(e))
	}
	entry.Error, entry.Truncated = entry.Errors[0], list.Truncated
	return entry
}
