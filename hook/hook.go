// Package hook lets a coding agent's own tools (its built-in Bash, Edit,
// Write, Read, ...) be decided by Backplane through the agent's PreToolUse
// hook. It reads the agent's hook input, maps the tool use onto the
// policy's vocabulary (the built-in tools' names and arguments, or an
// upstream tool behind Backplane), has each resulting call decided
// (gateway.Gateway.Decide, or anything with its signature), and formats the
// agent's answer. Backplane never runs the tool: the agent does, after an
// allow.
//
// # Mapping
//
// Claude Code (tool_input as its hooks reference documents it; file paths
// arrive absolute):
//
//	Bash {command}                    -> bash {command}
//	Write {file_path, content}        -> write {path, content}
//	Edit {file_path, old_string, new_string}
//	                                  -> edit {path, content: new_string, old_content: old_string}
//	MultiEdit {file_path, edits[]}    -> one edit per element of edits
//	Read {file_path}                  -> read {path}
//	Glob {pattern, path}              -> glob {pattern, path (default: cwd)}
//	Grep {pattern, path, glob}        -> grep {pattern, path (default: cwd), glob}
//	LS {path}                         -> ls {path}
//	WebFetch {url}                    -> url_fetch {url}
//	mcp__SERVER__TOOL {...}           -> Options.MCPTool(SERVER, TOOL), arguments as given
//
// Codex: Bash {command} as above (a command given as an array of words is
// joined, each word quoted for the shell where it needs it); apply_patch,
// whose tool_input.command is the patch text, -> edit on every file the
// patch touches: an added file {path, content: its lines}, a deleted one
// {path, content: ""}, each hunk of an update {path, content: its new
// text, old_content: its old text}, a move's destination {path, content:
// the file's part of the patch}; mcp__SERVER__TOOL as above.
//
// Gemini CLI (its BeforeTool event; names and members from its
// packages/core/src/tools/definitions/base-declarations.ts):
// run_shell_command {command, dir_path} -> bash {command} (dir_path, where
// the command runs, must be inside the workspace); write_file -> write;
// replace {file_path, old_string, new_string} -> edit; read_file -> read;
// list_directory {dir_path} -> ls; glob and grep_search {pattern,
// dir_path, include_pattern} -> glob and grep; web_fetch {prompt} -> one
// url_fetch per URL its prompt names; mcp_SERVER_TOOL -> Options.MCPTool,
// where exactly one split of the name must name a server behind Backplane.
//
// Cursor (hooks.json version 1; see cursor.go): beforeShellExecution
// {command, cwd} -> bash {command}; beforeReadFile {file_path} -> read;
// beforeMCPExecution {tool_name, tool_input, url | command} -> the tool of
// the server Options.MCPServer names from its url or command. Cursor has
// no event before a file edit, so its edits are not decided.
//
// Any other tool is denied (default deny), and so is any input that does
// not parse. A tool use that maps to several calls is decided as one:
// every call is first previewed (gateway.DecideRequest.Preview, which
// creates approval requests but consumes none), the strictest answer wins
// (deny, then approval required, then allow), and only when every call is
// allowed are they decided for real, each journaled as a decision-only
// entry.
//
// # Paths
//
// The hook's cwd must be inside the workspace (Options.Workspace), else
// every tool use is denied. A relative path is taken relative to cwd; every
// path is cleaned, its symbolic links resolved as far as it exists, and
// must stay inside the workspace, else denied (the agent's tool follows
// links; the policy must see where it writes). The call's path is then the
// workspace joined with the path relative to it, which the policy's path
// patterns match.
//
// # Answers
//
// Claude Code: stdout {"hookSpecificOutput": {"hookEventName": "PreToolUse",
// "permissionDecision": "allow"|"deny"|"ask"|"defer",
// "permissionDecisionReason": "..."}}, exit 0. A pending approval answers
// Options.Pending: deny (default; the reason names the request and says to
// ask again once it is approved), ask (Claude Code's own prompt decides
// instead of Backplane's operator) or defer (a -p run stops, resumable).
//
// Codex: an allow prints nothing (Codex enforces only deny: its docs list
// allow and ask as unsupported in PreToolUse, and the tool then runs
// anyway); a deny, and a pending approval, print the same
// hookSpecificOutput with permissionDecision "deny".
//
// Gemini CLI: {"decision": "allow"} or {"decision": "deny", "reason":
// "..."}, which it sends to the model as the tool's error; a pending
// approval is a deny naming the request.
//
// Cursor: {"permission": "allow"|"deny"|"ask", "user_message",
// "agent_message"}; a pending approval is a deny naming the request, or
// ask with PendingAsk.
//
// Formats followed: the Gemini CLI hooks reference
// (https://geminicli.com/docs/hooks/reference, BeforeTool), the Claude Code hooks reference
// (https://code.claude.com/docs/en/hooks, PreToolUse input and decision
// control), and the Codex hooks documentation
// (https://developers.openai.com/codex/hooks) with its generated schemas
// (openai/codex codex-rs/hooks/schema/generated/pre-tool-use.command.input
// and .output.schema.json) and the change that gave apply_patch its
// PreToolUse event with the patch as tool_input.command.
package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// Agent names an agent whose hook format this package knows.
type Agent string

