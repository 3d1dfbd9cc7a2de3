package conformancefixture_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The suite's tasks extension scenarios (io.modelcontextprotocol/tasks,
// tagged "extension" in 0.2.0-alpha.12, so --spec-version leaves them
// out) through `backplane serve`, where a task is a call waiting for an
// operator's approval. The scenarios call fixed tools: greet (answers at
// once) and the task-supporting slow_compute, failing_job,
// protocol_error_job and confirm_delete, which the configuration below
// defines as command tools under approval, and an operator approves the
// requests as they appear (operatorLoop, the CLI in another process), so
// each such call is answered with a task that completes once approved,
// but the 60-second computations the scenarios cancel, left pending.

// tasksConfig serves the scenarios' tools to the suite's anonymous
// caller.
const tasksConfig = `store: .backplane
workspace: .
operators:
  - {name: ops, token: ops-token}
policy:
  - caller: conformance
    allow: [greet, slow_compute, failing_job, protocol_error_job, confirm_delete]
    approve: [slow_compute, failing_job, protocol_error_job, confirm_delete]
serve:
  http: 127.0.0.1:0
  anonymous_caller: conformance
  max_sessions_per_caller: 1024
  approval_wait: 0s
tools:
  - name: greet
    description: Greets by name (answers at once).
    input_schema: {type: object, properties: {name: {type: string}}}
    safety: {read_only: true}
    command: [sh, -c, 'n=$(sed -n "s/.*\"name\" *: *\"\([^\"]*\)\".*/\1/p"); printf "{\"content\":[{\"type\":\"text\",\"text\":\"Hello, %s!\"}]}" "$n"']
    timeout: 10s
  - name: slow_compute
    description: Sleeps the given seconds, then answers.
    input_schema: {type: object, properties: {seconds: {type: number}, label: {type: string}}}
    command: [sh, -c, 's=$(sed -n "s/.*\"seconds\" *: *\([0-9.]*\).*/\1/p"); sleep "${s:-0}"; printf "{\"content\":[{\"type\":\"text\",\"text\":\"computed\"}]}"']
    timeout: 120s
  - name: failing_job
    description: Answers a tool error.
    input_schema: {type: object}
    command: [sh, -c, 'cat >/dev/null; printf "{\"content\":[{\"type\":\"text\",\"text\":\"the job failed\"}],\"isError\":true}"']
    timeout: 10s
  - name: protocol_error_job
    description: Fails (exits 3).
    input_schema: {type: object}
    command: [sh, -c, 'exit 3']
    timeout: 10s
  - name: confirm_delete
    description: Deletes, once approved.
    input_schema: {type: object}
    command: [sh, -c, 'cat >/dev/null; printf "{\"content\":[{\"type\":\"text\",\"text\":\"deleted\"}]}"']
    timeout: 10s
`

// Why the tasks scenarios that do not pass do not apply to Backplane's
// tasks. None is a fault of the fixture: these run without it.
const (
	reasonTaskNoInput  = "Backplane's tasks wait for an operator, never for the client: they have no inputRequests and tasks/update has nothing to answer (a caller's own approval is asked through input_required before any task: self_approve)"
	reasonTaskCompose  = "the scenario's tool gathers input by input_required and then makes a task; in Backplane a self-approval given by input_required runs the call, and a task is made only for an operator's approval"
	reasonTaskProtocol = "a backend's failure reaches the caller as a tool result with isError (class execution_failure), the answer the call gets without a task, so its task completes with it: the extension reserves failed for JSON-RPC errors"
	reasonTaskRequired = "no Backplane tool requires a task: a call needing an operator from a client without the extension is answered approval_required, which it retries once approved"
)

// expectedTasks lists the tasks scenarios that do not pass through
// Backplane, and why; it only shrinks.
var expectedTasks = map[string]expected{
	"tasks-lifecycle":           {fail, reasonTaskProtocol},
	"tasks-mrtr-input":          {fail, reasonTaskNoInput},
	"tasks-mrtr-composition":    {fail, reasonTaskCompose},
	"tasks-required-task-error": {fail, reasonTaskRequired},
}

// operatorLoop approves, with the CLI, every pending request as it
// appears, but those of a slow_compute of 60 seconds or more, until ctx
// ends: the scenarios make those to have a task that stays working while
// they look at it and cancel it (so it is cancelled, never run), and
// wait for no more than 10 s for the others to end.
func operatorLoop(ctx context.Context, t *testing.T, backplane, dir, cfg string) {
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, backplane, append(args, "--config", cfg)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "BACKPLANE_OPERATOR_TOKEN=ops-token")
		var out bytes.Buffer
		cmd.Stdout = &out
		err := cmd.Run()
		return out.Bytes(), err
	}
	left := map[string]bool{} // the requests left pending on purpose
	for ; ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		out, err := run("approvals", "list", "--status", "pending", "--json")
		var list struct {
			Approvals []struct {
				ID   string `json:"id"`
				Tool string `json:"tool"`
			} `json:"approvals"`
		}
		if err != nil || json.Unmarshal(out, &list) != nil {
			if ctx.Err() == nil {
				t.Logf("approvals list: %v %s", err, out)
			}
			continue
		}
		for _, a := range list.Approvals {
			if left[a.ID] {
				continue
			}
			if a.Tool == "slow_compute" {
				out, err := run("approvals", "show", a.ID, "--json")
				var v struct {
					Arguments struct {
						Seconds float64 `json:"seconds"`
					} `json:"arguments"`
				}
				if err != nil || json.Unmarshal(out, &v) != nil {
					continue // asked again at the next round
				}
				if v.Arguments.Seconds >= 60 {
					left[a.ID] = true
					continue
				}
			}
			run("approvals", "approve", a.ID) // one cancelled meanwhile is refused: fine
		}
	}
}

func TestSuiteTasksThroughBackplane(t *testing.T) {
	t.Parallel()
	node, script := suite2026(t)
	backplane, _ := binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "backplane.yaml")
	if err := os.WriteFile(cfg, []byte(tasksConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	url := start(t, serveListening, dir, backplane, "serve", "--config", cfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { operatorLoop(ctx, t, backplane, dir, cfg) })
	defer func() { cancel(); wg.Wait() }()

	var names []string
	for _, n := range scenarios(t, node, script) {
		if strings.HasPrefix(n, "tasks-") {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		t.Fatal("the suite lists no tasks-* scenario")
	}
	results := map[string]result{}
	for _, n := range names {
		for k, v := range runSuite(t, node, script, url, "--scenario", n) {
			if k != n {
				t.Fatalf("asked for %s, the suite ran %s", n, k)
			}
			results[k] = v
		}
	}
	compare(t, names, results, expectedTasks)
	if len(results) != len(names) {
		t.Errorf("%d scenarios ran, %d listed", len(results), len(names))
	}
}
