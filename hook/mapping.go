package hook

import (
	"encoding/json"
	"fmt"
)

// How an agent's own tools become calls of the built-in tools: for most of
// them, a table row per tool naming the built-in and, member by member,
// which argument its input member becomes. One reader serves every agent,
// so the rules (what is required, what a path is resolved against) are
// written once. The tools that do more than rename members (Claude Code's
// MultiEdit, Gemini CLI's web_fetch, Codex's apply_patch) keep their own
// code beside the table.

// argKind says how one member of an agent's tool input is read.
type argKind int

const (
	text    argKind = iota // a required string, passed as it is
	optText                // an optional string, passed when present
	oldText                // edit's old text: passed when present and not empty (empty: the whole file replaced)
	file                   // a required path, resolved inside the workspace
	dir                    // an optional path, resolved; the working directory when absent or empty
	cwdOnly                // an optional working directory that must be inside the workspace; not passed on
)

// member maps one input member (from) onto one argument (to).
type member struct {
	from, to string
	kind     argKind
}

// mapping is one agent tool's row: the built-in it is, and its members.
type mapping struct {
	tool    string
	members []member
}

var claudeTools = map[string]mapping{
	"Bash":     {"bash", []member{{"command", "command", text}}},
	"Write":    {"write", []member{{"file_path", "path", file}, {"content", "content", text}}},
	"Edit":     {"edit", []member{{"file_path", "path", file}, {"new_string", "content", text}, {"old_string", "old_content", oldText}}},
	"Read":     {"read", []member{{"file_path", "path", file}}},
	"LS":       {"ls", []member{{"path", "path", dir}}},
	"Glob":     {"glob", []member{{"pattern", "pattern", text}, {"path", "path", dir}}},
	"Grep":     {"grep", []member{{"pattern", "pattern", text}, {"path", "path", dir}, {"glob", "glob", optText}}},
	"WebFetch": {"url_fetch", []member{{"url", "url", text}}},
}

// geminiTools follows Gemini CLI's declarations
// (packages/core/src/tools/definitions/base-declarations.ts). A shell
// command runs in dir_path: it too must be inside the workspace, though
// the policy decides on the command's text.
var geminiTools = map[string]mapping{
	"run_shell_command": {"bash", []member{{"command", "command", text}, {"dir_path", "", cwdOnly}}},
	"write_file":        {"write", []member{{"file_path", "path", file}, {"content", "content", text}}},
	"replace":           {"edit", []member{{"file_path", "path", file}, {"new_string", "content", text}, {"old_string", "old_content", oldText}}},
	"read_file":         {"read", []member{{"file_path", "path", file}}},
	"list_directory":    {"ls", []member{{"dir_path", "path", dir}}},
	"glob":              {"glob", []member{{"pattern", "pattern", text}, {"dir_path", "path", dir}}},
	"grep_search":       {"grep", []member{{"pattern", "pattern", text}, {"dir_path", "path", dir}, {"include_pattern", "glob", optText}}},
}

// inputMembers decodes a tool input's top-level members, leaving their
// values to the mapping.
func inputMembers(in *Input) (map[string]json.RawMessage, error) {
	var ms map[string]json.RawMessage
	if err := json.Unmarshal(in.ToolInput, &ms); err != nil {
		return nil, fmt.Errorf("%w: %s tool_input: %v", ErrBadInput, in.ToolName, err)
	}
	return ms, nil
}

// stringMember is member name of ms as a string; nil when it is absent
// or null.
func stringMember(in *Input, ms map[string]json.RawMessage, name string) (*string, error) {
	raw, ok := ms[name]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%w: %s tool_input: %s is not a string", ErrBadInput, in.ToolName, name)
	}
	return &s, nil
}

// calls is the one call m makes of in.
func (m mapping) calls(in *Input, ms map[string]json.RawMessage, p *paths) ([]Call, error) {
	args := make(map[string]any, len(m.members))
	for _, mb := range m.members {
		v, err := stringMember(in, ms, mb.from)
		if err != nil {
			return nil, err
		}
		switch mb.kind {
		case text, file:
			if v == nil {
				return nil, fmt.Errorf("%w: %s tool_input has no %s", ErrBadInput, in.ToolName, mb.from)
			}
			s := *v
			if mb.kind == file {
				if s, err = p.resolve(s); err != nil {
					return nil, err
				}
			}
			args[mb.to] = s
		case optText:
			if v != nil {
				args[mb.to] = *v
			}
		case oldText:
			if v != nil && *v != "" {
				args[mb.to] = *v
			}
		case dir, cwdOnly:
			d, err := p.resolveOrCwd(v)
			if err != nil {
				return nil, err
			}
			if mb.kind == dir {
				args[mb.to] = d
			}
		}
	}
	return one(m.tool, args)
}
