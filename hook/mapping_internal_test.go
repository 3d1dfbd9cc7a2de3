package hook

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
)

// TestMappingTables: every row of every agent's table maps a complete
// input onto its built-in, member by member, and refuses an input that
// lacks a required member or gives one that is not a string.
func TestMappingTables(t *testing.T) {
	ws := t.TempDir()
	for agent, table := range map[Agent]map[string]mapping{ClaudeCode: claudeTools, Gemini: geminiTools} {
		for name, m := range table {
			full := map[string]any{}
			for _, mb := range m.members {
				switch mb.kind {
				case file:
					full[mb.from] = "dir/f.txt"
				case dir, cwdOnly:
					full[mb.from] = "dir"
				default:
					full[mb.from] = "v-" + mb.from
				}
			}
			in := func(members map[string]any) *Input {
				b, _ := json.Marshal(members)
				return &Input{Agent: agent, Cwd: ws, Event: "PreToolUse", ToolName: name, ToolInput: b}
			}
			calls, err := Map(in(full), &MapOptions{Workspace: ws})
			if err != nil || len(calls) != 1 || calls[0].Tool != m.tool {
				t.Fatalf("%s %s: %+v %v; want one call of %s", agent, name, calls, err, m.tool)
			}
			var args map[string]string
			if err := json.Unmarshal(calls[0].Arguments, &args); err != nil {
				t.Fatal(err)
			}
			for _, mb := range m.members {
				want := full[mb.from].(string)
				switch mb.kind {
				case file, dir:
					want = filepath.Join(ws, want)
				case cwdOnly:
					if _, ok := args[mb.to]; ok || mb.to != "" {
						t.Errorf("%s %s: %s passed on as %q", agent, name, mb.from, mb.to)
					}
					continue
				}
				if args[mb.to] != want {
					t.Errorf("%s %s: argument %s = %q, want %q", agent, name, mb.to, args[mb.to], want)
				}
			}
			for _, mb := range m.members {
				wrong := map[string]any{}
				for k, v := range full {
					wrong[k] = v
				}
				wrong[mb.from] = 7
				if _, err := Map(in(wrong), &MapOptions{Workspace: ws}); !errors.Is(err, ErrBadInput) {
					t.Errorf("%s %s: %s as a number: %v, want ErrBadInput", agent, name, mb.from, err)
				}
				if mb.kind != text && mb.kind != file {
					continue
				}
				delete(wrong, mb.from)
				if _, err := Map(in(wrong), &MapOptions{Workspace: ws}); !errors.Is(err, ErrBadInput) {
					t.Errorf("%s %s: without %s: %v, want ErrBadInput", agent, name, mb.from, err)
				}
			}
		}
	}
}
