package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/tool"
)

// testdata/example.yaml is the example of the gateway issue, verbatim.
func TestExampleMeansWhatItsCommentsSay(t *testing.T) {
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("testdata")
	if c.Dir != abs {
		t.Errorf("Dir = %q, want %q", c.Dir, abs)
	}
	// store: .backplane, a folder, relative to the file's folder.
	if want := filepath.Join(abs, ".backplane"); c.Store != want {
		t.Errorf("Store = %q, want %q", c.Store, want)
	}

	// policy: alice may call note, danger and fs.*; danger needs approval.
	wantRules := []policy.Rule{{Caller: "alice", Allow: []string{"note", "danger", "fs.*"}, Approve: []string{"danger"},
		Pos: policy.Pos{File: c.Path, Line: 3, Allow: []int{4, 4, 4}, Approve: []int{5}}}}
	if !reflect.DeepEqual(c.Policy, wantRules) {
		t.Errorf("Policy = %+v, want %+v", c.Policy, wantRules)
	}
	rules, err := policy.NewRules(c.Policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caller, tool   string
		allow, mustAsk bool
	}{
		{"alice", "note", true, false},
		{"alice", "danger", true, true},
		{"alice", "fs.read", true, false},
		{"alice", "fs.write", true, false},
		{"alice", "other", false, false},
		{"bob", "note", false, false}, // default deny
	} {
		d := rules.Decide(policy.Request{Caller: tc.caller, Tool: tc.tool})
		if d.Allow != tc.allow || d.RequireApproval != tc.mustAsk {
			t.Errorf("Decide(%s, %s) = allow %v approval %v, want %v %v", tc.caller, tc.tool, d.Allow, d.RequireApproval, tc.allow, tc.mustAsk)
		}
	}

	// approvals: expire 10m, wait 0s (return at once).
	if c.Approvals != (Approvals{Expire: 10 * time.Minute, Wait: 0}) {
		t.Errorf("Approvals = %+v", c.Approvals)
	}

	// budgets: per caller, quota 3, note costs 1 (the default), danger 2.
	one := int64(1)
	wantBudgets := []budget.Quota{{Scope: budget.ScopeCaller, Quota: 3, Cost: map[string]int64{"danger": 2}, Default: &one}}
	if !reflect.DeepEqual(c.Budgets, wantBudgets) {
		t.Errorf("Budgets = %+v, want %+v", c.Budgets, wantBudgets)
	}
	if got := budget.Plan(c.Budgets, "alice", "s1", "danger", time.Now()); !reflect.DeepEqual(got, []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 3, Amount: 2}}) {
		t.Errorf("Plan(danger) = %+v", got)
	}
	if got := budget.Plan(c.Budgets, "alice", "s1", "note", time.Now()); !reflect.DeepEqual(got, []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 3, Amount: 1}}) {
		t.Errorf("Plan(note) = %+v", got)
	}

	// tools: one, note.
	if len(c.Tools) != 1 {
		t.Fatalf("%d tools, want 1", len(c.Tools))
	}
	n := c.Tools[0]
	if n.Name != "note" || n.Description != "Append a note to a log." || n.Line != 14 {
		t.Errorf("tool = %q %q line %d", n.Name, n.Description, n.Line)
	}
	wantCmd := []string{"sh", "-c", `cat >> "$NOTE_LOG"; echo >> "$NOTE_LOG"; echo '{"ok":true}'`}
	if !reflect.DeepEqual(n.Command, wantCmd) {
		t.Errorf("Command = %q, want %q", n.Command, wantCmd)
	}
	if !reflect.DeepEqual(n.Env, []string{"NOTE_LOG"}) {
		t.Errorf("Env = %q", n.Env)
	}
	if n.Timeout != 5*time.Second {
		t.Errorf("Timeout = %v", n.Timeout)
	}
	if n.Safety != (tool.Safety{}) {
		t.Errorf("Safety = %+v", n.Safety)
	}
	if n.Dir != abs {
		t.Errorf("tool Dir = %q, want the file's folder %q", n.Dir, abs)
	}
	if n.MaxOutputBytes != DefaultMaxResultBytes {
		t.Errorf("MaxOutputBytes = %d", n.MaxOutputBytes)
	}
	wantSchema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"text": map[string]any{"type": "string"},
			"n":    map[string]any{"type": "integer", "minimum": json.Number("1")},
		},
		"required":             []any{"text"},
		"additionalProperties": false,
	}
	if !reflect.DeepEqual(n.InputSchema, wantSchema) {
		t.Errorf("InputSchema = %#v\nwant %#v", n.InputSchema, wantSchema)
	}
	// The JSON text keeps the file's key order.
	wantJSON := `{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer","minimum":1}},"required":["text"],"additionalProperties":false}`
	if string(n.InputSchemaJSON) != wantJSON {
		t.Errorf("InputSchemaJSON = %s\nwant %s", n.InputSchemaJSON, wantJSON)
	}
	s, err := inputschema.CompileValue(n.InputSchema, nil)
	if err != nil {
		t.Fatal(err)
	}
	for args, ok := range map[string]bool{
		`{"text":"x"}`:            true,
		`{"text":"x","n":1}`:      true,
		`{}`:                      false, // required: [text]
		`{"text":"x","n":0}`:      false, // minimum: 1
		`{"text":"x","n":1.5}`:    false, // integer
		`{"text":"x","extra":1}`:  false, // additionalProperties: false
		`{"text":["not","text"]}`: false,
	} {
		if err := s.ValidateJSON([]byte(args)); (err == nil) != ok {
			t.Errorf("schema on %s: %v, want ok=%v", args, err, ok)
		}
	}

	// What the file does not say takes the defaults.
	if c.Limits != (Limits{MaxArgumentBytes: 4 << 20, MaxResultBytes: 1 << 20, Timeout: 30 * time.Second}) {
		t.Errorf("Limits = %+v", c.Limits)
	}
	if c.Log != (Log{Level: "info"}) {
		t.Errorf("Log = %+v", c.Log)
	}
}

func TestErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		line int
		msg  string
	}{
		{"unknown top-level key", "store: x\nstroe: y\n", 2, `unknown key "stroe"`},
		{"unknown tool key", "tools:\n  - name: t\n    comand: [cat]\n", 3, `unknown key "comand" in a tool`},
		{"unknown policy key", "policy:\n  - caller: a\n    allows: [x]\n", 3, `unknown key "allows"`},
		{"unknown safety key", "tools:\n  - name: t\n    command: [cat]\n    safety: {read_only: true,\n             readonly: true}\n", 5, `unknown key "readonly"`},
		{"duplicate key", "store: a\nlog: {level: info}\nstore: b\n", 3, `duplicate key "store" (first at line 1)`},
		{"quota as a string", "budgets:\n  - scope: caller\n    quota: \"3\"\n", 3, "quota must be an integer"},
		{"quota as a float", "budgets:\n  - scope: caller\n    quota: 3.0\n", 3, "quota must be an integer"},
		{"policy not a list", "policy: alice\n", 1, "policy must be a list"},
		{"command not a list", "tools:\n  - name: t\n    input_schema: {type: object}\n    command: sh -c x\n", 4, "command must be a list"},
		{"command entry not a string", "tools:\n  - name: t\n    input_schema: {type: object}\n    command:\n      - sh\n      - 1\n", 6, "command entry must be a string"},
		{"safety not a bool", "tools:\n  - name: t\n    command: [cat]\n    safety:\n      read_only: \"yes\"\n", 5, "read_only must be true or false"},
		{"caller not a string", "policy:\n  - caller: 7\n", 2, "caller must be a string"},
		{"duplicate tool", "tools:\n  - name: a\n    input_schema: {type: object}\n    command: [cat]\n  - name: a\n    input_schema: {type: object}\n    command: [cat]\n", 5, "tool a is already defined at line 2"},
		{"bad duration", "approvals:\n  expire: 10 minutes\n", 2, `bad duration "10 minutes"`},
		{"duration without unit", "tools:\n  - name: t\n    command: [cat]\n    input_schema: {type: object}\n    timeout: 5\n", 5, `bad duration "5"`},
		{"negative duration", "approvals:\n  wait: -1s\n", 2, "must not be negative"},
		{"zero expiry", "approvals:\n  wait: 1s\n  expire: 0s\n", 3, "expire must be positive"},
		{"bad glob", "policy:\n  - caller: a\n    allow:\n      - ok\n      - \"fs.[\"\n", 5, `bad pattern "fs.["`},
		{"bad glob in approve", "policy:\n  - caller: a\n    allow: [x]\n    approve: [\"[\"]\n", 4, `bad pattern "["`},
		{"policy without caller", "policy:\n  - allow: [x]\n", 2, "needs a caller"},
		{"unknown scope", "budgets:\n  - quota: 1\n    scope: tenant\n", 3, `unknown budget scope "tenant"`},
		{"negative quota", "budgets:\n  - scope: caller\n    quota: -1\n", 3, "quota -1 must not be negative"},
		{"negative cost", "budgets:\n  - scope: caller\n    quota: 5\n    cost:\n      default: 1\n      danger: -2\n", 6, "the cost of danger is -2"},
		{"budget without quota", "budgets:\n  - scope: caller\n", 2, "needs a quota"},
		{"two quotas of one scope", "budgets:\n  - scope: caller\n    quota: 1\n  - scope: session\n    quota: 1\n  - scope: caller\n    quota: 2\n", 6, "a caller budget is already defined at line 2"},
		{"hex quota", "budgets:\n  - scope: caller\n    quota: 0x10\n", 3, "in decimal"},
		{"negative default_cost", "budgets:\n  - scope: caller\n    quota: 5\n    default_cost: -1\n", 4, "default_cost -1 must not be negative"},
		{"tool without command", "tools:\n  - name: t\n    input_schema: {type: object}\n", 2, "tool t needs a command"},
		{"empty command", "tools:\n  - name: t\n    input_schema: {type: object}\n    command: []\n", 4, "command must name a program"},
		{"tool without name", "tools:\n  - command: [cat]\n    input_schema: {type: object}\n", 2, "a tool needs a name"},
		{"bad tool name", "tools:\n  - name: two words\n", 2, `tool name "two words"`},
		{"tool without schema", "tools:\n  - name: t\n    command: [cat]\n", 2, "tool t needs an input_schema"},
		{"refused schema", "tools:\n  - name: t\n    command: [cat]\n    input_schema:\n      type: object\n      properties:\n        s: {type: string, pattern: \"^a\"}\n", 4, "tool t: input_schema: "},
		{"schema not an object", "tools:\n  - name: t\n    command: [cat]\n    input_schema: [1, 2]\n", 4, "tool t: input_schema: "},
		{"infinite minimum", "tools:\n  - name: t\n    command: [cat]\n    input_schema:\n      type: object\n      properties:\n        n: {type: number,\n            minimum: .inf}\n", 8, "the number .inf cannot be written exactly in JSON"},
		{"non-string schema key", "tools:\n  - name: t\n    command: [cat]\n    input_schema:\n      type: object\n      properties:\n        1: {type: string}\n", 7, "a key must be a string, not the integer 1"},
		{"duplicate schema key", "tools:\n  - name: t\n    command: [cat]\n    input_schema:\n      type: object\n      type: string\n", 6, `duplicate key "type" (first at line 5)`},
		{"bad env name", "tools:\n  - name: t\n    command: [cat]\n    env:\n      - OK\n      - NOT-OK\n", 6, `"NOT-OK" is not an environment variable name`},
		{"unsupported store URL", "store: mysql://db/x\n", 1, "only folders and postgres:// URLs"},
		{"empty store", "store: \"\"\n", 1, "store must name a folder"},
		{"bad log level", "log:\n  level: loud\n", 2, `log level "loud"`},
		{"zero limit", "limits:\n  max_result_bytes: 0\n", 2, "must be a positive number of bytes"},
		{"unknown key holding an anchor", "base: &b {store: x}\n", 1, `unknown key "base"`},
		{"merge key in a tool", "tools:\n  - name: t\n    <<: {command: [cat]}\n", 3, "merge keys (<<) are not supported"},
		{"top level not a mapping", "- store: x\n", 1, "the configuration must be a mapping"},
		{"second document", "store: a\n---\nstore: b\n", 2, "a second YAML document"}, // the line of ---
		{"syntax: tab", "policy:\n\t- caller: a\n", 2, "invalid YAML"},
		{"syntax: unclosed list", "store: a\nlog: {level: info}\ntools: [a, b\n", 3, "invalid YAML"},
		{"syntax: unclosed list, more after", "store: a\ntools: [a, b\nlog: {level: info}\n", 2, "invalid YAML"},
		{"syntax: unknown alias", "store: a\nlog: *nowhere\n", 2, "unknown anchor"},
		{"syntax: bad indentation", "policy:\n  - caller: a\n    allow: [x]\n   approve: [y]\n", 4, "invalid YAML"},
		// yaml.v3 gives this one no line; the parser finds it.
		{"syntax: no line from yaml", "store: a\nlog: {level: info}\napprovals: expire: 1m\n", 3, "mapping values are not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "backplane.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *config.Error", err, err)
			}
			if ce.File != "backplane.yaml" || ce.Line != tc.line {
				t.Errorf("error at %s:%d, want backplane.yaml:%d (%v)", ce.File, ce.Line, tc.line, err)
			}
			prefix := "backplane.yaml:" + itoa(tc.line) + ": "
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("message %q does not start with %q", err, prefix)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q does not say %q", err, tc.msg)
			}
		})
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestSchemaErrorCarriesTheValidatorsReason(t *testing.T) {
	src := "tools:\n  - name: t\n    command: [cat]\n    input_schema:\n      type: object\n      properties:\n        s: {type: string, pattern: \"^a\"}\n"
	_, err := Parse([]byte(src), "b.yaml")
	if err == nil {
		t.Fatal("accepted a schema with pattern")
	}
	// The same schema given to the validator directly: the configuration
	// error must carry its message.
	_, want := inputschema.Compile([]byte(`{"type":"object","properties":{"s":{"type":"string","pattern":"^a"}}}`), nil)
	if want == nil {
		t.Fatal("the validator accepts pattern; pick another refused keyword for this test")
	}
	if !strings.Contains(err.Error(), want.Error()) {
		t.Errorf("error %q does not carry the validator's %q", err, want)
	}
}

