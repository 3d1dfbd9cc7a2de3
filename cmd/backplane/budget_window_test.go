package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBudgetWindowResetsThroughCall: a per-10s quota (wide enough for two calls of a loaded machine) of 1 refuses a second
// call in the same window, saying when the window resets; once that time
// has passed (waited for, not assumed), the next call is accepted. budget
// show lists the window with its reset time.
func TestBudgetWindowResetsThroughCall(t *testing.T) {
	cfg := strings.Replace(testConfig, `budgets:
  - scope: caller
    quota: 20`, `budgets:
  - scope: caller
    quota: 1
    per: 10s`, 1)
	g := newGWDir(t, cfg)
	var resets time.Time
	// Two calls may straddle a window boundary; try again until the second
	// is refused inside one window.
	for attempt := 0; resets.IsZero(); attempt++ {
		if attempt == 5 {
			t.Fatal("five pairs of calls, never two in one window")
		}
		m := g.runAnyJSON(t, "call", "--caller", "alice", "note", `{"text":"a"}`)
		if m["ok"] != true {
			// Only a window still full from the previous pair (whose two
			// calls straddled a boundary) may refuse it: wait it out.
			d := details(callError(t, m, "budget_exceeded"))
			until, err := time.Parse(time.RFC3339, fmt.Sprint(d["resets_at"]))
			if err != nil {
				t.Fatalf("resets_at %v: %v", d["resets_at"], err)
			}
			time.Sleep(time.Until(until) + 50*time.Millisecond)
			continue
		}
		m = g.runAnyJSON(t, "call", "--caller", "alice", "note", `{"text":"b"}`)
		if m["ok"] == true {
			continue
		}
		d := details(callError(t, m, "budget_exceeded"))
		if d["per"] != "10s" || d["window_start"] == nil {
			t.Fatalf("refusal details %v, want the 10s window", d)
		}
		var err error
		if resets, err = time.Parse(time.RFC3339, d["resets_at"].(string)); err != nil {
			t.Fatalf("resets_at %v: %v", d["resets_at"], err)
		}
		start, _ := time.Parse(time.RFC3339, d["window_start"].(string))
		if !resets.Equal(start.Add(10*time.Second)) || start.Unix()%10 != 0 {
			t.Fatalf("window %v to %v: want 10s aligned to the epoch", start, resets)
		}
	}
	m := g.runJSON(t, exitOK, "", "budget", "show")
	lines := m["budgets"].([]any)
	found := false
	for _, l := range lines {
		l := l.(map[string]any)
		if l["resets_at"] == resets.UTC().Format(time.RFC3339) && jsonText(l["used"]) == "1" && jsonText(l["remaining"]) == "0" {
			found = true
		}
	}
	if !found {
		t.Errorf("budget show has no full window resetting at %v: %v", resets, lines)
	}
	time.Sleep(time.Until(resets))
	for time.Now().Before(resets) { // Sleep may return a hair early
		time.Sleep(10 * time.Millisecond)
	}
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", `{"text":"after the reset"}`))
	r := g.run(t, "", "budget", "show")
	r.wantCode(t, exitOK)
	for _, want := range []string{"WINDOW", "REMAINING", "RESETS", "10s from ", "quota: caller 1 per key per 10s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("budget show text lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestBudgetResetThroughCLI: an operator's reset lets a caller whose quota
// is spent call again, and the audit log says who reset what.
func TestBudgetResetThroughCLI(t *testing.T) {
	cfg := strings.Replace(testConfig, `budgets:
  - scope: caller
    quota: 20`, `budgets:
  - scope: caller
    quota: 1`, 1)
	g := newGWDir(t, cfg)
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", `{"text":"a"}`))
	callError(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "note", `{"text":"b"}`), "budget_exceeded")

	m := g.runJSON(t, exitOK, "", "budget", "reset", "--scope", "caller", "--key", "alice", "--as", "carol")
	if m["ok"] != true || m["reset_by"] != "carol" || len(m["removed"].([]any)) != 1 {
		t.Errorf("budget reset answer %v", m)
	}
	if used := budgetUsed(t, g, "caller", "alice"); used != "0" {
		t.Errorf("used after the reset %s, want 0", used)
	}
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", `{"text":"c"}`))
	m = g.runJSON(t, exitNegative, "", "budget", "reset", "--scope", "team", "--key", "alice", "--as", "carol")
	if e, _ := m["error"].(map[string]any); e["class"] != "bad_reset" {
		t.Errorf("reset of scope team: %v, want bad_reset", m)
	}
	g.run(t, "", "budget", "reset", "--scope", "caller").wantCode(t, exitUsage)

	audit, err := os.ReadFile(filepath.Join(g.dir, ".backplane", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"msg":"budget","step":"reset","outcome":"reset","scope":"caller","key":"alice","by":"carol"`) {
		t.Errorf("the audit log has no reset by carol:\n%s", audit)
	}
}

// TestJournalPrune: prune --before removes settled calls and keeps the
// uncertain one; list --limit 0 lists what remains; a date in the future
// is refused.
func TestJournalPrune(t *testing.T) {
	g := newGWDir(t, testConfig)
	callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", `{"text":"a"}`))
	garbage := g.runAnyJSON(t, "call", "--caller", "alice", "garbage", `{}`)
	if n := len(g.journal(t, "--limit", "0")); n != 2 {
		t.Fatalf("%d intents before the prune, want 2", n)
	}
	m := g.runJSON(t, exitOK, "", "journal", "prune", "--before", "0s", "--as", "carol")
	if m["ok"] != true || jsonText(m["intents"]) != "1" {
		t.Errorf("prune answer %v, want 1 intent (the succeeded one)", m)
	}
	left := g.journal(t, "--limit", "0")
	if len(left) != 1 {
		t.Errorf("after the prune: %v, want the uncertain call only (%v)", left, garbage)
	}
	for _, e := range left {
		if e["status"] != "uncertain" {
			t.Errorf("left %v, want uncertain", e)
		}
	}
	g.run(t, "", "journal", "prune", "--before", "2999-01-01").wantCode(t, exitUsage)
	g.run(t, "", "journal", "prune", "--before", "yesterday").wantCode(t, exitUsage)
	r := g.run(t, "", "journal", "prune", "--before", "30d")
	r.wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "ok: pruned before ") {
		t.Errorf("prune text: %s", r.stdout)
	}
}

// runAnyJSON runs a verb with --json whatever its exit code (0 or 1) and
// decodes the answer.
func (g *gwDir) runAnyJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	r := g.run(t, "", append(args, "--json")...)
	if r.code != exitOK && r.code != exitNegative {
		t.Fatalf("backplane %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	return decodeObject(t, r.stdout)
}
