package hook_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/hook"
)

func TestInstallMergesAndIsIdempotent(t *testing.T) {
	existing := []byte(`{"model":"opus","n":12345678901234567890,"hooks":{"Stop":[{"hooks":[{"type":"command","command":"say done"}]}],
		"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"lint"}]}]}}`)
	cmd := "/usr/bin/backplane hook claude-code --caller agent"
	out, changed, err := hook.Install(hook.ClaudeCode, existing, cmd)
	if err != nil || !changed {
		t.Fatalf("Install: changed %v, %v", changed, err)
	}
	for _, keep := range []string{`"model": "opus"`, `12345678901234567890`, `"say done"`, `"lint"`, cmd} {
		if !strings.Contains(string(out), keep) {
			t.Errorf("the merged file lost %s:\n%s", keep, out)
		}
	}
	if errs := hook.Check(hook.ClaudeCode, out); len(errs) != 0 {
		t.Errorf("the installed file does not check: %v", errs)
	}
	again, changed, err := hook.Install(hook.ClaudeCode, out, cmd)
	if err != nil || changed || string(again) != string(out) {
		t.Errorf("installing twice changed the file (%v, %v)", changed, err)
	}
	// A new file.
	fresh, changed, err := hook.Install(hook.Codex, nil, "bp hook codex --caller a")
	var v map[string]any
	if err != nil || !changed || json.Unmarshal(fresh, &v) != nil || len(hook.Check(hook.Codex, fresh)) != 0 {
		t.Errorf("a new Codex file: %s, %v", fresh, err)
	}
	for _, bad := range []string{`[]`, `{"hooks":[]}`, `{"hooks":{"PreToolUse":{}}}`, `{} {}`, `nope`} {
		if _, _, err := hook.Install(hook.ClaudeCode, []byte(bad), cmd); !errors.Is(err, hook.ErrHookConfig) {
			t.Errorf("%s: %v, want ErrHookConfig", bad, err)
		}
	}
}

func TestCheckFindsProblems(t *testing.T) {
	cases := map[string]string{
		`{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"bp hook claude-code"}]}]}}`: "does not match Edit",
		`{"hooks":{"PreToolUse":[{"matcher":"(","hooks":[]}]}}`:                                                      "matcher",
		`{"hooks":{"PreToolUse":[{"hooks":[{"type":"command"}]}]}}`:                                                  "no command",
		`{"hooks":{}}`:                "not an array",
		`{"other":1}`:                 "no hooks object",
		`{"hooks":{"PreToolUse":[]}}`: "no PreToolUse hook runs backplane hook claude-code",
	}
	for in, want := range cases {
		errs := hook.Check(hook.ClaudeCode, []byte(in))
		var all []string
		for _, e := range errs {
			all = append(all, e.Error())
		}
		if !strings.Contains(strings.Join(all, "; "), want) {
			t.Errorf("%s: problems %v, want one saying %q", in, all, want)
		}
	}
	ok := `{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"bp hook claude-code --caller a"}]}]}}`
	if errs := hook.Check(hook.ClaudeCode, []byte(ok)); len(errs) != 0 {
		t.Errorf("a matcher of * governs everything: %v", errs)
	}
}

// Cursor's hooks.json: version 1, the command under each event that can
// refuse a tool use, with failClosed; other hooks kept; idempotent.
func TestInstallCursor(t *testing.T) {
	existing := []byte(`{"version":1,"hooks":{"afterFileEdit":[{"command":"./format.sh"}],"beforeShellExecution":[{"command":"./audit.sh"}]}}`)
	cmd := "/usr/bin/backplane hook cursor --caller agent"
	out, changed, err := hook.Install(hook.Cursor, existing, cmd)
	if err != nil || !changed {
		t.Fatalf("Install: changed %v, %v", changed, err)
	}
	var v struct {
		Version int                                 `json:"version"`
		Hooks   map[string][]map[string]interface{} `json:"hooks"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != 1 || len(v.Hooks["afterFileEdit"]) != 1 || len(v.Hooks["beforeShellExecution"]) != 2 {
		t.Errorf("merged file:\n%s", out)
	}
	for _, ev := range hook.CursorEvents {
		l := v.Hooks[ev]
		if h := l[len(l)-1]; h["command"] != cmd || h["failClosed"] != true {
			t.Errorf("%s: %v, want the command with failClosed", ev, l)
		}
	}
	if errs := hook.Check(hook.Cursor, out); len(errs) != 0 {
		t.Errorf("the installed file does not check: %v", errs)
	}
	if again, changed, err := hook.Install(hook.Cursor, out, cmd); err != nil || changed || string(again) != string(out) {
		t.Errorf("installing twice changed the file (%v, %v)", changed, err)
	}
	// A hook without failClosed, or an event left out, is a problem.
	errs := hook.Check(hook.Cursor, []byte(`{"version":1,"hooks":{"beforeShellExecution":[{"command":"`+cmd+`"}]}}`))
	if len(errs) != 3 {
		t.Errorf("Check found %v, want failClosed missing and two events without the hook", errs)
	}
	if _, _, err := hook.Install(hook.Cursor, []byte(`{"version":2}`), cmd); !errors.Is(err, hook.ErrHookConfig) {
		t.Errorf("version 2: %v, want ErrHookConfig", err)
	}
}

// The trust hash of a Codex hook, as the real Codex 0.171.0 accepted it
// (found by running the CLI on candidates: a hook tee-ing its input ran
// with exactly this hash and no other), and the config.toml edit.
func TestCodexTrust(t *testing.T) {
	cmd := "tee -a /root/cx/tr/ran.log >/dev/null"
	hooksJSON := []byte(`{"hooks":{"PreToolUse":[{"matcher":"Bash|apply_patch|mcp__.*","hooks":[{"type":"command","command":"` + cmd + `","timeout":90}]}]}}`)
	key, hash, err := hook.CodexTrust("/h/hooks.json", hooksJSON, cmd)
	if err != nil || key != "/h/hooks.json:pre_tool_use:0:0" || hash != "sha256:027fb5f734482c693ac1c36194ace382268ca393a1b263b9e38f4b089e585231" {
		t.Errorf("CodexTrust = %q %q %v", key, hash, err)
	}
	if _, _, err := hook.CodexTrust("/h/hooks.json", hooksJSON, "other"); !errors.Is(err, hook.ErrHookConfig) {
		t.Errorf("another command: %v", err)
	}
	conf := []byte("model = \"m\"\n")
	out, changed, err := hook.TrustCodexConfig(conf, key, hash)
	want := "model = \"m\"\n\n[hooks.state.\"/h/hooks.json:pre_tool_use:0:0\"]\ntrusted_hash = \"" + hash + "\"\n"
	if err != nil || !changed || string(out) != want {
		t.Fatalf("TrustCodexConfig = %q %v %v", out, changed, err)
	}
	if again, changed, _ := hook.TrustCodexConfig(out, key, hash); changed || string(again) != string(out) {
		t.Errorf("trusting twice changed the file: %q", again)
	}
	if re, changed, _ := hook.TrustCodexConfig(out, key, "sha256:00"); !changed || !strings.Contains(string(re), `trusted_hash = "sha256:00"`) || strings.Contains(string(re), hash) {
		t.Errorf("a changed hook's trust: %q", re)
	}
	if _, _, err := hook.TrustCodexConfig([]byte("[hooks]\nstate = {}\n"), key, hash); !errors.Is(err, hook.ErrHookConfig) {
		t.Errorf("inline state: %v", err)
	}
}