func TestRelativePathsResolveAgainstTheFilesFolder(t *testing.T) {
	src := "log: {file: logs/audit.log}\ntools:\n" +
		"  - name: a\n    command: [./run.sh]\n    input_schema: {type: object}\n" +
		"  - name: b\n    command: [cat]\n    dir: work\n    input_schema: {type: object}\n" +
		"  - name: c\n    command: [cat]\n    dir: /abs/where\n    input_schema: {type: object}\n"
	c, err := Parse([]byte(src), "/etc/bp/backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Dir != "/etc/bp" || c.Store != "/etc/bp/.backplane" {
		t.Errorf("Dir %q, Store %q", c.Dir, c.Store)
	}
	if c.Log.File != "/etc/bp/logs/audit.log" {
		t.Errorf("Log.File = %q", c.Log.File)
	}
	if c.Tools[0].Dir != "/etc/bp" || c.Tools[1].Dir != "/etc/bp/work" || c.Tools[2].Dir != "/abs/where" {
		t.Errorf("tool dirs %q %q %q", c.Tools[0].Dir, c.Tools[1].Dir, c.Tools[2].Dir)
	}

	for store, want := range map[string]string{
		"state":                       "/etc/bp/state",
		"../var/bp":                   "/etc/var/bp",
		"/var/lib/bp":                 "/var/lib/bp",
		"postgres://u:p@db/backplane": "postgres://u:p@db/backplane",
	} {
		c, err := Parse([]byte("store: "+store+"\n"), "/etc/bp/backplane.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if c.Store != want {
			t.Errorf("store %s -> %q, want %q", store, c.Store, want)
		}
	}

	// A relative file name is relative to the working folder.
	wd, _ := os.Getwd()
	c, err = Parse(nil, filepath.Join("sub", "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, "sub", ".backplane"); c.Store != want {
		t.Errorf("Store = %q, want %q", c.Store, want)
	}
}

func TestEmptyFileIsAllDefaultsAndDeniesEverything(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "~\n", "policy:\ntools:\n"} {
		c, err := Parse([]byte(src), "/x/backplane.yaml")
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if c.Store != "/x/.backplane" || c.Approvals.Expire != 10*time.Minute || c.Approvals.Wait != 0 {
			t.Errorf("%q: defaults %+v", src, c)
		}
		if len(c.Policy) != 0 || len(c.Tools) != 0 || len(c.Budgets) != 0 {
			t.Errorf("%q: not empty: %+v", src, c)
		}
	}
}

