package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOperatorActionsNeedTheToken is finding 15 of issue 22: with
// operators configured, --as NAME was an unauthenticated claim (carol, an
// operator outside approvers, approved as ops). Now an operator action
// needs the operator's token (BACKPLANE_OPERATOR_TOKEN or
// --operator-token-file), the name is the token's owner, and the audit
// event names the OS user who ran the command.
func TestOperatorActionsNeedTheToken(t *testing.T) {
	cfg := strings.Replace(testConfig, "    approve: [danger]\n", "    approve: [danger]\n    approvers: [ops]\n", 1) + `operators:
  - {name: ops, token: ops-token}
  - {name: carol, token: carol-token}
`
	g := newGWDir(t, cfg)
	id := approvalID(t, g.runJSON(t, exitNegative, "", "call", "--caller", "alice", "danger", `{"text":"x"}`))
	withToken := func(tok string, args ...string) result {
		t.Helper()
		cmd := g.command("", args...)
		cmd.Env = append(cmd.Env, "BACKPLANE_OPERATOR_TOKEN="+tok)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		return finish(t, cmd.Run(), &out, &errOut, args)
	}
	pending := func() {
		t.Helper()
		if a := g.approvalsByID(t)[id]; a["status"] != "pending" {
			t.Fatalf("the request was decided: %v", a)
		}
	}

	// --as alone: refused, whatever the name (the finding: carol as ops).
	r := g.run(t, "", "approvals", "approve", id, "--as", "ops")
	r.wantUsageError(t)
	if !strings.Contains(r.stderr, "operator's token") {
		t.Errorf("--as alone: %s", r.stderr)
	}
	pending()
	// A token that is no operator's.
	withToken("not-a-token", "approvals", "approve", id).wantUsageError(t)
	pending()
	// carol's own token does not make her ops.
	r = withToken("carol-token", "approvals", "approve", id, "--as", "ops")
	r.wantUsageError(t)
	if !strings.Contains(r.stderr, "belongs to operator carol") {
		t.Errorf("carol's token with --as ops: %s", r.stderr)
	}
	pending()
	// As herself she is refused by the rule's approvers.
	withToken("carol-token", "approvals", "approve", id).wantCode(t, exitNegative)
	pending()
	// Other operator verbs need the token too.
	g.run(t, "", "budget", "reset", "--scope", "caller", "--key", "alice", "--as", "ops").wantUsageError(t)
	g.run(t, "", "journal", "resolve", "call_nope", "--executed", "--as", "ops").wantUsageError(t)

	// ops, by a token file: approved, recorded as ops and the OS user.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("ops-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.run(t, "", "approvals", "approve", id, "--operator-token-file", file).wantCode(t, exitOK)
	if a := g.approvalsByID(t)[id]; a["status"] != "approved" || a["decided_by"] != "ops" {
		t.Errorf("after ops's approval: %v", a)
	}
	var decide map[string]any
	sc := bufio.NewScanner(strings.NewReader(readAudit(t, g)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev["step"] == "decide" && ev["approval_id"] == id {
			decide = ev
		}
	}
	if decide == nil || decide["by"] != "ops" || decide["os_uid"] != strconv.Itoa(os.Getuid()) {
		t.Errorf("the decision's audit event: %v, want by ops and os_uid %d", decide, os.Getuid())
	}
	if u, err := user.Current(); err == nil && u.Username != "" && decide["os_user"] != u.Username {
		t.Errorf("the decision's audit event: os_user %v, want %s", decide["os_user"], u.Username)
	}
	// An empty or missing token file is refused, never read as no token.
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	g.run(t, "", "budget", "reset", "--scope", "caller", "--key", "alice", "--operator-token-file", empty).wantUsageError(t)
	g.run(t, "", "budget", "reset", "--scope", "caller", "--key", "alice", "--operator-token-file", empty+".missing").wantUsageError(t)
	withToken("ops-token", "budget", "reset", "--scope", "caller", "--key", "alice").wantCode(t, exitOK)
}
