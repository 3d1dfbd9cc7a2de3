package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// approvalsByID lists the approval requests, keyed by id.
func (g *gwDir) approvalsByID(t *testing.T, extra ...string) map[string]map[string]any {
	t.Helper()
	m := g.runJSON(t, exitOK, "", append([]string{"approvals", "list"}, extra...)...)
	list, ok := m["approvals"].([]any)
	if !ok {
		t.Fatalf("approvals list: %v", m)
	}
	out := map[string]map[string]any{}
	for _, v := range list {
		a := v.(map[string]any)
		out[a["id"].(string)] = a
	}
	return out
}

// approvalID returns details.approval_id of an approval_required call.
func approvalID(t *testing.T, m map[string]any) string {
	t.Helper()
	e := callError(t, m, "approval_required")
	id, _ := details(e)["approval_id"].(string)
	if id == "" {
		t.Fatalf("approval_required without details.approval_id: %v", e)
	}
	return id
}

// TestApprovalFlow follows one approval across processes: the call asks,
// its caller cannot approve, someone else does, the same call then runs
// once; a repeat asks again; other arguments ask anew; a denial forbids.
func TestApprovalFlow(t *testing.T) {
	g := newGWDir(t, testConfig)
	args := `{"text":"drop table"}`
	call := []string{"call", "--caller", "alice", "danger", args}

	id := approvalID(t, g.runJSON(t, exitNegative, "", call...))
	if len(g.notes(t)) != 0 {
		t.Fatal("the tool ran before approval")
	}
	a := g.approvalsByID(t)[id]
	if a == nil {
		t.Fatalf("request %s not listed", id)
	}
	if a["caller"] != "alice" || a["tool"] != "danger" || a["status"] != "pending" || a["args_digest"] != digest(t, args) {
		t.Errorf("request %v, want alice/danger/pending with the digest of %s", a, args)
	}
	exp, err := time.Parse(time.RFC3339Nano, a["expires_at"].(string))
	if err != nil || time.Until(exp) < 9*time.Minute || time.Until(exp) > 11*time.Minute {
		t.Errorf("expires_at %v (%v), want about 10m from now", a["expires_at"], err)
	}
	// Asking again while pending reuses the request.
	if again := approvalID(t, g.runJSON(t, exitNegative, "", call...)); again != id {
		t.Errorf("a second call while pending made request %s, want %s", again, id)
	}

	// The caller cannot approve its own call.
	r := g.run(t, "", "approvals", "approve", id, "--as", "alice")
	r.wantCode(t, exitNegative)
	if !strings.Contains(r.stdout, "alice") || !strings.Contains(r.stdout, "cannot decide") {
		t.Errorf("self-approval message:\n%s", r.stdout)
	}
	m := g.runJSON(t, exitNegative, "", "approvals", "approve", id, "--as", "alice")
	if e, _ := m["error"].(map[string]any); e["class"] != "self_approval" {
		t.Errorf("self-approval --json: %v", m)
	}
	if st := g.approvalsByID(t)[id]["status"]; st != "pending" {
		t.Errorf("after a refused self-approval the request is %v", st)
	}

	ok := g.runJSON(t, exitOK, "", "approvals", "approve", id, "--as", "bob")
	if ok["ok"] != true || ok["status"] != "approved" || ok["decided_by"] != "bob" {
		t.Errorf("approve: %v", ok)
	}
	a = g.approvalsByID(t, "--status", "approved")[id]
	if a == nil || a["decided_by"] != "bob" {
		t.Errorf("approved list: %v", g.approvalsByID(t))
	}
	// A decided request cannot be decided again.
	m = g.runJSON(t, exitNegative, "", "approvals", "deny", id, "--as", "carol")
	if e, _ := m["error"].(map[string]any); e["class"] != "already_decided" {
		t.Errorf("deciding twice: %v", m)
	}

	// The same call (other spacing, same canonical arguments) now runs.
	callID := callOK(t, g.runJSON(t, exitOK, "", "call", "--caller", "alice", "danger", `{ "text" : "drop table" }`))
	if notes := g.notes(t); len(notes) != 1 {
		t.Fatalf("invocations %q, want one", notes)
	}
	show := g.runJSON(t, exitOK, "", "journal", "show", callID)
	if show["approval_id"] != id {
		t.Errorf("the intent records approval %v, want %s", show["approval_id"], id)
	}
	if a := g.approvalsByID(t)[id]; a["consumed_by"] != callID {
		t.Errorf("the request is not marked used by %s: %v", callID, a)
	}

	// An approval is used once: the same call again asks again.
	id2 := approvalID(t, g.runJSON(t, exitNegative, "", call...))
	if id2 == id {
		t.Errorf("a used approval was offered again")
	}
	// A decision for other arguments does not count.
	id3 := approvalID(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "danger", `{"text":"drop another table"}`))
	if id3 == id2 || id3 == id {
		t.Errorf("other arguments share request %s", id3)
	}

	// A denial forbids the call, and stands for a retry.
	g.runJSON(t, exitOK, "", "approvals", "deny", id2, "--as", "bob")
	for range 2 {
		e := callError(t, g.runJSON(t, exitNegative, "", call...), "forbidden")
		if d := details(e); d["approval_id"] != id2 || d["decided_by"] != "bob" {
			t.Errorf("denied call details %v", d)
		}
	}
	if len(g.notes(t)) != 1 {
		t.Errorf("a denied or pending call ran: %q", g.notes(t))
	}
	if st := g.approvalsByID(t)[id3]["status"]; st != "pending" {
		t.Errorf("request %s is %v, want pending", id3, st)
	}
	pending := g.approvalsByID(t, "--status", "pending")
	if len(pending) != 1 || pending[id3] == nil {
		t.Errorf("pending requests %v, want only %s", pending, id3)
	}

	// The approved call took the danger cost (2) from alice's budget.
	if used := budgetUsed(t, g, "caller", "alice"); used != "2" {
		t.Errorf("alice used %s, want 2", used)
	}

	// Unknown request.
	g.run(t, "", "approvals", "approve", "apr_nope", "--as", "bob").wantCode(t, exitNegative)
}

