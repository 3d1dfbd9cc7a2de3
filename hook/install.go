package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Matchers are the PreToolUse matchers an installed hook uses: every tool
// the mapping knows (see the package doc), and the MCP tools.
var Matchers = map[Agent]string{
	ClaudeCode: "Bash|Edit|Write|MultiEdit|Read|Glob|Grep|LS|WebFetch|mcp__.*",
	Codex:      "Bash|apply_patch|mcp__.*",
}

// governed are the tools a matcher must match for the hook to govern the
// agent's own file and shell tools.
var governed = map[Agent][]string{
	ClaudeCode: {"Bash", "Edit", "Write", "MultiEdit", "Read", "WebFetch", "mcp__x__y"},
	Codex:      {"Bash", "apply_patch", "mcp__x__y"},
}

// ErrHookConfig: the agent's hook configuration is not what it reads.
var ErrHookConfig = errors.New("hook: the hook configuration")

// HookTimeout is the timeout, in seconds, of an installed hook: above the
// command's own --timeout (20s by default) and the longest approval wait
// (50s), so that the agent never kills a hook that would have answered.
const HookTimeout = 90

// Install returns the agent's hook configuration (Claude Code's
// settings.json, Codex's hooks.json: the same "hooks" shape) with a
// PreToolUse command hook running command added, and whether anything
// changed. Every other member of the file is kept (JSON has no comments to
// keep; the members are written in sorted order). A file that already has
// a hook with exactly this command is returned unchanged.
func Install(agent Agent, existing []byte, command string) ([]byte, bool, error) {
	if _, ok := Matchers[agent]; !ok {
		return nil, false, fmt.Errorf("%w: %s: installing is for claude-code and codex; add its hook by hand (docs/agents.md)", ErrUnknownAgent, agent)
	}
	if strings.TrimSpace(command) == "" {
		return nil, false, errors.New("hook: no command to install")
	}
	root := map[string]any{}
	if len(bytes.TrimSpace(existing)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(existing))
		dec.UseNumber() // numbers kept exactly as written
		if err := dec.Decode(&root); err != nil || root == nil {
			return nil, false, fmt.Errorf("%w is not a JSON object: %v", ErrHookConfig, err)
		}
		if dec.More() {
			return nil, false, fmt.Errorf("%w holds more than one JSON value", ErrHookConfig)
		}
	}
	hooks, err := object(root, "hooks")
	if err != nil {
		return nil, false, err
	}
	pre, err := array(hooks, "PreToolUse")
	if err != nil {
		return nil, false, err
	}
	for _, g := range pre {
		if hasCommand(g, command) {
			return existing, false, nil
		}
	}
	pre = append(pre, map[string]any{
		"matcher": Matchers[agent],
		"hooks":   []any{map[string]any{"type": "command", "command": command, "timeout": HookTimeout}},
	})
	hooks["PreToolUse"] = pre
	root["hooks"] = hooks
	out, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, false, err
	}
	return append(out, '\n'), true, nil
}

// Check validates an agent's hook configuration as far as this package
// knows the agent's rules (Claude Code ignores a settings file that fails
// validation, and every hook in it): a JSON object whose hooks.PreToolUse
// groups have a string matcher that compiles and hooks of type command
// with a command, one of which runs "backplane hook AGENT" under a matcher
// that matches every governed tool. It returns every problem found.
func Check(agent Agent, data []byte) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrHookConfig}, a...)...))
	}
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil || root == nil {
		bad("not a JSON object: %v", err)
		return errs
	}
	hooks, ok := root["hooks"].(map[string]any)
	if !ok {
		bad("no hooks object")
		return errs
	}
	pre, ok := hooks["PreToolUse"].([]any)
	if !ok {
		bad("hooks.PreToolUse is not an array")
		return errs
	}
	found := false
	for i, g := range pre {
		gm, ok := g.(map[string]any)
		if !ok {
			bad("hooks.PreToolUse[%d] is not an object", i)
			continue
		}
		matcher := ""
		if m, ok := gm["matcher"]; ok {
			if matcher, ok = m.(string); !ok {
				bad("hooks.PreToolUse[%d].matcher is not a string", i)
				continue
			}
		}
		re, err := compileMatcher(matcher)
		if err != nil {
			bad("hooks.PreToolUse[%d].matcher %q: %v", i, matcher, err)
			continue
		}
		hs, ok := gm["hooks"].([]any)
		if !ok {
			bad("hooks.PreToolUse[%d].hooks is not an array", i)
			continue
		}
		for j, h := range hs {
			hm, ok := h.(map[string]any)
			if !ok || hm["type"] != "command" {
				if !ok || hm["type"] == nil {
					bad("hooks.PreToolUse[%d].hooks[%d] has no type", i, j)
				}
				continue
			}
			cmd, ok := hm["command"].(string)
			if !ok || strings.TrimSpace(cmd) == "" {
				bad("hooks.PreToolUse[%d].hooks[%d] has no command", i, j)
				continue
			}
			if !strings.Contains(cmd, "hook "+string(agent)) {
				continue
			}
			found = true
			for _, tool := range governed[agent] {
				if !re.MatchString(tool) {
					bad("hooks.PreToolUse[%d].matcher %q does not match %s: Backplane does not see those tool uses", i, matcher, tool)
				}
			}
		}
	}
	if !found {
		bad("no PreToolUse hook runs backplane hook %s", agent)
	}
	return errs
}

// compileMatcher compiles a matcher as the agents read it: empty or "*"
// matches every tool, anything else is a regular expression matched
// against the whole name.
func compileMatcher(m string) (*regexp.Regexp, error) {
	if m == "" || m == "*" {
		return regexp.MustCompile(`.*`), nil
	}
	return regexp.Compile(`^(?:` + m + `)$`)
}

func hasCommand(group any, command string) bool {
	g, ok := group.(map[string]any)
	if !ok {
		return false
	}
	hs, _ := g["hooks"].([]any)
	for _, h := range hs {
		if hm, ok := h.(map[string]any); ok && hm["command"] == command {
			return true
		}
	}
	return false
}

func object(m map[string]any, key string) (map[string]any, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return map[string]any{}, nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an object", ErrHookConfig, key)
	}
	return o, nil
}

func array(m map[string]any, key string) ([]any, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, nil
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: hooks.%s is not an array", ErrHookConfig, key)
	}
	return a, nil
}
