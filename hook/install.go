package hook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
	if agent == Cursor {
		return installCursor(existing, command)
	}
	if _, ok := Matchers[agent]; !ok {
		return nil, false, fmt.Errorf("%w: %s: installing is for claude-code, codex and cursor; add its hook by hand (docs/agents.md)", ErrUnknownAgent, agent)
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
	if agent == Cursor {
		return checkCursor(data)
	}
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

// CursorEvents are the Cursor hook events an installed hook runs for:
// every one that can refuse a tool use before it runs.
var CursorEvents = []string{cursorShell, cursorRead, cursorMCP}

// readJSONObject is a hook file's top-level object (empty for no file),
// numbers kept as written.
func readJSONObject(existing []byte) (map[string]any, error) {
	root := map[string]any{}
	if len(bytes.TrimSpace(existing)) == 0 {
		return root, nil
	}
	dec := json.NewDecoder(bytes.NewReader(existing))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil || root == nil {
		return nil, fmt.Errorf("%w is not a JSON object: %v", ErrHookConfig, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w holds more than one JSON value", ErrHookConfig)
	}
	return root, nil
}

// installCursor adds command to Cursor's hooks.json (version 1) for each
// of CursorEvents, with failClosed: true so that a hook that fails or
// times out blocks the tool use, as exit 2 does.
func installCursor(existing []byte, command string) ([]byte, bool, error) {
	if strings.TrimSpace(command) == "" {
		return nil, false, errors.New("hook: no command to install")
	}
	root, err := readJSONObject(existing)
	if err != nil {
		return nil, false, err
	}
	if v, ok := root["version"]; ok && fmt.Sprint(v) != "1" {
		return nil, false, fmt.Errorf("%w: version %v, want 1", ErrHookConfig, v)
	}
	root["version"] = 1
	hooks, err := object(root, "hooks")
	if err != nil {
		return nil, false, err
	}
	changed := false
	for _, ev := range CursorEvents {
		list, err := array(hooks, ev)
		if err != nil {
			return nil, false, err
		}
		found := false
		for _, h := range list {
			if hm, ok := h.(map[string]any); ok && hm["command"] == command {
				found = true
			}
		}
		if !found {
			list = append(list, map[string]any{"command": command, "failClosed": true})
			hooks[ev] = list
			changed = true
		}
	}
	if !changed {
		return existing, false, nil
	}
	root["hooks"] = hooks
	out, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, false, err
	}
	return append(out, '\n'), true, nil
}

// checkCursor validates Cursor's hooks.json: version 1, and for each of
// CursorEvents a hook running "backplane hook cursor" with failClosed.
func checkCursor(data []byte) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrHookConfig}, a...)...))
	}
	root, err := readJSONObject(data)
	if err != nil {
		return []error{err}
	}
	if v, ok := root["version"]; !ok || fmt.Sprint(v) != "1" {
		bad("version is %v, want 1", root["version"])
	}
	hooks, ok := root["hooks"].(map[string]any)
	if !ok {
		bad("no hooks object")
		return errs
	}
	for _, ev := range CursorEvents {
		list, ok := hooks[ev].([]any)
		if !ok {
			bad("hooks.%s is not an array: Backplane does not see those tool uses", ev)
			continue
		}
		found := false
		for i, h := range list {
			hm, ok := h.(map[string]any)
			cmd, _ := hm["command"].(string)
			if !ok || strings.TrimSpace(cmd) == "" {
				bad("hooks.%s[%d] has no command", ev, i)
				continue
			}
			if strings.Contains(cmd, "hook "+string(Cursor)) {
				found = true
				if hm["failClosed"] != true {
					bad("hooks.%s[%d] does not set failClosed: true, so Cursor runs the tool when the hook fails", ev, i)
				}
			}
		}
		if !found {
			bad("no hooks.%s hook runs backplane hook cursor", ev)
		}
	}
	return errs
}