// TestApprovalWaitAcrossProcesses: a call waiting for a decision is
// released by "approvals approve" run in another process.
func TestApprovalWaitAcrossProcesses(t *testing.T) {
	g := newGWDir(t, testConfig)
	cmd := g.command("", "call", "--caller", "alice", "--wait", "10s", "--json", "danger", `{"text":"wait for me"}`)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var id string
	for deadline := time.Now().Add(8 * time.Second); id == "" && time.Now().Before(deadline); {
		for k := range g.approvalsByID(t, "--status", "pending") {
			id = k
		}
		if id == "" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if id == "" {
		t.Fatal("the waiting call made no approval request")
	}
	select {
	case err := <-done:
		t.Fatalf("the call returned before the decision: %v\n%s%s", err, out.String(), errOut.String())
	default:
	}
	g.runJSON(t, exitOK, "", "approvals", "approve", id, "--as", "bob")
	var err error
	select {
	case err = <-done:
	case <-time.After(9 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the waiting call was not released by the approval")
	}
	r := finish(t, err, &out, &errOut, cmd.Args)
	r.wantCode(t, exitOK)
	callOK(t, decodeObject(t, r.stdout))
	if elapsed := time.Since(start); elapsed > 9*time.Second {
		t.Errorf("released after %v", elapsed)
	}
	if len(g.notes(t)) != 1 {
		t.Errorf("invocations %q, want one", g.notes(t))
	}

	// A bounded wait without a decision ends with approval_required.
	start = time.Now()
	id2 := approvalID(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "--wait", "400ms", "danger", `{"text":"nobody answers"}`))
	if elapsed := time.Since(start); elapsed < 400*time.Millisecond {
		t.Errorf("--wait 400ms returned after %v", elapsed)
	}
	if id2 == id {
		t.Error("a used approval was reused")
	}
}

// TestApprovalExpiry: a request not decided in time is listed expired,
// cannot be decided, and the call is refused; calling again asks anew.
func TestApprovalExpiry(t *testing.T) {
	g := newGWDir(t, strings.Replace(testConfig, "expire: 10m", "expire: 1s", 1))
	call := []string{"call", "--caller", "alice", "danger", `{"text":"late"}`}
	id := approvalID(t, g.runJSON(t, exitNegative, "", call...))
	time.Sleep(1100 * time.Millisecond)
	if st := g.approvalsByID(t)[id]["status"]; st != "expired" {
		t.Errorf("status %v, want expired", st)
	}
	if ex := g.approvalsByID(t, "--status", "expired"); ex[id] == nil {
		t.Errorf("--status expired does not list %s", id)
	}
	m := g.runJSON(t, exitNegative, "", "approvals", "approve", id, "--as", "bob")
	if e, _ := m["error"].(map[string]any); e["class"] != "expired" {
		t.Errorf("approving an expired request: %v", m)
	}
	if id2 := approvalID(t, g.runJSON(t, exitNegative, "", call...)); id2 == id {
		t.Errorf("an expired request was offered again")
	}
	if len(g.notes(t)) != 0 {
		t.Errorf("an unapproved call ran")
	}
}

// operator runs an operator verb as ops, by its token (ops-token), the way
// an operator authenticates to the CLI.
func (g *gwDir) operator(t *testing.T, args ...string) result {
	t.Helper()
	cmd := g.command("", args...)
	cmd.Env = append(cmd.Env, "BACKPLANE_OPERATOR_TOKEN=ops-token")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	return finish(t, cmd.Run(), &out, &errOut, args)
}
