package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/policy"
)

// issue11Policy is the policy block of issue 11, verbatim, with the note
// tool it names.
const issue11Policy = `policy:
  - caller: alice                        # exact name or glob, as today
    allow: [read, ls, glob, grep, "bash(git status*)", "bash(go test *)"]
    approve: ["write(docs/**)", "edit(docs/**)", "bash(*)"]
    deny: ["bash(*rm -rf*)", "read(**/.env)", "url_fetch(domain:internal.example)"]
    rules:                               # anything a pattern cannot say, in CEL
      - allow: note
        if: 'size(args.text) < 200 && !args.text.contains("password")'
tools:
  - name: note
    input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    command: [cat]
`

func TestIssue11PolicyParses(t *testing.T) {
	dir := t.TempDir()
	c, err := Parse([]byte(issue11Policy), filepath.Join(dir, "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.CompilePolicy()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool, args, want, rule string
	}{
		{"bash", `{"command":"git status"}`, "allow", ":3"},
		{"bash", `{"command":"git status && touch x"}`, "approve", ":4"},
		{"bash", `{"command":"echo $(rm -rf /)"}`, "deny", ":5"},
		{"read", `{"path":"docs/../.env"}`, "deny", ":5"},
		{"read", `{"path":"` + dir + `/src/x.go"}`, "allow", ":3"},
		{"note", `{"text":"hi"}`, "allow", ":8"},
		{"note", `{"text":"a password"}`, "deny", ""},
	} {
		v, err := jsonstrict.Decode([]byte(tc.args), nil)
		if err != nil {
			t.Fatal(err)
		}
		d := rules.Decide(policy.Request{Caller: "alice", Tool: tc.tool, Args: v})
		if string(d.Effect) != tc.want || !strings.HasSuffix(d.Source, tc.rule) {
			t.Errorf("%s %s = %s at %s (%s), want %s at *%s", tc.tool, tc.args, d.Effect, d.Source, d.Reason, tc.want, tc.rule)
		}
	}
}

func TestPolicyErrorsNameTheLine(t *testing.T) {
	tool := "tools:\n  - name: note\n    input_schema: {type: object}\n    command: [cat]\n"
	for name, tc := range map[string]struct {
		yaml string
		line int
		want string
	}{
		"pattern without main argument": {tool + "policy:\n  - caller: a\n    allow: [read, \"note(x*)\"]\n", 7, "has no main argument"},
		"pattern on unknown tool":       {"policy:\n  - caller: a\n    deny:\n      - read\n      - \"nope(x)\"\n", 5, "no tool is named nope"},
		"CEL on unknown tool":           {"policy:\n  - caller: a\n    rules:\n      - allow: nope\n        if: 'true'\n", 5, "no tool is named nope"},
		"CEL does not compile":          {tool + "policy:\n  - caller: a\n    rules:\n      - allow: note\n        if: 'args.text +'\n", 9, "CEL"},
		"CEL not boolean":               {tool + "policy:\n  - caller: a\n    rules:\n      - allow: note\n        if: 'size(args)'\n", 9, "not bool"},
		"CEL without if":                {tool + "policy:\n  - caller: a\n    rules:\n      - allow: note\n", 8, "needs if"},
		"CEL two effects":               {tool + "policy:\n  - caller: a\n    rules:\n      - allow: note\n        deny: note\n        if: 'true'\n", 9, "not both"},
		"bad path pattern":              {"policy:\n  - caller: a\n    allow: [\"read([x)\"]\n", 3, "bad path pattern"},
		"bad main_arg match":            {"tools:\n  - name: note\n    input_schema: {type: object}\n    command: [cat]\n    main_arg: {name: text, match: regex}\n", 5, "main_arg match"},
		"bad domain":                    {"policy:\n  - caller: a\n    deny: [\"url_fetch(domain:a/b)\"]\n", 3, "not a host name"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "backplane.yaml")
			var ce *Error
			if err == nil || !asError(err, &ce) || ce.Line != tc.line || !strings.Contains(ce.Msg, tc.want) {
				t.Fatalf("error %v, want line %d saying %q", err, tc.line, tc.want)
			}
		})
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

func TestMainArgOfToolsAndServers(t *testing.T) {
	y := `tools:
  - name: note
    input_schema: {type: object}
    command: [cat]
    main_arg: {name: file, match: path}
servers:
  - name: fs
    command: [x]
    main_arg: {name: path, match: text}
  - name: up
    command: [x]
    main_arg: path
policy:
  - caller: a
    allow: ["note(docs/**)", "fs.read_file(/tmp/*)", "up.*"]
    deny: ["up.read_text_file(**/.env)"]
workspace: /ws
`
	c, err := Parse([]byte(y), filepath.Join(t.TempDir(), "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.CompilePolicy()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool  string
		args  map[string]any
		allow bool
	}{
		{"note", map[string]any{"file": "docs/x/../y.md"}, true},
		{"note", map[string]any{"file": "docs/../y.md"}, false},
		{"fs.read_file", map[string]any{"path": "/tmp/a"}, true},
		{"fs.read_file", map[string]any{"path": "/tmp/a/b"}, true}, // text: '*' crosses '/'
		{"fs.read_file", map[string]any{"path": "/etc/a"}, false},
		// main_arg: path without match is a path (issue 25): every
		// spelling of .env is the denied file.
		{"up.read_text_file", map[string]any{"path": ".env"}, false},
		{"up.read_text_file", map[string]any{"path": "/ws/.env"}, false},
		{"up.read_text_file", map[string]any{"path": "docs/../.env"}, false},
		{"up.read_text_file", map[string]any{"path": "docs/a.md"}, true},
	} {
		if d := rules.Decide(policy.Request{Caller: "a", Tool: tc.tool, Args: tc.args}); d.Allow != tc.allow {
			t.Errorf("%s %v: %+v", tc.tool, tc.args, d)
		}
	}
}
