package hook

import (
	"fmt"
	"regexp"
	"strings"
)

// urlsIn finds the URLs web_fetch's prompt names: Gemini CLI fetches the
// URLs written in it.
var urlsIn = regexp.MustCompile(`https?://[^\s<>"'()\[\]{}]+`)

func mapGemini(in *Input, p *paths, mcpTool func(server, tool string) (string, bool)) ([]Call, error) {
	if rest, ok := strings.CutPrefix(in.ToolName, "mcp_"); ok {
		return mapGeminiMCP(in, rest, mcpTool)
	}
	ms, err := inputMembers(in)
	if err != nil {
		return nil, err
	}
	if m, ok := geminiTools[in.ToolName]; ok {
		return m.calls(in, ms, p)
	}
	if in.ToolName != "web_fetch" {
		return nil, fmt.Errorf("%w: Gemini CLI's %s", ErrUnmapped, in.ToolName)
	}
	// web_fetch fetches the URLs its prompt names: one url_fetch each.
	prompt, err := stringMember(in, ms, "prompt")
	if err != nil {
		return nil, err
	}
	if prompt == nil {
		return nil, fmt.Errorf("%w: web_fetch tool_input has no prompt", ErrBadInput)
	}
	urls := urlsIn.FindAllString(*prompt, 20+1)
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
