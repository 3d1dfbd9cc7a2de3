package hook

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// Cursor's agent hooks (hooks.json, version 1) are one event per kind of
// tool use rather than one PreToolUse event with a tool name; the events
// that can refuse a tool use before it runs, and that this package maps:
//
//	beforeShellExecution {command, cwd}          -> bash {command}
//	beforeReadFile {file_path, content}          -> read {path}
//	beforeMCPExecution {tool_name, tool_input, url | command}
//	                                             -> MapOptions.MCPServer(url, command)'s tool
//
// Every event carries conversation_id (the session), generation_id,
// workspace_roots and hook_event_name. The answer is {"permission":
// "allow"|"deny"|"ask", "user_message", "agent_message"}; exit 2 blocks.
// Cursor's edits have no event that comes before them (afterFileEdit only
// reports), so they are not decided here.
const (
	cursorShell = "beforeShellExecution"
	cursorRead  = "beforeReadFile"
	cursorMCP   = "beforeMCPExecution"
)

// cursorWire is the members of Cursor's hook input this package reads.
type cursorWire struct {
	HookEventName  string          `json:"hook_event_name"`
	ConversationID string          `json:"conversation_id"`
	WorkspaceRoots []string        `json:"workspace_roots"`
	Cwd            string          `json:"cwd"`
	Command        *string         `json:"command"`
	FilePath       *string         `json:"file_path"`
	ToolName       *string         `json:"tool_name"`
	ToolInput      json.RawMessage `json:"tool_input"`
	URL            *string         `json:"url"`
}

// cursorToolInput is what parseCursor keeps of an event as Input.ToolInput.
type cursorToolInput struct {
	Command   *string         `json:"command,omitempty"`
	FilePath  *string         `json:"file_path,omitempty"`
	ToolName  *string         `json:"tool_name,omitempty"`
	ToolInput json.RawMessage `json:"tool_input,omitempty"`
	URL       *string         `json:"url,omitempty"`
}

// parseCursor reads a Cursor hook input (already checked strict JSON). The
// event is the Input's ToolName; its cwd is the event's cwd, else the
// first workspace root.
func parseCursor(data []byte) (*Input, error) {
	var w cursorWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	switch w.HookEventName {
	case cursorShell, cursorRead, cursorMCP:
	default:
		return nil, fmt.Errorf("%w: hook_event_name is %q, want %s, %s or %s", ErrBadInput, w.HookEventName, cursorShell, cursorRead, cursorMCP)
	}
	cwd := w.Cwd
	if cwd == "" && len(w.WorkspaceRoots) > 0 {
		cwd = w.WorkspaceRoots[0]
	}
	if !filepath.IsAbs(cwd) {
		return nil, fmt.Errorf("%w: no absolute cwd or workspace_roots[0] (%q)", ErrBadInput, cwd)
	}
	ti := cursorToolInput{Command: w.Command, FilePath: w.FilePath, ToolName: w.ToolName, URL: w.URL}
	if w.HookEventName == cursorMCP {
		// tool_input arrives as the arguments' JSON text, or as the object.
		args := w.ToolInput
		var text string
		if json.Unmarshal(args, &text) == nil {
			args = json.RawMessage(text)
			if err := jsonstrict.Valid(args, &jsonstrict.Options{MaxBytes: MaxInput}); err != nil {
				return nil, fmt.Errorf("%w: tool_input: %v", ErrBadInput, err)
			}
		}
		if t := strings.TrimSpace(string(args)); t == "" || t[0] != '{' {
			return nil, fmt.Errorf("%w: tool_input is not an object", ErrBadInput)
		}
		ti.ToolInput = args
	}
	b, err := json.Marshal(ti)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return &Input{Agent: Cursor, Session: w.ConversationID, Cwd: cwd, Event: w.HookEventName, ToolName: w.HookEventName, ToolInput: b}, nil
}

func mapCursor(in *Input, p *paths, opts *MapOptions) ([]Call, error) {
	var ti cursorToolInput
	if err := json.Unmarshal(in.ToolInput, &ti); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	switch in.Event {
	case cursorShell:
		if ti.Command == nil {
			return nil, fmt.Errorf("%w: %s has no command", ErrBadInput, in.Event)
		}
		return one("bash", map[string]any{"command": *ti.Command})
	case cursorRead:
		if ti.FilePath == nil {
			return nil, fmt.Errorf("%w: %s has no file_path", ErrBadInput, in.Event)
		}
		f, err := p.resolve(*ti.FilePath)
		if err != nil {
			return nil, err
		}
		return one("read", map[string]any{"path": f})
	case cursorMCP:
		if ti.ToolName == nil || *ti.ToolName == "" {
			return nil, fmt.Errorf("%w: %s has no tool_name", ErrBadInput, in.Event)
		}
		url, command := "", ""
		if ti.URL != nil {
			url = *ti.URL
		}
		if ti.Command != nil {
			command = *ti.Command
		}
		if opts.MCPServer == nil || opts.MCPTool == nil {
			return nil, fmt.Errorf("%w: Cursor's MCP tool %s: no MCP server is behind Backplane", ErrUnmapped, *ti.ToolName)
		}
		server, ok := opts.MCPServer(url, command)
		if !ok {
			return nil, fmt.Errorf("%w: Cursor's MCP tool %s: its server (%s) is not one behind Backplane", ErrUnmapped, *ti.ToolName, strings.TrimSpace(url+" "+command))
		}
		name, ok := opts.MCPTool(server, *ti.ToolName)
		if !ok {
			return nil, fmt.Errorf("%w: Cursor's MCP tool %s: server %q is not behind Backplane", ErrUnmapped, *ti.ToolName, server)
		}
		return []Call{{Tool: name, Arguments: ti.ToolInput}}, nil
	}
	return nil, fmt.Errorf("%w: Cursor's %s", ErrUnmapped, in.Event)
}

// cursorOutput is Cursor's answer: permission, and the reason for the
// user and for the agent.
func cursorOutput(v Verdict, pending Pending) ([]byte, error) {
	o := struct {
		Permission   string `json:"permission"`
		UserMessage  string `json:"user_message,omitempty"`
		AgentMessage string `json:"agent_message,omitempty"`
	}{Permission: "deny", UserMessage: v.Reason, AgentMessage: v.Reason}
	switch {
	case v.Outcome == Allow:
		o.Permission = "allow"
	case v.Outcome == Approve && pending == PendingAsk:
		o.Permission = "ask" // Cursor's own prompt decides instead
	}
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