func TestSchemaNumbersAndScalarsAreExact(t *testing.T) {
	src := `tools:
  - name: t
    command: [cat]
    input_schema:
      type: object
      description: yes
      properties:
        a: {type: number, minimum: 1.0}
        b: {type: number, minimum: 2.50e-3}
        c: {type: integer, minimum: 123456789012345678901234567890}
        d: {type: integer, minimum: +7}
        e: {type: integer, minimum: 0x1F}
        f: {type: integer, minimum: -0o17}
        "on": {type: boolean, description: 'on'}
        off: {type: string, description: "123"}
        "y": {type: string, description: 2001-12-14}
        g: {type: string, description: <b>&amp;</b>}
`
	c, err := Parse([]byte(src), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tool := c.Tools[0]
	props := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
	for name, want := range map[string]json.Number{
		"a": "1.0", "b": "2.50e-3", "c": "123456789012345678901234567890", "d": "7", "e": "31", "f": "-15",
	} {
		if got := props[name].(map[string]any)["minimum"]; got != want {
			t.Errorf("%s: minimum = %#v, want json.Number(%q)", name, got, want)
		}
	}
	if d := tool.InputSchema.(map[string]any)["description"]; d != "yes" {
		t.Errorf("description: yes became %#v", d)
	}
	for name, want := range map[string]string{"on": "on", "off": "123", "y": "2001-12-14", "g": "<b>&amp;</b>"} {
		p, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("no property %q (keys must stay the strings written)", name)
			continue
		}
		if p["description"] != want {
			t.Errorf("%s: description = %#v, want %q", name, p["description"], want)
		}
	}
	wantJSON := `{"type":"object","description":"yes","properties":{` +
		`"a":{"type":"number","minimum":1.0},"b":{"type":"number","minimum":2.50e-3},` +
		`"c":{"type":"integer","minimum":123456789012345678901234567890},"d":{"type":"integer","minimum":7},` +
		`"e":{"type":"integer","minimum":31},"f":{"type":"integer","minimum":-15},` +
		`"on":{"type":"boolean","description":"on"},"off":{"type":"string","description":"123"},` +
		`"y":{"type":"string","description":"2001-12-14"},"g":{"type":"string","description":"<b>&amp;</b>"}}}`
	if string(tool.InputSchemaJSON) != wantJSON {
		t.Errorf("InputSchemaJSON =\n%s\nwant\n%s", tool.InputSchemaJSON, wantJSON)
	}
	// The exact minimum is the one enforced: 1.0 admits 1, 2.50e-3 refuses 0.0024.
	s, err := inputschema.Compile(tool.InputSchemaJSON, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ValidateJSON([]byte(`{"a":1,"b":0.0025}`)); err != nil {
		t.Error(err)
	}
	if err := s.ValidateJSON([]byte(`{"b":0.0024}`)); err == nil {
		t.Error("b = 0.0024 accepted under minimum 2.50e-3")
	}
	if err := s.ValidateJSON([]byte(`{"c":123456789012345678901234567889}`)); err == nil {
		t.Error("c one below its exact minimum accepted")
	}
}

func TestAliasesAreExpandedWithinABound(t *testing.T) {
	src := "tools:\n  - name: a\n    command: [cat]\n    input_schema: &s {type: object, properties: {x: {type: string}}}\n" +
		"  - name: b\n    command: [cat]\n    input_schema: *s\n"
	c, err := Parse([]byte(src), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Tools[0].InputSchemaJSON) != string(c.Tools[1].InputSchemaJSON) || !strings.Contains(string(c.Tools[1].InputSchemaJSON), `"x":{"type":"string"}`) {
		t.Errorf("alias not expanded: %s vs %s", c.Tools[0].InputSchemaJSON, c.Tools[1].InputSchemaJSON)
	}

	// Nine levels of ten aliases each would be 10^9 nodes.
	var b strings.Builder
	b.WriteString("x0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n")
	for i := 1; i < 9; i++ {
		p := "*a" + itoa(i-1)
		b.WriteString("x" + itoa(i) + ": &a" + itoa(i) + " [" + strings.Repeat(p+", ", 9) + p + "]\n")
	}
	bomb := "tools:\n  - name: t\n    command: [cat]\n    input_schema:\n      type: object\n      description: ok\n      properties:\n" +
		indent(b.String(), "        ") + "        z: {type: string, description: *a8}\n"
	_, err = Parse([]byte(bomb), "b.yaml")
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("alias bomb: %v", err)
	}
	// The refusal must come before the expansion does the work: counted
	// in allocations, which the machine's load does not change (a clock
	// would). Expanding even one level of the bomb fully is 10^9 nodes.
	allocs := testing.AllocsPerRun(1, func() { _, _ = Parse([]byte(bomb), "b.yaml") })
	t.Logf("refusing the alias bomb: %.0f allocations", allocs)
	if allocs > 100_000 {
		t.Errorf("refusing the alias bomb took %.0f allocations: the bound is applied too late", allocs)
	}
}

