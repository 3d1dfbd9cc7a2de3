package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/internal/termtext"
)

// rawControls lists the bytes and characters of text that a terminal acts
// on (termtext.Unsafe), '\n' and the tabwriter's padding aside: none may
// reach the operator raw.
func rawControls(s string) []string {
	var found []string
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				found = append(found, "stray byte")
				continue
			}
		}
		if r != '\n' && termtext.Unsafe(r) {
			found = append(found, termtext.Line(string(r)))
		}
	}
	return found
}

// TestApprovalsShowEscapesControls is finding 3 of issue 22 through the
// binary: a pending bash command that would redraw itself as "git status"
// on a terminal (erase the line, return, move up, reverse the rest), made
// by a caller whose name does the same, is shown with every control
// visible in approvals show and approvals list, text and --json.
func TestApprovalsShowEscapesControls(t *testing.T) {
	g := newGWDir(t, `store: .backplane
policy:
  - caller: "alice*"
    allow: [bash]
`)
	caller := "alice\x1b[2K\rops"
	// The arguments carry the controls as JSON escapes, the U+202E raw.
	args := `{"command":"rm -r -f ../ws/src # \u001b[2K\r git status \u001b[4A ` + "\u202e" + ` x"}`
	m := g.runJSON(t, exitNegative, "", "call", "--caller", caller, "bash", args)
	id := approvalID(t, m)

	show := g.run(t, "", "approvals", "show", id)
	show.wantCode(t, exitOK)
	if bad := rawControls(show.stdout); len(bad) > 0 {
		t.Errorf("approvals show prints %q raw:\n%s", bad, show.stdout)
	}
	for _, want := range []string{
		`command:` + "\n" + `  rm -r -f ../ws/src # \x1b[2K\x0d git status \x1b[4A \u202e x`,
		`caller:      alice\x1b[2K\x0dops`,
		// JSON's own escapes in the arguments, the U+202E as one too.
		`"command": "rm -r -f ../ws/src # \u001b[2K\r git status \u001b[4A \u202e x"`,
	} {
		if !strings.Contains(show.stdout, want) {
			t.Errorf("approvals show does not show %q:\n%s", want, show.stdout)
		}
	}

	list := g.run(t, "", "approvals", "list")
	list.wantCode(t, exitOK)
	if bad := rawControls(list.stdout); len(bad) > 0 {
		t.Errorf("approvals list prints %q raw:\n%s", bad, list.stdout)
	}
	if !strings.Contains(list.stdout, `alice\x1b[2K\x0dops`) {
		t.Errorf("approvals list does not show the caller escaped:\n%s", list.stdout)
	}
	if n := strings.Count(list.stdout, "\n"); n != 2 {
		t.Errorf("approvals list has %d lines, want the header and one row:\n%s", n, list.stdout)
	}

	// --json: the same value, with nothing raw either.
	for _, verb := range [][]string{{"approvals", "show", id}, {"approvals", "list"}} {
		r := g.run(t, "", append(verb, "--json")...)
		r.wantCode(t, exitOK)
		if bad := rawControls(r.stdout); len(bad) > 0 {
			t.Errorf("%s --json prints %q raw:\n%s", strings.Join(verb, " "), bad, r.stdout)
		}
	}
	var v struct {
		Caller  string `json:"caller"`
		Preview struct {
			Command string `json:"command"`
		} `json:"preview"`
	}
	r := g.run(t, "", "approvals", "show", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("approvals show --json: %v\n%s", err, r.stdout)
	}
	if want := "rm -r -f ../ws/src # \x1b[2K\r git status \x1b[4A \u202e x"; v.Preview.Command != want || v.Caller != caller {
		t.Errorf("approvals show --json: caller %q command %q, want %q and %q", v.Caller, v.Preview.Command, caller, want)
	}
}