// Codex runs a user hook only once it is trusted: its config.toml keeps,
// per hook, the hash of the hook's normalised configuration, as its /hooks
// review writes it:
//
//	[hooks.state."HOOKS_JSON_PATH:pre_tool_use:GROUP:HANDLER"]
//	trusted_hash = "sha256:HEX"
//
// where HEX is the SHA-256 of the compact JSON, keys sorted, of
// {"event_name": "pre_tool_use", "matcher": MATCHER, "hooks": [{"type":
// "command", "command": COMMAND, "timeout": SECONDS, "async": false}]}
// (Codex 0.171.0; TestCodexEndToEnd runs the real CLI on what
// CodexTrust writes, so a Codex that hashes otherwise fails it).

// CodexTrust returns the hooks.state key and the trusted hash of the
// PreToolUse hook running command in hooksJSON, a Codex hooks.json at
// hooksPath (absolute).
func CodexTrust(hooksPath string, hooksJSON []byte, command string) (key, hash string, err error) {
	var f struct {
		Hooks struct {
			PreToolUse []struct {
				Matcher *string          `json:"matcher"`
				Hooks   []map[string]any `json:"hooks"`
			} `json:"PreToolUse"`
		} `json:"hooks"`
	}
	dec := json.NewDecoder(bytes.NewReader(hooksJSON))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrHookConfig, err)
	}
	for gi, g := range f.Hooks.PreToolUse {
		for hi, h := range g.Hooks {
			if h["type"] != "command" || h["command"] != command {
				continue
			}
			handler := map[string]any{"type": "command", "command": command, "async": false, "timeout": json.Number("600")}
			if t, ok := h["timeout"].(json.Number); ok {
				handler["timeout"] = t
			}
			if a, ok := h["async"].(bool); ok {
				handler["async"] = a
			}
			if m, ok := h["statusMessage"].(string); ok {
				handler["statusMessage"] = m
			}
			identity := map[string]any{"event_name": "pre_tool_use", "hooks": []any{handler}}
			if g.Matcher != nil {
				identity["matcher"] = *g.Matcher
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false) // as serde_json writes it
			if err := enc.Encode(identity); err != nil {
				return "", "", err
			}
			sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
			return fmt.Sprintf("%s:pre_tool_use:%d:%d", hooksPath, gi, hi), "sha256:" + hex.EncodeToString(sum[:]), nil
		}
	}
	return "", "", fmt.Errorf("%w: no PreToolUse hook runs %q", ErrHookConfig, command)
}

// hooksStateInline finds a config.toml that keeps hooks or their state
// in a form the line edit of TrustCodexConfig cannot extend safely.
var hooksStateInline = regexp.MustCompile(`(?m)^\s*(state\s*=|hooks\s*=|\[\[?hooks\.state\]\]?\s*$)`)

// TrustCodexConfig returns Codex's config.toml with key trusted at hash,
// and whether anything changed: the trusted_hash of an existing
// [hooks.state."KEY"] table is replaced, or the table is appended. A file
// that writes hooks or their state inline is refused (ErrHookConfig): trust
// the hook from /hooks in Codex instead.
func TrustCodexConfig(existing []byte, key, hash string) ([]byte, bool, error) {
	if hooksStateInline.Match(existing) {
		return nil, false, fmt.Errorf("%w: config.toml writes hooks or hooks.state inline; trust the hook from /hooks in Codex", ErrHookConfig)
	}
	qkey, _ := json.Marshal(key) // a TOML basic string is a JSON string for a path
	header := "[hooks.state." + string(qkey) + "]"
	line := `trusted_hash = "` + hash + `"`
	lines := strings.Split(string(existing), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != header {
			continue
		}
		for j := i + 1; j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "["); j++ {
			if strings.HasPrefix(strings.TrimSpace(lines[j]), "trusted_hash") {
				if strings.TrimSpace(lines[j]) == line {
					return existing, false, nil
				}
				lines[j] = line
				return []byte(strings.Join(lines, "\n")), true, nil
			}
		}
		lines = append(lines[:i+1], append([]string{line}, lines[i+1:]...)...)
		return []byte(strings.Join(lines, "\n")), true, nil
	}
	out := string(existing)
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return []byte(out + "\n" + header + "\n" + line + "\n"), true, nil
}
