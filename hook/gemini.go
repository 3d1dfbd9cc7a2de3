package hook

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// geminiInput is what the mapping reads of Gemini CLI's tool inputs
// (packages/core/src/tools/definitions/base-declarations.ts).
type geminiInput struct {
	Command        *string `json:"command"`
	DirPath        *string `json:"dir_path"`
	FilePath       *string `json:"file_path"`
	Content        *string `json:"content"`
	OldString      *string `json:"old_string"`
	NewString      *string `json:"new_string"`
	Pattern        *string `json:"pattern"`
	IncludePattern *string `json:"include_pattern"`
	Prompt         *string `json:"prompt"`
}

// urlsIn finds the URLs web_fetch's prompt names: Gemini CLI fetches the
// URLs written in it.
var urlsIn = regexp.MustCompile(`https?://[^\s<>"'()\[\]{}]+`)

func mapGemini(in *Input, p *paths, mcpTool func(server, tool string) (string, bool)) ([]Call, error) {
	if rest, ok := strings.CutPrefix(in.ToolName, "mcp_"); ok {
		return mapGeminiMCP(in, rest, mcpTool)
	}
	var ti geminiInput
	if err := json.Unmarshal(in.ToolInput, &ti); err != nil {
		return nil, fmt.Errorf("%w: %s tool_input: %v", ErrBadInput, in.ToolName, err)
	}
	need := func(field string, v *string) (string, error) {
		if v == nil {
			return "", fmt.Errorf("%w: %s tool_input has no %s", ErrBadInput, in.ToolName, field)
		}
		return *v, nil
	}
	file := func() (string, error) {
		f, err := need("file_path", ti.FilePath)
		if err != nil {
			return "", err
		}
		return p.resolve(f)
	}
	switch in.ToolName {
	case "run_shell_command":
		c, err := need("command", ti.Command)
		if err != nil {
			return nil, err
		}
		// The command runs in dir_path: it too must be inside the
		// workspace, though the policy decides on the command's text.
		if _, err := p.resolveOrCwd(ti.DirPath); err != nil {
			return nil, err
		}
		return one("bash", map[string]any{"command": c})
	case "write_file":
		f, err := file()
		if err != nil {
			return nil, err
		}
		c, err := need("content", ti.Content)
		if err != nil {
			return nil, err
		}
		return one("write", map[string]any{"path": f, "content": c})
	case "replace":
		f, err := file()
		if err != nil {
			return nil, err
		}
		n, err := need("new_string", ti.NewString)
		if err != nil {
			return nil, err
		}
		return one("edit", editArgs(f, n, ti.OldString))
	case "read_file":
		f, err := file()
		if err != nil {
			return nil, err
		}
		return one("read", map[string]any{"path": f})
	case "list_directory":
		d, err := p.resolveOrCwd(ti.DirPath)
		if err != nil {
			return nil, err
		}
		return one("ls", map[string]any{"path": d})
	case "glob", "grep_search":
		pat, err := need("pattern", ti.Pattern)
		if err != nil {
			return nil, err
		}
		d, err := p.resolveOrCwd(ti.DirPath)
		if err != nil {
			return nil, err
		}
		args := map[string]any{"pattern": pat, "path": d}
		if in.ToolName == "glob" {
			return one("glob", args)
		}
		if ti.IncludePattern != nil {
			args["glob"] = *ti.IncludePattern
		}
		return one("grep", args)
	case "web_fetch":
		prompt, err := need("prompt", ti.Prompt)
		if err != nil {
			return nil, err
		}
		urls := urlsIn.FindAllString(prompt, 20+1)
		if len(urls) == 0 || len(urls) > 20 {
			return nil, fmt.Errorf("%w: web_fetch: its prompt names no URL, or more than 20", ErrUnmapped)
		}
		var calls []Call
		for _, u := range urls {
			cs, err := one("url_fetch", map[string]any{"url": strings.TrimRight(u, ".,;:!?")})
			if err != nil {
				return nil, err
			}
			calls = append(calls, cs...)
		}
		return calls, nil
	}
	return nil, fmt.Errorf("%w: Gemini CLI's %s", ErrUnmapped, in.ToolName)
}

// mapGeminiMCP resolves mcp_SERVER_TOOL, where both names may hold "_":
// every split is tried, and exactly one must name a server behind
// Backplane (two would be a guess).
func mapGeminiMCP(in *Input, rest string, mcpTool func(server, tool string) (string, bool)) ([]Call, error) {
	if mcpTool == nil {
		return nil, fmt.Errorf("%w: %s: no MCP server is behind Backplane", ErrUnmapped, in.ToolName)
	}
	var found []string
	for i := 1; i < len(rest)-1; i++ {
		if rest[i] != '_' {
			continue
		}
		if name, ok := mcpTool(rest[:i], rest[i+1:]); ok {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w: %s: no server behind Backplane has this tool", ErrUnmapped, in.ToolName)
	case 1:
		return []Call{{Tool: found[0], Arguments: in.ToolInput}}, nil
	}
	return nil, fmt.Errorf("%w: %s: the name fits more than one server (%s)", ErrUnmapped, in.ToolName, strings.Join(found, ", "))
}