// TestUpstreamBadNamesRefused: an upstream's tools and prompt named with
// an ESC sequence, a newline or a U+202E are not registered; the log names
// the server and shows the name escaped; the server's other tools stay.
func TestUpstreamBadNamesRefused(t *testing.T) {
	server := mcpTestServer(t)
	g := newGWDir(t, `store: .backplane
policy:
  - caller: alice
    allow: ["*"]
builtin: {enable: []}
servers:
  - name: up
    command: [`+server+`]
    env: [MCPTEST_BAD_NAMES]
`)
	g.setEnv("MCPTEST_BAD_NAMES", "1")
	r := g.run(t, "", "tools", "list")
	r.wantCode(t, exitOK)
	// A one-shot verb's operational log is backplane.log in the store.
	logData, err := os.ReadFile(filepath.Join(g.dir, ".backplane", "backplane.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := string(logData)
	for _, stream := range []string{r.stdout, r.stderr, log} {
		if bad := rawControls(stream); len(bad) > 0 {
			t.Errorf("tools list prints %q raw:\nstdout:\n%s\nstderr:\n%s\nlog:\n%s", bad, r.stdout, r.stderr, log)
		}
	}
	if !strings.Contains(r.stdout, "up.greet") {
		t.Errorf("the server's well-named tools are gone:\n%s", r.stdout)
	}
	for _, name := range []string{`up.evil\x1b[2K\x0dgreet`, `up.two\x0alines`, `up.rev\u202eesrever`} {
		if strings.Contains(r.stdout, name) {
			t.Errorf("tools list lists %s:\n%s", name, r.stdout)
		}
		var line string
		for l := range strings.Lines(log) {
			if strings.Contains(l, name) {
				line = l
			}
		}
		if !strings.Contains(line, "upstream tool refused") || !strings.Contains(line, "server=up") {
			t.Errorf("no log line refusing %s, naming the server:\n%s", name, log)
		}
	}
	if !strings.Contains(log, `msg="upstream prompt refused`) || !strings.Contains(log, `prompt=bad\x1b[4Aprompt`) {
		t.Errorf("no log line refusing the prompt:\n%s", log)
	}
	// The table is the header and a row per tool; the report of tools the
	// subset refuses follows it, its first line "server NAME (...)".
	table, _, _ := strings.Cut(r.stdout, "\nserver ")
	if n := strings.Count(strings.TrimRight(table, "\n"), "\n") + 1; n != len(toolsOf(t, g))+1 {
		t.Errorf("tools list: %d lines for %d tools: a name forged a row?\n%s", n, len(toolsOf(t, g)), r.stdout)
	}
}

func toolsOf(t *testing.T, g *gwDir) map[string]map[string]any {
	t.Helper()
	tools := g.toolsByName(t)
	for name := range tools {
		if !utf8.ValidString(name) || strings.ContainsFunc(name, termtext.Unsafe) {
			t.Errorf("registered: %q", name)
		}
	}
	return tools
}

// TestServePendingLineEscapesControls: serve's "approval pending" line on
// its terminal shows a pending command's controls and U+202E escaped.
func TestServePendingLineEscapesControls(t *testing.T) {
	g := newOperatorsDir(t, "0s")
	p := startServe(t, g)
	cs := connectAlice(t, p, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, sc := callTool(t, ctx, cs, "bash", map[string]any{"command": "rm -r -f x # \x1b[2K\r git status \x1b[4A \u202e x"})
	id, _ := detailsOf(sc)["approval_id"].(string)
	if id == "" {
		t.Fatalf("no approval id: %+v", sc)
	}
	var line string
	for start := time.Now(); line == ""; time.Sleep(50 * time.Millisecond) {
		for l := range strings.Lines(p.log()) {
			if strings.HasPrefix(l, "approval pending: "+id) {
				line = l
			}
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("serve did not print the pending request:\n%s", p.log())
		}
	}
	if bad := rawControls(strings.TrimSuffix(line, "\n")); len(bad) > 0 {
		t.Errorf("the pending line holds %q raw: %q", bad, line)
	}
	if !strings.Contains(line, `\u001b[2K\r git status \u001b[4A \u202e x`) {
		t.Errorf("the pending line does not show the command escaped: %q", line)
	}
}

// TestAuditToStderrEscapesControls: --audit-log - writes JSON events to
// stderr, often a terminal: a caller's U+202E and C1 control come out as
// JSON escapes, the JSON the same.
func TestAuditToStderrEscapesControls(t *testing.T) {
	g := newGWDir(t, `store: .backplane
policy:
  - caller: "alice*"
    allow: [bash]
`)
	caller := "alice\u202e\u009bx"
	r := g.run(t, "", "call", "--caller", caller, "bash", `{"command":"true"}`, "--audit-log", "-")
	r.wantCode(t, exitNegative) // approval_required
	if !strings.Contains(r.stderr, `"caller":"alice\u202e\u009bx"`) {
		t.Errorf("no event names the caller with JSON escapes:\n%s", r.stderr)
	}
	if bad := rawControls(r.stderr); len(bad) > 0 {
		t.Errorf("the audit events hold %q raw:\n%s", bad, r.stderr)
	}
	for l := range strings.Lines(r.stderr) {
		if !strings.HasPrefix(l, "{") {
			continue // the operational log's text lines
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Errorf("not JSON: %q", l)
		} else if c, ok := v["caller"]; ok && c != caller {
			t.Errorf("caller %q, want %q", c, caller)
		}
	}
}
