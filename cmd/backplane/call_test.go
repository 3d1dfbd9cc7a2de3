package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/canonjson"
)

// The gateway verbs are tested through the built binary (see TestMain in
// main_test.go), each test in its own folder holding a backplane.yaml and
// the SQLite store, with real command backends (sh) recording what they
// were given.

// issueExample is the configuration of the gateway issue, as written there.
const issueExample = `store: .backplane              # a folder (SQLite, the embedded default) or a postgres:// URL
policy:                        # default deny; entries are exact names or path.Match globs
  - caller: alice
    allow: [note, danger, "fs.*"]
    approve: [danger]          # these calls need an approval first
approvals:
  expire: 10m
  wait: 0s                     # 0s: return at once with approval_required and the request id
budgets:
  - scope: caller              # caller | session
    quota: 3
    cost: {default: 1, danger: 2}
tools:
  - name: note
    description: Append a note to a log.
    input_schema:
      type: object
      properties: {text: {type: string}, n: {type: integer, minimum: 1}}
      required: [text]
      additionalProperties: false
    command: [sh, -c, 'cat >> "$NOTE_LOG"; echo >> "$NOTE_LOG"; echo ''{"ok":true}''']
    env: [NOTE_LOG]            # variables passed through; the rest of the environment is not
    timeout: 5s
    safety: {read_only: false, idempotent: false}
`

// testConfig extends the example: a danger tool under approval, a tool that
// prints garbage, one that never answers, a larger quota, and bob, who may
// call nothing but decides approvals.
const testConfig = `store: .backplane
policy:
  - caller: alice
    allow: [note, danger, garbage, hang]
    approve: [danger]
approvals:
  expire: 10m
  wait: 0s
budgets:
  - scope: caller
    quota: 20
    cost: {default: 1, danger: 2, hang: 3}
tools:
  - name: note
    description: Append a note to a log.
    input_schema:
      type: object
      properties: {text: {type: string}, n: {type: integer, minimum: 1}}
      required: [text]
      additionalProperties: false
    command: [sh, -c, 'cat >> "$NOTE_LOG"; echo >> "$NOTE_LOG"; echo ''{"ok":true}''']
    env: [NOTE_LOG]
    timeout: 5s
    safety: {read_only: false, idempotent: false}
  - name: danger
    description: Append a note to the log, after someone approves.
    input_schema:
      type: object
      properties: {text: {type: string}}
      required: [text]
      additionalProperties: false
    command: [sh, -c, 'cat >> "$NOTE_LOG"; echo >> "$NOTE_LOG"; echo ''{"done":true}''']
    env: [NOTE_LOG]
    timeout: 5s
  - name: garbage
    description: Prints something that is not JSON.
    input_schema: {type: object}
    command: [sh, -c, 'cat >> "$NOTE_LOG"; echo >> "$NOTE_LOG"; echo "this is not json"']
    env: [NOTE_LOG]
    timeout: 5s
  - name: hang
    description: Never answers.
    input_schema: {type: object}
    command: [sh, -c, 'cat >> "$NOTE_LOG"; echo >> "$NOTE_LOG"; exec sleep 30']
    env: [NOTE_LOG]
    timeout: 1s
`

// gwDir is a working folder with a configuration, and the log its tools
// write their stdin to.
type gwDir struct {
	dir     string
	noteLog string
	env     []string
}

func newGWDir(t *testing.T, config string) *gwDir {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "backplane.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &gwDir{dir: dir, noteLog: filepath.Join(dir, "notes.log")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTE_LOG=") && !strings.HasPrefix(kv, "BACKPLANE_CONFIG=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			g.env = append(g.env, kv)
		}
	}
	// The working folder is never searched for a configuration: the
	// operator names it (finding 2 of issue 12); the user's folder is an
	// empty one of the test's.
	g.env = append(g.env, "NOTE_LOG="+g.noteLog, "BACKPLANE_CONFIG="+filepath.Join(dir, "backplane.yaml"),
		"XDG_CONFIG_HOME="+t.TempDir())
	return g
}

// command is the binary with args, run in the folder.
func (g *gwDir) command(stdin string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Dir = g.dir
	cmd.Env = g.env
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

func (g *gwDir) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := g.command(stdin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	return finish(t, cmd.Run(), &out, &errOut, args)
}

func finish(t *testing.T, err error, out, errOut *bytes.Buffer, args []string) result {
	t.Helper()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("running backplane %v: %v", args, err)
		}
		code = exit.ExitCode()
	}
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// runJSON runs a verb with --json, checks the exit code and that stderr is
// empty (audit events go to the audit log), and decodes the answer.
func (g *gwDir) runJSON(t *testing.T, code int, stdin string, args ...string) map[string]any {
	t.Helper()
	r := g.run(t, stdin, append(args, "--json")...)
	r.wantCode(t, code)
	if rest := withoutStartProgress(r.stderr); rest != "" {
		t.Errorf("backplane %v wrote to stderr:\n%s", args, rest)
	}
	return decodeObject(t, r.stdout)
}