const (
	ClaudeCode Agent = "claude-code"
	Codex      Agent = "codex"
	Gemini     Agent = "gemini"
	Cursor     Agent = "cursor"
)

// Agents lists the agents, in the order the command line shows them.
var Agents = []Agent{ClaudeCode, Codex, Gemini, Cursor}

// event is the hook event each agent decides a tool use in.
func (a Agent) event() string {
	if a == Gemini {
		return "BeforeTool"
	}
	return "PreToolUse"
}

// MaxInput bounds the hook input read (the tool input of a Write carries
// the whole file).
const MaxInput = 16 << 20

// Errors; each is wrapped with the details.
var (
	// ErrBadInput: the hook input is not what the agent documents.
	ErrBadInput = errors.New("hook: bad hook input")
	// ErrUnknownAgent: no such agent.
	ErrUnknownAgent = errors.New("hook: unknown agent")
	// ErrUnmapped: the tool has no counterpart in the policy's vocabulary.
	ErrUnmapped = errors.New("hook: no Backplane tool for this agent tool")
	// ErrOutsideWorkspace: the cwd or a path is outside the workspace.
	ErrOutsideWorkspace = errors.New("hook: outside the workspace")
)

// ParseAgent returns the agent named s.
func ParseAgent(s string) (Agent, error) {
	for _, a := range Agents {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w %q (known: claude-code, codex, gemini, cursor)", ErrUnknownAgent, s)
}

// Input is an agent's PreToolUse hook input.
type Input struct {
	Agent     Agent
	Session   string
	Cwd       string
	Event     string
	ToolName  string
	ToolInput json.RawMessage
}

// wireInput is the members both agents send that this package reads.
type wireInput struct {
	SessionID     string          `json:"session_id"`
	Cwd           string          `json:"cwd"`
	HookEventName string          `json:"hook_event_name"`
	ToolName      string          `json:"tool_name"`
	ToolInput     json.RawMessage `json:"tool_input"`
}

// Parse reads the hook input of agent. Unknown members are ignored (agents
// add them often); the ones read must have their documented types, the
// event must be PreToolUse, and cwd must be absolute.
func Parse(agent Agent, data []byte) (*Input, error) {
	if _, err := ParseAgent(string(agent)); err != nil {
		return nil, err
	}
	if len(data) > MaxInput {
		return nil, fmt.Errorf("%w: over %d bytes", ErrBadInput, MaxInput)
	}
	// Strict JSON first: duplicate members or invalid UTF-8 must not let
	// two readers see two different tool inputs.
	if err := jsonstrict.Valid(data, &jsonstrict.Options{MaxBytes: MaxInput}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	if agent == Cursor {
		return parseCursor(data)
	}
	var w wireInput
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	switch {
	case w.HookEventName != agent.event():
		return nil, fmt.Errorf("%w: hook_event_name is %q, want %s", ErrBadInput, w.HookEventName, agent.event())
	case w.ToolName == "":
		return nil, fmt.Errorf("%w: no tool_name", ErrBadInput)
	case !filepath.IsAbs(w.Cwd):
		return nil, fmt.Errorf("%w: cwd %q is not an absolute path", ErrBadInput, w.Cwd)
	case len(w.ToolInput) == 0 || w.ToolInput[0] != '{':
		return nil, fmt.Errorf("%w: tool_input is not an object", ErrBadInput)
	}
	return &Input{Agent: agent, Session: w.SessionID, Cwd: w.Cwd, Event: w.HookEventName, ToolName: w.ToolName, ToolInput: w.ToolInput}, nil
}

// NamesMCPTool reports whether the tool use is of an MCP server's tool
// (deciding it needs the servers behind Backplane started; nothing else
// does).
func (in *Input) NamesMCPTool() bool {
	if in.Agent == Cursor {
		return in.Event == cursorMCP
	}
	return strings.HasPrefix(in.ToolName, "mcp_") // mcp__S__T, and Gemini's mcp_S_T
}

// Call is one call in the policy's vocabulary.
type Call struct {
	Tool      string
	Arguments json.RawMessage
}

// MapOptions say what the mapping needs beyond the input.
type MapOptions struct {
	// Workspace is the configured workspace (absolute). Required.
	Workspace string
	// MCPTool names the Backplane tool of an agent's mcp__SERVER__TOOL, and
	// reports false when that server is not behind Backplane (denied).
	// Nil: every MCP tool is denied.
	MCPTool func(server, tool string) (string, bool)
	// MCPServer names the configured server a Cursor MCP tool use is
	// of, from the server's URL or command line as Cursor reports them,
	// and reports false for any other (denied). Nil: Cursor's MCP tools
	// are denied.
	MCPServer func(url, command string) (string, bool)
}

// Map turns the tool use of in into the calls that decide it. A nil opts
// or an empty workspace is an error: nothing can be confined then.
func Map(in *Input, opts *MapOptions) ([]Call, error) {
	if opts == nil || !filepath.IsAbs(opts.Workspace) {
		return nil, fmt.Errorf("%w: no absolute workspace is configured", ErrOutsideWorkspace)
	}
	p, err := newPaths(opts.Workspace, in.Cwd)
	if err != nil {
		return nil, err
	}
	if server, tool, ok := mcpName(in.ToolName); ok && in.Agent != Gemini && in.Agent != Cursor {
		if opts.MCPTool == nil {
			return nil, fmt.Errorf("%w: %s: no MCP server is behind Backplane", ErrUnmapped, in.ToolName)
		}
		name, ok := opts.MCPTool(server, tool)
		if !ok {
			return nil, fmt.Errorf("%w: %s: server %q is not behind Backplane", ErrUnmapped, in.ToolName, server)
		}
		return []Call{{Tool: name, Arguments: in.ToolInput}}, nil
	}
	switch in.Agent {
	case ClaudeCode:
		return mapClaude(in, p)
	case Codex:
		return mapCodex(in, p)
	case Gemini:
		return mapGemini(in, p, opts.MCPTool)
	case Cursor:
		return mapCursor(in, p, opts)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownAgent, in.Agent)
}

// mcpName splits mcp__SERVER__TOOL. A server name may not hold "__"; the
// tool's may.
func mcpName(name string) (server, tool string, ok bool) {
	rest, ok := strings.CutPrefix(name, "mcp__")
	if !ok {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, "__")
	return server, tool, ok && server != "" && tool != ""
}

// claudeMultiEdit is what the mapping reads of MultiEdit's input: each
// edit of one file.
type claudeMultiEdit struct {
	Edits []struct {
		OldString *string `json:"old_string"`
		NewString *string `json:"new_string"`
	} `json:"edits"`
}

func mapClaude(in *Input, p *paths) ([]Call, error) {
	ms, err := inputMembers(in)
	if err != nil {
		return nil, err
	}
	if m, ok := claudeTools[in.ToolName]; ok {
		return m.calls(in, ms, p)
	}
	if in.ToolName != "MultiEdit" {
		return nil, fmt.Errorf("%w: Claude Code's %s", ErrUnmapped, in.ToolName)
	}
	// MultiEdit: one edit call per edit, all of one file.
	fp, err := stringMember(in, ms, "file_path")
	if err != nil {
		return nil, err
	}
	if fp == nil {
		return nil, fmt.Errorf("%w: MultiEdit tool_input has no file_path", ErrBadInput)
	}
	f, err := p.resolve(*fp)
	if err != nil {
		return nil, err
	}
	var ti claudeMultiEdit
	if err := json.Unmarshal(in.ToolInput, &ti); err != nil {
		return nil, fmt.Errorf("%w: MultiEdit tool_input: %v", ErrBadInput, err)
	}
	if len(ti.Edits) == 0 {
		return nil, fmt.Errorf("%w: MultiEdit tool_input has no edits", ErrBadInput)
	}
	var calls []Call
	for i, e := range ti.Edits {
		if e.NewString == nil {
			return nil, fmt.Errorf("%w: MultiEdit edit %d has no new_string", ErrBadInput, i)
		}
		cs, err := one("edit", editArgs(f, *e.NewString, e.OldString))
		if err != nil {
			return nil, err
		}
		calls = append(calls, cs...)
	}
	return calls, nil
}

// editArgs are the built-in edit's arguments: an empty old text is the
// whole file replaced, which edit says by leaving old_content out.
func editArgs(path, content string, old *string) map[string]any {
	a := map[string]any{"path": path, "content": content}
	if old != nil && *old != "" {
		a["old_content"] = *old
	}
	return a
}

func one(tool string, args map[string]any) ([]Call, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return []Call{{Tool: tool, Arguments: b}}, nil
}

// codexInput is what the mapping reads of Codex's tool inputs: the shell
// command, or the patch of apply_patch (as command; patch is accepted too).
type codexInput struct {
	Command json.RawMessage `json:"command"`
	Patch   *string         `json:"patch"`
}

func mapCodex(in *Input, p *paths) ([]Call, error) {
	var ti codexInput
	if err := json.Unmarshal(in.ToolInput, &ti); err != nil {
		return nil, fmt.Errorf("%w: %s tool_input: %v", ErrBadInput, in.ToolName, err)
	}
	switch in.ToolName {
	case "Bash", "shell", "exec_command", "local_shell":
		c, err := shellText(ti.Command)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadInput, in.ToolName, err)
		}
		return one("bash", map[string]any{"command": c})
	case "apply_patch":
		var text string
		switch {
		case len(ti.Command) > 0:
			if err := json.Unmarshal(ti.Command, &text); err != nil {
				return nil, fmt.Errorf("%w: apply_patch command is not a string", ErrBadInput)
			}
		case ti.Patch != nil:
			text = *ti.Patch
		default:
			return nil, fmt.Errorf("%w: apply_patch tool_input has no command", ErrBadInput)
		}
		files, err := PatchFiles(text)
		if err != nil {
			return nil, err
		}
		var calls []Call
		for _, f := range files {
			path, err := p.resolve(f.Path)
			if err != nil {
				return nil, err
			}
			// The edit's arguments say what the file becomes, as the
			// built-in edit would take them, so that the approval's diff
			// is the change: an added file's content, a deleted file's
			// nothing, each hunk of an update as its old and new text.
			var args []map[string]any
			switch {
			case f.Op == "add":
				args = append(args, map[string]any{"path": path, "content": f.Added})
			case f.Op == "delete":
				args = append(args, map[string]any{"path": path, "content": ""})
			case f.Op == "update" && len(f.Hunks) > 0:
				for _, h := range f.Hunks {
					old := h.Old
					args = append(args, editArgs(path, h.New, &old))
				}
			default: // a move's destination, an update without hunks: the patch's text
				args = append(args, map[string]any{"path": path, "content": f.Text})
			}
			for _, a := range args {
				cs, err := one("edit", a)
				if err != nil {
					return nil, err
				}
				calls = append(calls, cs...)
			}
		}
		return calls, nil
	}
	return nil, fmt.Errorf("%w: Codex's %s", ErrUnmapped, in.ToolName)
}

