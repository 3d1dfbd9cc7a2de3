package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// journal lists the intents, keyed by call id.
func (g *gwDir) journal(t *testing.T, extra ...string) map[string]map[string]any {
	t.Helper()
	m := g.runJSON(t, exitOK, "", append([]string{"journal", "list"}, extra...)...)
	list, ok := m["intents"].([]any)
	if !ok {
		t.Fatalf("journal list: %v", m)
	}
	out := map[string]map[string]any{}
	for _, v := range list {
		in := v.(map[string]any)
		out[in["call_id"].(string)] = in
	}
	return out
}

// TestJournal records a call that succeeds, one whose backend prints
// garbage and one whose backend never answers, then lists, shows and
// resolves them.
func TestJournal(t *testing.T) {
	g := newGWDir(t, testConfig)
	okArgs, garbageArgs, hangArgs := `{"text":"fine"}`, `{"what":"garbage"}`, `{"what":"hang"}`

	okID := callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "note", okArgs))

	m := g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "garbage", garbageArgs)
	e := callError(t, m, "malformed_result")
	garbageID, _ := m["call_id"].(string)
	if garbageID == "" || e["call_id"] != garbageID {
		t.Fatalf("a call that ran has no call id: %v", m)
	}

	start := time.Now()
	m = g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "hang", hangArgs)
	callError(t, m, "timeout")
	hangID, _ := m["call_id"].(string)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("a 1s tool timeout took %v", elapsed)
	}
	if got := len(g.notes(t)); got != 3 {
		t.Fatalf("%d invocations, want 3", got)
	}

	all := g.journal(t)
	if len(all) != 3 {
		t.Fatalf("journal %v, want 3 intents", all)
	}
	for id, want := range map[string]struct{ tool, status, args string }{
		okID:      {"note", "succeeded", okArgs},
		garbageID: {"garbage", "uncertain", garbageArgs},
		hangID:    {"hang", "uncertain", hangArgs},
	} {
		in := all[id]
		if in == nil {
			t.Errorf("%s not listed", id)
			continue
		}
		if in["tool"] != want.tool || in["caller"] != "alice" || in["status"] != want.status || in["args_digest"] != digest(t, want.args) {
			t.Errorf("%s: %v, want tool %s, caller alice, status %s, digest of %s", id, in, want.tool, want.status, want.args)
		}
		created, err := time.Parse(time.RFC3339Nano, in["created_at"].(string))
		if err != nil || time.Since(created) > time.Minute || time.Since(created) < 0 {
			t.Errorf("%s: created_at %v", id, in["created_at"])
		}
		if _, ok := in["settled_at"]; !ok {
			t.Errorf("%s: no settled_at member", id)
		}
	}
	if s, _ := all[okID]["settled_at"].(string); s == "" {
		t.Errorf("a succeeded intent without settled_at: %v", all[okID])
	}
	unc := g.journal(t, "--status", "uncertain")
	if len(unc) != 2 || unc[garbageID] == nil || unc[hangID] == nil {
		t.Errorf("--status uncertain lists %v", unc)
	}
	if l := g.journal(t, "--limit", "1"); len(l) != 1 || l[hangID] == nil {
		t.Errorf("--limit 1 lists %v, want the newest (%s)", l, hangID)
	}

	show := g.runJSON(t, exitOK, "", "journal", "show", okID)
	if show["status"] != "succeeded" || string(mustJSON(t, show["result"])) != `{"ok":true}` ||
		string(mustJSON(t, show["arguments"])) != okArgs || show["tool"] != "note" || show["definition_hash"] == "" {
		t.Errorf("show %s: %v", okID, show)
	}
	show = g.runJSON(t, exitOK, "", "journal", "show", garbageID)
	if show["status"] != "uncertain" || show["error_class"] != "malformed_result" || show["error_message"] == "" {
		t.Errorf("show %s: %v", garbageID, show)
	}
	r := g.run(t, "", "journal", "show", hangID)
	r.wantCode(t, exitOK)
	for _, want := range []string{hangID, "uncertain", "timeout", hangArgs} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show text lacks %q:\n%s", want, r.stdout)
		}
	}
	g.run(t, "", "journal", "show", "call_nope").wantCode(t, exitNegative)

	// hang costs 3, the others 1: 5 held, all three calls ran or may have.
	if used := budgetUsed(t, g, "caller", "alice"); used != "5" {
		t.Errorf("used %s, want 5", used)
	}
	res := g.runJSON(t, exitOK, "", "journal", "resolve", garbageID, "--executed", "--as", "carol")
	if res["status"] != "executed" || res["resolved_by"] != "carol" {
		t.Errorf("resolve: %v", res)
	}
	if res := g.runJSON(t, exitOK, "", "journal", "resolve", hangID, "--not-executed", "--as", "carol", "--reason", "no trace of it on the host 4711"); res["reason"] != "no trace of it on the host 4711" {
		t.Errorf("resolve --reason: %v", res)
	}
	// The reason is in the resolve's audit event.
	audit, _ := os.ReadFile(filepath.Join(g.dir, ".backplane", "audit.log"))
	var resolved bool
	for _, l := range strings.Split(string(audit), "\n") {
		if strings.Contains(l, `"msg":"resolve"`) && strings.Contains(l, hangID) && strings.Contains(l, `"reason":"no trace of it on the host 4711"`) {
			resolved = true
		}
	}
	if !resolved {
		t.Errorf("the audit log has no resolve event of %s with its reason:\n%s", hangID, audit)
	}
	if used := budgetUsed(t, g, "caller", "alice"); used != "2" {
		t.Errorf("after resolving hang (cost 3) as not executed, used %s, want 2", used)
	}
	show = g.runJSON(t, exitOK, "", "journal", "show", hangID)
	if show["status"] != "not_executed" || show["resolved_by"] != "carol" {
		t.Errorf("resolved intent: %v", show)
	}
	if all := g.journal(t); all[garbageID]["status"] != "executed" {
		t.Errorf("resolved as executed: %v", all[garbageID])
	}

	// Only an uncertain intent can be resolved.
	for _, id := range []string{okID, garbageID, "call_nope"} {
		r := g.run(t, "", "journal", "resolve", id, "--not-executed", "--as", "carol")
		r.wantCode(t, exitNegative)
		if !strings.Contains(r.stdout, id) {
			t.Errorf("refusal does not name %s:\n%s", id, r.stdout)
		}
	}
	if used := budgetUsed(t, g, "caller", "alice"); used != "2" {
		t.Errorf("a refused resolution changed the budget: used %s", used)
	}

	r = g.run(t, "", "journal", "list")
	r.wantCode(t, exitOK)
	for _, want := range []string{"CALL ID", okID, "executed", "not_executed", "succeeded"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("list text lacks %q:\n%s", want, r.stdout)
		}
	}
}