func indent(s, pre string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pre + l
		}
	}
	return strings.Join(lines, "")
}

func TestLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bp.yaml")
	if err := os.WriteFile(path, []byte("store: a\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2: ") {
		t.Errorf("Load error %v, want it to start with %s:2:", err, path)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestFullFileOfEveryKey(t *testing.T) {
	src := `store: /var/lib/bp
policy:
  - caller: ops
    allow: ["*"]
approvals: {expire: 1h, wait: 30s}
budgets:
  - scope: session
    quota: 0
limits: {max_argument_bytes: 1000, max_result_bytes: 2000, timeout: 1m}
log: {level: debug, file: /var/log/bp.log}
tools:
  - name: fs.read
    description: Read.
    input_schema: {type: object}
    command: [cat]
    env: [HOME, LANG]
    dir: /srv
    max_output_bytes: 500
    safety: {read_only: true, idempotent: true, requires_approval: true}
  - name: t2
    input_schema: {type: object}
    command: [cat]
`
	c, err := Parse([]byte(src), "/x/bp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Approvals != (Approvals{Expire: time.Hour, Wait: 30 * time.Second}) {
		t.Errorf("Approvals = %+v", c.Approvals)
	}
	if !reflect.DeepEqual(c.Budgets, []budget.Quota{{Scope: budget.ScopeSession, Quota: 0}}) {
		t.Errorf("Budgets = %+v", c.Budgets)
	}
	if c.Limits != (Limits{MaxArgumentBytes: 1000, MaxResultBytes: 2000, Timeout: time.Minute}) {
		t.Errorf("Limits = %+v", c.Limits)
	}
	if c.Log != (Log{Level: "debug", File: "/var/log/bp.log"}) {
		t.Errorf("Log = %+v", c.Log)
	}
	a, b := c.Tools[0], c.Tools[1]
	if a.Name != "fs.read" || a.Dir != "/srv" || a.MaxOutputBytes != 500 || a.Timeout != time.Minute ||
		a.Safety != (tool.Safety{ReadOnly: true, Idempotent: true, RequiresApproval: true}) ||
		!reflect.DeepEqual(a.Env, []string{"HOME", "LANG"}) {
		t.Errorf("tool a = %+v", a)
	}
	// Defaults from limits.
	if b.Timeout != time.Minute || b.MaxOutputBytes != 2000 || b.Description != "" || b.Env != nil {
		t.Errorf("tool b = %+v", b)
	}
}

// The default cost has its own field: `cost: {default: N}` still sets it,
// and with default_cost given, "default" in cost is the tool of that name.
func TestBudgetDefaultCost(t *testing.T) {
	for _, tc := range []struct {
		name, yaml        string
		wantDefault       *int64
		wantCost          map[string]int64
		defaultTool, rest int64
	}{
		{"cost default is the default", "budgets:\n  - scope: caller\n    quota: 9\n    cost: {default: 0, danger: 2}\n",
			ptr(0), map[string]int64{"danger": 2}, 0, 0},
		{"default_cost key", "budgets:\n  - scope: caller\n    quota: 9\n    default_cost: 3\n",
			ptr(3), nil, 3, 3},
		{"a tool named default", "budgets:\n  - scope: caller\n    quota: 9\n    cost: {default: 5}\n    default_cost: 2\n",
			ptr(2), map[string]int64{"default": 5}, 5, 2},
		{"a tool named default, default_cost first", "budgets:\n  - scope: caller\n    quota: 9\n    default_cost: 2\n    cost: {default: 5}\n",
			ptr(2), map[string]int64{"default": 5}, 5, 2},
		{"no default", "budgets:\n  - scope: caller\n    quota: 9\n    cost: {danger: 2}\n",
			nil, map[string]int64{"danger": 2}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml), "backplane.yaml")
			if err != nil {
				t.Fatal(err)
			}
			q := c.Budgets[0]
			if !reflect.DeepEqual(q.Default, tc.wantDefault) || !reflect.DeepEqual(q.Cost, tc.wantCost) && len(q.Cost)+len(tc.wantCost) > 0 {
				t.Errorf("Default %v Cost %v, want %v %v", q.Default, q.Cost, tc.wantDefault, tc.wantCost)
			}
			if q.CostOf("default") != tc.defaultTool || q.CostOf("other") != tc.rest {
				t.Errorf("CostOf(default) %d CostOf(other) %d, want %d %d", q.CostOf("default"), q.CostOf("other"), tc.defaultTool, tc.rest)
			}
		})
	}
}

func ptr(n int64) *int64 { return &n }