// shellText is a command as bash reads it: a string as is, an array of
// words joined with each word quoted where the shell would change it.
func shellText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", errors.New("no command")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var words []string
	if err := json.Unmarshal(raw, &words); err != nil || len(words) == 0 {
		return "", errors.New("command is neither a string nor an array of words")
	}
	for i, w := range words {
		words[i] = ShellQuote(w)
	}
	return strings.Join(words, " "), nil
}

// ShellQuote quotes w for bash where it needs quoting (single quotes).
func ShellQuote(w string) string {
	if w != "" && strings.IndexFunc(w, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' || r == '+' || r == '@' ||
			('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9'))
	}) < 0 {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// paths confines the tool use's paths to the workspace.
type paths struct {
	workspace string // as configured: what the policy relativizes against
	real      string // its symbolic links resolved
	cwd       string // resolved, inside real
}

func newPaths(workspace, cwd string) (*paths, error) {
	real, err := filepath.EvalSymlinks(filepath.Clean(workspace))
	if err != nil {
		return nil, fmt.Errorf("%w: the workspace %s: %v", ErrOutsideWorkspace, workspace, err)
	}
	p := &paths{workspace: filepath.Clean(workspace), real: real}
	rc, err := resolveExisting(filepath.Clean(cwd))
	if err != nil {
		return nil, fmt.Errorf("%w: cwd %s: %v", ErrOutsideWorkspace, cwd, err)
	}
	if !within(real, rc) {
		return nil, fmt.Errorf("%w: the agent's cwd %s is not inside the workspace %s", ErrOutsideWorkspace, cwd, workspace)
	}
	p.cwd = rc
	return p, nil
}

// resolve returns path (relative to cwd) as the workspace joined with its
// resolved place relative to the workspace, or ErrOutsideWorkspace.
func (p *paths) resolve(path string) (string, error) {
	if path == "" || strings.ContainsRune(path, 0) || !utf8.ValidString(path) {
		return "", fmt.Errorf("%w: the path %q is empty or not text", ErrBadInput, path)
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(p.cwd, path)
	}
	r, err := resolveExisting(filepath.Clean(path))
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrOutsideWorkspace, path, err)
	}
	if !within(p.real, r) {
		return "", fmt.Errorf("%w: %s is outside the workspace %s", ErrOutsideWorkspace, path, p.workspace)
	}
	rel, err := filepath.Rel(p.real, r)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrOutsideWorkspace, path, err)
	}
	return filepath.Join(p.workspace, rel), nil
}

func (p *paths) resolveOrCwd(path *string) (string, error) {
	if path == nil || *path == "" {
		return p.resolve(p.cwd)
	}
	return p.resolve(*path)
}

// resolveExisting resolves the symbolic links of the longest part of path
// that exists, and appends the rest: a file about to be created lands
// where its existing parent really is.
func resolveExisting(path string) (string, error) {
	rest := ""
	for cur := path; ; {
		if _, err := os.Lstat(cur); err == nil {
			r, err := filepath.EvalSymlinks(cur)
			if err != nil {
				return "", err
			}
			return filepath.Join(r, rest), nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return path, nil // nothing exists, not even the root: leave it as it is
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// within reports whether path is root or below it (both clean).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