// startProgress is the line a verb that starts servers prints to stderr
// while one takes longer than a few seconds (assemble's startProgressLine):
// the one thing a --json verb may write there, seen whenever a loaded
// machine starts an npm server slowly.
var startProgress = regexp.MustCompile(`(?m)^still starting server \S+( \([^)]*\))?: \S+ of connect_timeout \S+\n`)

func withoutStartProgress(stderr string) string {
	return startProgress.ReplaceAllString(stderr, "")
}

// notes is what the tools were given on stdin, one line per invocation.
func (g *gwDir) notes(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(g.noteLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// callError checks a refused call's --json answer and returns its error.
func callError(t *testing.T, m map[string]any, class string) map[string]any {
	t.Helper()
	if m["ok"] != false {
		t.Fatalf("ok = %v, want false: %v", m["ok"], m)
	}
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("error is %T, want an object: %v", m["error"], m)
	}
	if e["class"] != class {
		t.Fatalf("class %v, want %s: %v", e["class"], class, e)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Errorf("error without a message: %v", e)
	}
	if _, ok := e["details"].(map[string]any); !ok {
		t.Errorf("details is %T, want an object: %v", e["details"], e)
	}
	return e
}

// callOK checks a successful call's --json answer and returns its call id.
func callOK(t *testing.T, m map[string]any) string {
	t.Helper()
	if m["ok"] != true {
		t.Fatalf("ok = %v, want true: %v", m["ok"], m)
	}
	id, _ := m["call_id"].(string)
	if !strings.HasPrefix(id, "call_") {
		t.Fatalf("call_id %q", m["call_id"])
	}
	return id
}

func digest(t *testing.T, args string) string {
	t.Helper()
	d, err := canonjson.Digest([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func details(e map[string]any) map[string]any {
	d, _ := e["details"].(map[string]any)
	return d
}

// TestCallIssueExample runs the issue's configuration as written: a call
// runs its command with the exact argument bytes on stdin and prints the
// command's result; the quota of 3 admits three calls and refuses the
// fourth before its command runs.
func TestCallIssueExample(t *testing.T) {
	g := newGWDir(t, issueExample)
	args := `{ "text" : "hi",  "n": 2 }` // odd spacing: passed on byte for byte
	m := g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", args)
	callOK(t, m)
	if got := string(mustJSON(t, m["result"])); got != `{"ok":true}` {
		t.Errorf("result %s, want {\"ok\":true}", got)
	}
	if notes := g.notes(t); len(notes) != 1 || notes[0] != args {
		t.Fatalf("the command got %q, want exactly %q", notes, args)
	}

	// Arguments from stdin, two more calls: the quota (3) is used up.
	for _, n := range []string{"3", "4"} {
		callOK(t, g.runJSON(t, exitOK, `{"text":"more","n":`+n+`}`, "call", "--caller", "alice", "note", "-"))
	}
	e := callError(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "note", `{"text":"one too many"}`), "budget_exceeded")
	d := details(e)
	for k, want := range map[string]string{"used": "3", "requested": "1", "quota": "3", "scope": `"caller"`, "key": `"alice"`} {
		if got := jsonText(d[k]); got != want {
			t.Errorf("details.%s = %s, want %s (%v)", k, got, want, d)
		}
	}
	if e["call_id"] != nil && e["call_id"] != "" {
		t.Errorf("a refused call has a call id: %v", e)
	}
	if notes := g.notes(t); len(notes) != 3 {
		t.Errorf("%d invocations, want 3 (the refused call must not run): %q", len(notes), notes)
	}

	b := g.runJSON(t, exitOK, "", "budget", "show")
	lines, _ := b["budgets"].([]any)
	if len(lines) != 1 {
		t.Fatalf("budget show: %v", b)
	}
	l := lines[0].(map[string]any)
	if l["scope"] != "caller" || l["key"] != "alice" || jsonText(l["quota"]) != "3" || jsonText(l["used"]) != "3" {
		t.Errorf("budget line %v, want caller alice quota 3 used 3", l)
	}

	// The example's policy allows danger, but no such tool is configured:
	// lookup comes first.
	callError(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "danger", `{}`), "not_found")
}

// TestCallRefusals covers calls refused before anything is recorded: each
// exits 1 with its class, has no call id, runs nothing and leaves the
// journal empty.
func TestCallRefusals(t *testing.T) {
	g := newGWDir(t, testConfig)
	big := `{"text":"` + strings.Repeat("x", 4<<20) + `"}`
	for _, c := range []struct {
		name, class, stdin string
		args               []string
		check              func(t *testing.T, e map[string]any)
	}{
		// A tool no rule lets the caller near does not exist for it
		// (issue 12, finding 7): not_found, with no validation errors.
		{name: "caller without a rule", class: "not_found", args: []string{"--caller", "mallory", "note", `{"text":5}`}},
		{name: "bob may decide but not call", class: "not_found", args: []string{"--caller", "bob", "note", `{"text":"hi"}`}},
		{name: "unknown tool", class: "not_found", args: []string{"--caller", "alice", "nope", `{}`}},
		{name: "array arguments", class: "validation", args: []string{"--caller", "alice", "note", `[{"text":"hi"}]`},
			check: func(t *testing.T, e map[string]any) {
				if e["keyword"] != "type" || e["path"] != "$arguments" {
					t.Errorf("keyword %v path %v, want type at $arguments", e["keyword"], e["path"])
				}
			}},
		{name: "string arguments", class: "validation", args: []string{"--caller", "alice", "note", `"hi"`}},
		{name: "not JSON", class: "validation", args: []string{"--caller", "alice", "note", `{"text":`}},
		{name: "duplicate member", class: "validation", args: []string{"--caller", "alice", "note", `{"text":"a","text":"b"}`}},
		{name: "oversized arguments", class: "validation", stdin: big, args: []string{"--caller", "alice", "note", "-"},
			check: func(t *testing.T, e map[string]any) {
				// The gateway's own details are empty; the violation's say why.
				list, _ := e["errors"].([]any)
				if len(list) != 1 {
					t.Fatalf("errors %v, want one", e["errors"])
				}
				if r := details(list[0].(map[string]any))["reason"]; r != "too_large" {
					t.Errorf("errors[0].details.reason = %v, want too_large", r)
				}
			}},
		{name: "every violation", class: "validation", args: []string{"--caller", "alice", "note", `{"text":5,"n":0,"extra":true}`},
			check: func(t *testing.T, e map[string]any) {
				list, _ := e["errors"].([]any)
				var paths []string
				for _, v := range list {
					paths = append(paths, v.(map[string]any)["path"].(string))
				}
				want := []string{"$arguments.extra", "$arguments.n", "$arguments.text"}
				if strings.Join(paths, " ") != strings.Join(want, " ") {
					t.Errorf("violation paths %v, want %v", paths, want)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := g.runJSON(t, exitNegative, c.stdin, append([]string{"call"}, c.args...)...)
			if v, ok := m["call_id"]; !ok || v != nil {
				t.Errorf("call_id = %v (present %v), want null: nothing was recorded", v, ok)
			}
			e := callError(t, m, c.class)
			if c.check != nil {
				c.check(t, e)
			}
		})
	}
	if notes := g.notes(t); len(notes) != 0 {
		t.Errorf("refused calls ran: %q", notes)
	}
	j := g.runJSON(t, exitOK, "", "journal", "list")
	if list, _ := j["intents"].([]any); len(list) != 0 {
		t.Errorf("refused calls left intents: %v", list)
	}
	b := g.runJSON(t, exitOK, "", "budget", "show")
	if list, _ := b["budgets"].([]any); len(list) != 0 {
		for _, l := range list {
			if jsonText(l.(map[string]any)["used"]) != "0" {
				t.Errorf("refused calls hold budget: %v", b)
			}
		}
	}
	if list, _ := b["quotas"].([]any); len(list) != 1 {
		t.Errorf("configured quotas %v, want the one of the configuration", b["quotas"])
	}
}

// TestCallText checks the human form: a validation failure lists every
// violation with its path; an approval_required call says how to approve.
func TestCallText(t *testing.T) {
	g := newGWDir(t, testConfig)
	r := g.run(t, "", "call", "--caller", "alice", "note", `{"text":5,"n":0,"extra":true}`)
	r.wantCode(t, exitNegative)
	for _, want := range []string{"validation", "3 violations", "$arguments.text", "$arguments.n", "$arguments.extra"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("text output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = g.run(t, "", "call", "--caller", "alice", "danger", `{"text":"x"}`)
	r.wantCode(t, exitNegative)
	if !regexp.MustCompile(`approval_required.*\n(.*\n)*\s+- backplane approvals approve apr_\S+ --config \S+ --as \S+`).MatchString(r.stdout) {
		t.Errorf("approval text:\n%s", r.stdout)
	}
	r = g.run(t, "", "call", "--caller", "alice", "note", `{"text":"hi"}`)
	r.wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "ok: call call_") || !strings.Contains(r.stdout, `{"ok":true}`) {
		t.Errorf("ok text:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr: %s", r.stderr)
	}
}

// TestCallAuditLog checks that audit events go to audit.log in the store
// folder, as JSON lines carrying the call id and the digest, never the
// argument values; and to stderr with --audit-log -.
func TestCallAuditLog(t *testing.T) {
	g := newGWDir(t, testConfig)
	secret := "s3cr3t-value"
	args := `{"text":"` + secret + `"}`
	id := callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", args))
	data, err := os.ReadFile(filepath.Join(g.dir, ".backplane", "audit.log"))
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	if strings.Contains(string(data), secret) {
		t.Errorf("the audit log holds an argument value:\n%s", data)
	}
	// One event for the call, its steps inside.
	var steps []string
	events := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		ev := decodeObject(t, line)
		if ev["call_id"] != id {
			continue
		}
		events++
		if ev["msg"] != "call" || ev["caller"] != "alice" || ev["tool"] != "note" || ev["outcome"] != "succeeded" || ev["args_digest"] != digest(t, args) {
			t.Errorf("call event %v", ev)
		}
		list, _ := ev["steps"].([]any)
		for _, s := range list {
			name, _ := s.(map[string]any)["step"].(string)
			steps = append(steps, name)
		}
	}
	if events != 1 {
		t.Errorf("%d events for call %s, want 1", events, id)
	}
	if want := []string{"validate", "authorize", "approve", "commit", "settle"}; !slices.Equal(steps, want) {
		t.Errorf("steps of %s: %v, want %v", id, steps, want)
	}

	r := g.run(t, "", "call", "--caller", "alice", "note", `{"text":"to stderr"}`, "--audit-log", "-")
	r.wantCode(t, exitOK)
	if !strings.Contains(r.stderr, `"step":"settle"`) {
		t.Errorf("--audit-log - wrote no events to stderr:\n%s", r.stderr)
	}
}

// TestCallIdempotency: a repeated key returns the recorded outcome without
// running again; the same key with other arguments is a conflict.
func TestCallIdempotency(t *testing.T) {
	g := newGWDir(t, testConfig)
	first := g.runJSON(t, exitOK, "", "call", "--caller", "alice", "--idempotency-key", "k1", "note", `{"text":"once"}`)
	id := callOK(t, first)
	again := g.runJSON(t, exitOK, "", "call", "--caller", "alice", "--idempotency-key", "k1", "note", `{ "text": "once" }`)
	if callOK(t, again) != id || again["replayed"] != true {
		t.Errorf("repeat: %v, want call %s replayed", again, id)
	}
	if string(mustJSON(t, again["result"])) != `{"ok":true}` {
		t.Errorf("replayed result %v", again["result"])
	}
	e := callError(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "--idempotency-key", "k1", "note", `{"text":"other"}`), "resource_conflict")
	if details(e)["call_id"] != id {
		t.Errorf("conflict details %v, want call_id %s", details(e), id)
	}
	if n := len(g.notes(t)); n != 1 {
		t.Errorf("%d invocations, want 1", n)
	}
}

// TestCallUsageErrors: a missing flag, argument or configuration is exit 2
// with a message on stderr and nothing on stdout.
func TestCallUsageErrors(t *testing.T) {
	g := newGWDir(t, testConfig)
	for _, args := range [][]string{
		{"call", "note", `{}`},                              // no --caller
		{"call", "--caller", "alice", "note", "{}", "more"}, // too many
		{"call", "--caller", "alice", "--wait", "soon", "note", "{}"},
		{"call", "--caller", "alice", "--config", "missing.yaml", "note", "{}"},
		{"journal", "frobnicate"},
		{"journal", "list", "--status", "bogus"},
		{"journal", "resolve", "call_x"}, // neither --executed nor --not-executed
		{"journal", "resolve", "call_x", "--executed", "--not-executed"},
		{"approvals", "approve", "apr_x"}, // no --as
		{"approvals", "list", "--status", "bogus"},
		{"budget", "show", "extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			g.run(t, "", args...).wantUsageError(t)
		})
	}
	r := g.run(t, "", "journal", "list", "--config", "missing.yaml")
	r.wantUsageError(t)
	if !strings.Contains(r.stderr, "missing.yaml") {
		t.Errorf("the message does not name the file: %s", r.stderr)
	}
}

// TestMalformedConfig: an invalid configuration is refused at start, exit 2,
// with a message naming the line; nothing runs.
func TestMalformedConfig(t *testing.T) {
	for _, c := range []struct {
		name, config string
		line         int
	}{
		{"yaml syntax", "store: .backplane\npolicy:\n  - caller: alice\n\tallow: [note]\n", 4},
		{"bad duration", strings.Replace(testConfig, "timeout: 1s", "timeout: soon", 1), lineOf(testConfig, "timeout: 1s")},
		{"unknown key", strings.Replace(testConfig, "  wait: 0s", "  wiat: 0s", 1), lineOf(testConfig, "  wait: 0s")},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGWDir(t, c.config)
			r := g.run(t, "", "call", "--caller", "alice", "note", `{"text":"hi"}`)
			r.wantUsageError(t)
			re := regexp.MustCompile(`(line |:)` + itoa(c.line) + `\b`)
			if !re.MatchString(r.stderr) {
				t.Errorf("the message does not name line %d:\n%s", c.line, r.stderr)
			}
			if len(g.notes(t)) != 0 {
				t.Errorf("a tool ran under a refused configuration")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonText is v as JSON text: numbers decoded as json.Number compare as
// their literal.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// lineOf is the 1-based line of the first occurrence of s in text.
func lineOf(text, s string) int {
	i := strings.Index(text, s)
	if i < 0 {
		panic("lineOf: " + s + " not found")
	}
	return strings.Count(text[:i], "\n") + 1
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestStateFilesArePrivate: after a call, the store folder is 0700 and the
// database, its -wal and -shm, and the audit log 0600, even when the folder
// and the log were left readable by others before (issue 12, finding 9).
func TestStateFilesArePrivate(t *testing.T) {
	g := newGWDir(t, testConfig)
	state := filepath.Join(g.dir, ".backplane")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(state, "audit.log")
	if err := os.WriteFile(audit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{state, audit} {
		mode := os.FileMode(0o644)
		if p == state {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", `{"text":"hi"}`))
	// The tightening is an operational warning: in the command's
	// operational log beside the audit log, not in the audit log, and not
	// on its stderr (runJSON checked that).
	ops := filepath.Join(state, "backplane.log")
	if b, _ := os.ReadFile(ops); !strings.Contains(string(b), "permissions tightened") {
		t.Errorf("the operational log does not say the store was tightened: %q", b)
	}
	if b, _ := os.ReadFile(audit); strings.Contains(string(b), "permissions tightened") || !strings.Contains(string(b), `"msg":"call"`) {
		t.Errorf("the audit log holds an operational event, or not the call's: %s", b)
	}
	for p, want := range map[string]os.FileMode{
		state: 0o700, audit: 0o600, ops: 0o600,
		filepath.Join(state, "backplane.db"): 0o600,
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s is %v, want at most %v", filepath.Base(p), got, want)
		}
	}
}

// TestJournalListAll: refused calls are listed with --all (and only them
// with --status refused), merged by time with the intents; plain journal
// list still lists intents only.
func TestJournalListAll(t *testing.T) {
	g := newGWDir(t, testConfig)
	g.run(t, "", "call", "--caller", "alice", "note", `{"text":"ok"}`).wantCode(t, exitOK)
	g.run(t, "", "call", "--caller", "alice", "note", `{"text":5}`).wantCode(t, exitNegative)
	g.run(t, "", "call", "--caller", "alice", "danger", `{"text":"x"}`).wantCode(t, exitNegative)
	if list, _ := g.runJSON(t, exitOK, "", "journal", "list")["intents"].([]any); len(list) != 1 {
		t.Errorf("journal list: %d entries, want the one intent", len(list))
	}
	all, _ := g.runJSON(t, exitOK, "", "journal", "list", "--all")["intents"].([]any)
	if len(all) != 3 {
		t.Fatalf("journal list --all: %v, want 3 entries", all)
	}
	classes := []string{}
	for _, e := range all {
		m := e.(map[string]any)
		classes = append(classes, jsonText(m["status"])+"/"+jsonText(m["error_class"]))
	}
	if got := strings.Join(classes, " "); got != `"refused"/"approval_required" "refused"/"validation" "succeeded"/null` {
		t.Errorf("journal list --all, newest first: %s", got)
	}
	r := g.run(t, "", "journal", "list", "--status", "refused", "--tool", "d*")
	r.wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "refused (approval_required)") || strings.Contains(r.stdout, "validation") {
		t.Errorf("journal list --status refused --tool 'd*':\n%s", r.stdout)
	}
}
