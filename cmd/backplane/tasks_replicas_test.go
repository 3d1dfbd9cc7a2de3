package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tasks across real `backplane serve` replicas on one PostgreSQL schema:
// a decision from the CLI reaches its task without any poll, and a
// replica killed with SIGKILL while it ran a task's call leaves the task
// failed with the uncertain-call error, the call never run again.

// slowDangerTool records the call in $NOTE_LOG (and its shell's pid in
// $SLEEP_LOG, to kill it at the end), then takes a while to answer.
const slowDangerTool = `  - name: danger
    description: Record the call, once someone approved it, and take a while.
    input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    command: [sh, -c, 'echo "$$" >> "$SLEEP_LOG"; printf "%%s\n" "$(cat)" >> "$NOTE_LOG"; sleep %s; echo "{\"done\":true}"']
    env: [NOTE_LOG, SLEEP_LOG]
    timeout: 60s
`

// tasksReplicasDir is the folder of a test: replicas with a 3s store
// lease and a 2s task lease, where alice's danger needs an operator, and
// the tool sleeps for sleep.
func tasksReplicasDir(t *testing.T, sleep string) *gwDir {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 3s, renew_every: 1s}", `  approval_wait: 0s
policy:
  - caller: alice
    allow: [danger]
    approve: [danger]
approvals:
  expire: 10m
  task_lease: 2s
tools:
`+fmt.Sprintf(slowDangerTool, sleep)))
	sleepLog := filepath.Join(g.dir, "sleep.log")
	g.setEnv("SLEEP_LOG", sleepLog)
	// The tool outlives a killed gateway: kill it at the end.
	t.Cleanup(func() {
		data, _ := os.ReadFile(sleepLog)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return g
}

// waitRuns waits until danger ran with text n times (none: within).
func waitRuns(t *testing.T, g *gwDir, text string, n int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); countRuns(t, g, text) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("danger ran %d times with %q after %s, want %d", countRuns(t, g, text), text, within, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplicasTaskRunsWithoutPoll: a task opened on replica A, approved
// with the CLI from another process, runs with no tasks/get at all (a
// replica's sweeper claims it), once across both replicas; replica B then
// answers the client's tasks/get with the result.
func TestReplicasTaskRunsWithoutPoll(t *testing.T) {
	g := tasksReplicasDir(t, "0")
	reps := startReplicas(t, g, "A", "B")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	csA := tasksClient(ctx, t, reps[0].base, "alice-token", nil)
	id, aid := startTask(ctx, t, csA, "no poll")
	g.run(t, "", append([]string{"approvals", "approve", aid, "--as", "bob"}, g.auditFlag()...)...).wantCode(t, exitOK)
	waitRuns(t, g, "no poll", 1, 20*time.Second)
	time.Sleep(time.Second) // both sweepers go on: nothing runs again
	if n := countRuns(t, g, "no poll"); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	csB := tasksClient(ctx, t, reps[1].base, "alice-token", nil)
	done := pollTask(ctx, t, csB, id)
	if isErr, sc := toolResultOf(t, done); done.Status != "completed" || isErr || sc["done"] != true {
		t.Fatalf("task on replica B: %+v", done)
	}
}

// TestReplicaTaskRunnerSIGKILL: replica A runs an approved task's call
// (the tool is running: its intent is durable) and is killed with
// SIGKILL. Replica B, started afterwards on the same store, finds the
// task's lease lapsed, has the store declare A dead (its 3s lease), and
// fails the task with the uncertain-call error naming the call, which
// the journal shows uncertain; the tool never runs again.
func TestReplicaTaskRunnerSIGKILL(t *testing.T) {
	g := tasksReplicasDir(t, "6")
	a := startReplicas(t, g, "A")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	csA := tasksClient(ctx, t, a.base, "alice-token", nil)
	id, aid := startTask(ctx, t, csA, "killed runner")
	g.run(t, "", append([]string{"approvals", "approve", aid, "--as", "bob"}, g.auditFlag()...)...).wantCode(t, exitOK)
	waitRuns(t, g, "killed runner", 1, 20*time.Second) // A's sweeper runs it: the tool is running
	a.kill(t)
	killed := time.Now()

	b := startReplicas(t, g, "B")[0]
	csB := tasksClient(ctx, t, b.base, "alice-token", nil)
	done := pollTask(ctx, t, csB, id)
	t.Logf("the task failed %s after SIGKILL", time.Since(killed).Round(time.Millisecond))
	if done.Status != "failed" || !strings.Contains(string(done.Error), "unknown_outcome") {
		t.Fatalf("task after its runner was killed: %+v\n%s", done, b.log())
	}
	var rpcErr struct {
		Data struct {
			Class  string `json:"class"`
			CallID string `json:"call_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(done.Error, &rpcErr); err != nil || rpcErr.Data.Class != "unknown_outcome" || rpcErr.Data.CallID == "" {
		t.Fatalf("the task's error %s: want the uncertain-call error with its call id (%v)", done.Error, err)
	}
	if in := g.pgJournal(t, "--tool", "danger")[rpcErr.Data.CallID]; in == nil || in["status"] != "uncertain" {
		t.Errorf("the task's call %s in the journal: %v, want uncertain", rpcErr.Data.CallID, in)
	}
	// Past the killed call's own end, and with B sweeping: never re-run.
	time.Sleep(time.Until(killed.Add(7 * time.Second)))
	if n := countRuns(t, g, "killed runner"); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	if again := getTask(ctx, t, csB, id); again.Status != "failed" {
		t.Errorf("a later tasks/get: %s", again.Status)
	}
}
