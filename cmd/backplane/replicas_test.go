package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/testkit"
)

// The replica tests run two real `backplane serve` processes on one
// PostgreSQL schema, as a team runs replicas behind a load balancer, and
// check what must then hold across processes: one quota spent once, a
// killed replica's calls declared uncertain only after its lease expired
// (while the other goes on serving), and an approval decided elsewhere
// releasing the call that waits for it.

// pgSchema is a schema of its own for one test, in the test database
// (testkit.PostgresSchema).
type pgSchema struct {
	url    string // the database's URL with search_path naming the schema
	schema string
}

// newPGSchema names a new schema (the store creates it) and drops it, with
// everything in it, when the test ends. Called first in a test, its cleanup
// runs last: after every process using the schema is gone.
func newPGSchema(t *testing.T) *pgSchema {
	t.Helper()
	u, schema := testkit.PostgresSchema(t)
	return &pgSchema{url: u, schema: schema}
}

// conn is a plain connection into the schema, for what the tests read
// behind the gateway's back; closed when the test ends.
func (d *pgSchema) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(d.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{d.schema}.Sanitize()
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// replica is one `backplane serve --http` process.
type replica struct {
	name   string
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT, once it listens
	addr   chan string
	exited chan struct{}
	mu     sync.Mutex
	stderr bytes.Buffer
}

// startReplicas starts one serve process per name in the folder (the same
// configuration, so the same database), all at once (they migrate the new
// schema concurrently), and waits until each listens. Each listens on a
// free port the kernel picks (--http 127.0.0.1:0) and says which in its
// log. Every process is killed when the test ends.
func startReplicas(t *testing.T, g *gwDir, names ...string) []*replica {
	t.Helper()
	var reps []*replica
	for _, name := range names {
		r := &replica{
			name:   name,
			cmd:    g.command("", "serve", "--http", "127.0.0.1:0"),
			addr:   make(chan string, 1),
			exited: make(chan struct{}),
		}
		pipe, err := r.cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(pipe)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				r.mu.Lock()
				r.stderr.WriteString(sc.Text() + "\n")
				r.mu.Unlock()
				if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case r.addr <- m[1]:
					default:
					}
				}
			}
			r.cmd.Wait()
			close(r.exited)
		}()
		t.Cleanup(func() {
			r.cmd.Process.Kill()
			select {
			case <-r.exited:
			case <-time.After(10 * time.Second):
				t.Errorf("replica %s (pid %d) did not exit within 10s of SIGKILL", r.name, r.cmd.Process.Pid)
			}
			if t.Failed() {
				t.Logf("replica %s log:\n%s", r.name, r.log())
			}
		})
		reps = append(reps, r)
	}
	for _, r := range reps {
		select {
		case a := <-r.addr:
			r.base = "http://" + a
		case <-r.exited:
			t.Fatalf("replica %s exited before listening:\n%s", r.name, r.log())
		case <-time.After(20 * time.Second):
			t.Fatalf("replica %s did not say where it listens within 20s:\n%s", r.name, r.log())
		}
	}
	return reps
}

func (r *replica) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL replica %s: %v", r.name, err)
	}
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("replica %s did not die within 10s of SIGKILL", r.name)
	}
}

// connect opens an MCP session with the replica over streamable HTTP, as
// the caller of token. The client declares no elicitation capability, so
// a call needing an approval waits for a decision taken elsewhere.
func (r *replica) connect(ctx context.Context, t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "replica-test", Version: "v0"}, nil)
	tr := &mcp.StreamableClientTransport{
		Endpoint:   r.base + "/mcp",
		HTTPClient: &http.Client{Transport: tokenTransport(token)},
	}
	cs, err := client.Connect(ctx, tr, sessionEra)
	if err != nil {
		t.Fatalf("connect to replica %s: %v\n%s", r.name, err, r.log())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// errorClass is the class of a refused call's result (structuredContent
// carries the gateway's error), or "" for a result that is not an error.
func errorClass(res *mcp.CallToolResult) string {
	if res == nil || !res.IsError {
		return ""
	}
	b := structuredOf(res)
	var e struct {
		Class string `json:"class"`
	}
	if json.Unmarshal(b, &e) != nil || e.Class == "" {
		return "(no class: " + string(b) + ")"
	}
	return e.Class
}

// callIDOf is the gateway's call id in a result's _meta.
func callIDOf(res *mcp.CallToolResult) string {
	id, _ := res.Meta["backplane/call_id"].(string)
	return id
}

// auditFlag keeps the CLI's audit events (and the store's recovery
// warnings) in a file: with a postgres:// store they would otherwise go to
// stderr, which the --json verbs keep empty.
func (g *gwDir) auditFlag() []string {
	return []string{"--audit-log", filepath.Join(g.dir, "cli-audit.log")}
}

// pgJournal is `backplane journal list --json` run as a separate process
// (it opens the store, and so runs its recovery, first).
func (g *gwDir) pgJournal(t *testing.T, extra ...string) map[string]map[string]any {
	t.Helper()
	return g.journal(t, append(g.auditFlag(), extra...)...)
}

// replicasConfig is the configuration every process of a test shares.
// %[1]s is the store URL, %[2]s the postgres section, %[3]s the rest.
const replicasConfig = `store: '%[1]s'
postgres: %[2]s
serve:
  tokens: {"alice-token": alice}
%[3]s`

// noteTool records each invocation, its arguments as one line written in
// one write, in $NOTE_LOG.
const noteTool = `  - name: note
    description: Record the call.
    input_schema:
      type: object
      properties: {n: {type: integer, minimum: 1}}
      required: [n]
      additionalProperties: false
    command: [sh, -c, 'printf "%s\n" "$(cat)" >> "$NOTE_LOG"; echo "{\"ok\":true}"']
    env: [NOTE_LOG]
    timeout: 10s
`

// dangerTool is noteTool's kin for the approval tests: the call, recorded
// in $NOTE_LOG once someone approved it.
const dangerTool = `  - name: danger
    description: Record the call, once someone approved it.
    input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    command: [sh, -c, 'printf "%s\n" "$(cat)" >> "$NOTE_LOG"; echo "{\"done\":true}"']
    env: [NOTE_LOG]
    timeout: 10s
`

var noteN = regexp.MustCompile(`"n":(\d+)`)

// recordedNotes returns the n of every invocation of note.
func (g *gwDir) recordedNotes(t *testing.T) []int {
	t.Helper()
	var ns []int
	for _, line := range g.notes(t) {
		m := noteN.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("note log line %q holds no n", line)
		}
		n, _ := strconv.Atoi(m[1])
		ns = append(ns, n)
	}
	return ns
}

// TestReplicasShareQuota: 80 concurrent calls through two replicas against
// one quota of 25 spend it exactly once: 25 run, 55 are refused with
// budget_exceeded, and the budget and the journal, read by a third
// process, say the same.
func TestReplicasShareQuota(t *testing.T) {
	db := newPGSchema(t)
	const (
		quota      = 25
		perReplica = 4  // client sessions per replica, calling concurrently
		perSession = 10 // calls per session: 80 in all
	)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s, renew_every: 5s, max_conns: 16}",
		fmt.Sprintf(`policy:
  - caller: alice
    allow: [note]
budgets:
  - scope: caller
    quota: %d
tools:
%s`, quota, noteTool)))
	reps := startReplicas(t, g, "A", "B")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type outcome struct {
		replica string
		n       int
		class   string // "" for a success
		callID  string
		err     error
	}
	var sessions []*mcp.ClientSession
	var owners []string
	for _, r := range reps {
		for range perReplica {
			sessions = append(sessions, r.connect(ctx, t, "alice-token"))
			owners = append(owners, r.name)
		}
	}
	out := make(chan outcome, len(sessions)*perSession)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for k := range perSession {
				n := i*perSession + k + 1
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"n": n}})
				o := outcome{replica: owners[i], n: n, err: err}
				if err == nil {
					o.class, o.callID = errorClass(res), callIDOf(res)
				}
				out <- o
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	close(out)

	succeeded := map[string]int{} // per replica
	var okNs []int
	var okCallIDs []string
	refused := 0
	for o := range out {
		switch {
		case o.err != nil:
			t.Errorf("call n=%d through replica %s: %v", o.n, o.replica, o.err)
		case o.class == "":
			succeeded[o.replica]++
			okNs = append(okNs, o.n)
			okCallIDs = append(okCallIDs, o.callID)
			if o.callID == "" {
				t.Errorf("call n=%d through replica %s succeeded without a call id in _meta", o.n, o.replica)
			}
		case o.class == "budget_exceeded":
			refused++
		default:
			t.Errorf("call n=%d through replica %s: class %s, want a success or budget_exceeded", o.n, o.replica, o.class)
		}
	}
	total := succeeded["A"] + succeeded["B"]
	t.Logf("%d calls in %v: %d succeeded (A %d, B %d), %d budget_exceeded",
		len(sessions)*perSession, elapsed.Round(time.Millisecond), total, succeeded["A"], succeeded["B"], refused)
	if total != quota || refused != len(sessions)*perSession-quota {
		t.Errorf("%d calls succeeded and %d were refused; want exactly %d and %d: the quota is shared by the replicas",
			total, refused, quota, len(sessions)*perSession-quota)
	}

	// The tool ran once per successful call, never for a refused one.
	ran := g.recordedNotes(t)
	slices.Sort(ran)
	slices.Sort(okNs)
	if !slices.Equal(ran, okNs) {
		t.Errorf("the tool ran for n in %v; the successful calls were %v", ran, okNs)
	}

	// A third process reads the same budget and journal.
	b := g.runJSON(t, exitOK, "", append([]string{"budget", "show"}, g.auditFlag()...)...)
	lines, _ := b["budgets"].([]any)
	if len(lines) != 1 {
		t.Fatalf("budget show: %v, want the one line of alice", b)
	}
	l := lines[0].(map[string]any)
	if l["scope"] != "caller" || l["key"] != "alice" || l["used"] != json.Number(strconv.Itoa(quota)) || l["quota"] != json.Number(strconv.Itoa(quota)) {
		t.Errorf("budget show: %v, want caller alice used %d of %d", l, quota, quota)
	}
	j := g.pgJournal(t, "--limit", "1000")
	if len(j) != quota {
		t.Errorf("the journal holds %d intents, want %d", len(j), quota)
	}
	for id, in := range j {
		if in["status"] != "succeeded" || in["tool"] != "note" || in["caller"] != "alice" {
			t.Errorf("intent %s: %v, want a succeeded note by alice", id, in)
		}
	}
	for _, id := range okCallIDs {
		if j[id] == nil {
			t.Errorf("the successful call %s is not in the journal", id)
		}
	}
}

// sleeperTool records its process id (the leader of the process group the
// command backend gives it) in $SLEEP_LOG, then takes 30s to answer.
const sleeperTool = `  - name: sleeper
    description: Take a long time.
    input_schema: {type: object}
    command: [sh, -c, 'echo "$$" >> "$SLEEP_LOG"; sleep 30; echo "{}"']
    env: [SLEEP_LOG]
    timeout: 60s
`

// TestReplicaSIGKILLLease: replica A is killed with SIGKILL while a call
// runs on it. Its intent stays started while A's lease (3s) is alive,
// becomes uncertain once it has expired, and is never run again; replica B
// serves calls all along.
func TestReplicaSIGKILLLease(t *testing.T) {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 3s, renew_every: 1s}", `policy:
  - caller: alice
    allow: [note, sleeper]
tools:
`+noteTool+sleeperTool))
	sleepLog := filepath.Join(g.dir, "sleep.log")
	g.setEnv("SLEEP_LOG", sleepLog)
	// The sleeper outlives its killed gateway (its own process group):
	// kill it at the end.
	t.Cleanup(func() {
		data, _ := os.ReadFile(sleepLog)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
	sleeps := func() []string {
		data, err := os.ReadFile(sleepLog)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.Fields(string(data))
	}
	pg := db.conn(t)
	reps := startReplicas(t, g, "A", "B")
	a, b := reps[0], reps[1]

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	csA := a.connect(ctx, t, "alice-token")
	csB := b.connect(ctx, t, "alice-token")

	aDone := make(chan error, 1)
	go func() {
		_, err := csA.CallTool(ctx, &mcp.CallToolParams{Name: "sleeper", Arguments: map[string]any{}})
		aDone <- err
	}()

	// Wait until the call runs: its intent is started and the tool has
	// begun.
	var callID string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if callID == "" {
			for id, in := range g.pgJournal(t, "--tool", "sleeper") {
				if in["status"] != "started" {
					t.Fatalf("the sleeper's intent is %v before anything was killed", in["status"])
				}
				callID = id
			}
		}
		if callID != "" && len(sleeps()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sleeper did not start within 15s (intent %q, invocations %v):\n%s", callID, sleeps(), a.log())
		}
	}
	var incA string
	var lease0 time.Time
	if err := pg.QueryRow(ctx, `SELECT i.incarnation, c.lease_expires_at FROM intents i
		JOIN incarnations c ON c.id = i.incarnation WHERE i.call_id = $1`, callID).Scan(&incA, &lease0); err != nil {
		t.Fatal(err)
	}
	// Let A renew its lease at least once while the call runs, so that
	// what expires below is a renewed lease, not the one A opened with.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var lease time.Time
		if err := pg.QueryRow(ctx, `SELECT lease_expires_at FROM incarnations WHERE id = $1`, incA).Scan(&lease); err != nil {
			t.Fatal(err)
		}
		if lease.After(lease0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica A did not renew its lease within 5s (renew_every 1s):\n%s", a.log())
		}
	}

	a.kill(t)
	killed := time.Now()

	// leaseLeft is how long A's lease still runs, on the database's clock.
	leaseLeft := func() time.Duration {
		var us int64
		if err := pg.QueryRow(ctx, `SELECT (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1e6)::bigint
			FROM incarnations WHERE id = $1`, incA).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}

	// At once, another process opens the store (and recovers): A's lease
	// is alive, so its call is still started.
	j := g.pgJournal(t, "--tool", "sleeper")
	left := leaseLeft()
	t.Logf("journal list %v after SIGKILL; A's lease still runs %v", time.Since(killed).Round(time.Millisecond), left.Round(time.Millisecond))
	if got := j[callID]["status"]; got != "started" {
		if left > 0 {
			t.Fatalf("intent %s is %v while replica A's lease still runs %v: declared uncertain too early", callID, got, left)
		}
		t.Fatalf("inconclusive: the check after SIGKILL ran after A's lease had expired (%v ago); intent %v", -left, got)
	}
	// The killed replica's client gets no result. It may first try to
	// resume its stream (the server sent event ids), so it is given time,
	// and checked only after the lease check above, which cannot wait.
	select {
	case err := <-aDone:
		if err == nil {
			t.Errorf("the call on the killed replica returned a result")
		}
	case <-time.After(60 * time.Second):
		t.Errorf("the client of the killed replica did not notice within 60s")
	}

	// Meanwhile B serves calls; wait for the intent to become uncertain.
	n := 0
	callB := func() {
		t.Helper()
		n++
		res, err := csB.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"n": n}})
		if err != nil {
			t.Fatalf("replica B, call %d after A died: %v\n%s", n, err, b.log())
		}
		if c := errorClass(res); c != "" {
			t.Fatalf("replica B, call %d after A died: %s", n, c)
		}
	}
	var final map[string]any
	for deadline := killed.Add(12 * time.Second); ; {
		callB()
		in := g.pgJournal(t, "--tool", "sleeper")[callID]
		if in["status"] == "uncertain" {
			final = in
			break
		}
		if in["status"] != "started" {
			t.Fatalf("intent %s went from started to %v", callID, in["status"])
		}
		if time.Now().After(deadline) {
			t.Fatalf("intent %s still started %v after SIGKILL with a 3s lease", callID, time.Since(killed).Round(time.Millisecond))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("uncertain %v after SIGKILL; replica B served %d calls meanwhile", time.Since(killed).Round(time.Millisecond), n)
	callB() // and still does

	if final["error_class"] != "unknown_outcome" {
		t.Errorf("uncertain intent: %v, want error_class unknown_outcome", final)
	}
	// Declared only after the lease expired, on the database's clock.
	var settled, expires time.Time
	var state string
	if err := pg.QueryRow(ctx, `SELECT s.settled_at, c.lease_expires_at, c.state FROM intents i
		JOIN settlements s ON s.seq = i.seq JOIN incarnations c ON c.id = i.incarnation WHERE i.call_id = $1`, callID).Scan(&settled, &expires, &state); err != nil {
		t.Fatal(err)
	}
	if !settled.After(expires) || state != "dead" {
		t.Errorf("intent settled at %v, A's lease expired at %v, A is %s: want settled after the expiry, A dead", settled, expires, state)
	}
	if len(g.recordedNotes(t)) != n {
		t.Errorf("B's note ran %d times for %d calls", len(g.recordedNotes(t)), n)
	}
	// Whoever recovered said so, naming A.
	cli, _ := os.ReadFile(filepath.Join(g.dir, "cli-audit.log"))
	if !strings.Contains(b.log()+string(cli), incA) {
		t.Errorf("neither replica B's log nor the CLI's audit log names the dead incarnation %s", incA)
	}
	// Never re-run: one invocation, and none more a moment later.
	time.Sleep(500 * time.Millisecond)
	if s := sleeps(); len(s) != 1 {
		t.Errorf("the sleeper was invoked %d times (%v), want once", len(s), s)
	}
}

// TestReplicaApprovalAcrossProcesses: a call waits on replica A for an
// approval; another process on the same database approves it; the call on
// A runs within moments.
func TestReplicaApprovalAcrossProcesses(t *testing.T) {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s}", `  approval_wait: 20s
policy:
  - caller: alice
    allow: [danger]
    approve: [danger]
approvals:
  expire: 10m
tools:
`+dangerTool))
	reps := startReplicas(t, g, "A")
	a := reps[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := a.connect(ctx, t, "alice-token")

	type answer struct {
		res *mcp.CallToolResult
		err error
		at  time.Time
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "danger", Arguments: map[string]any{"text": "across replicas"}})
		done <- answer{res, err, time.Now()}
	}()

	var id string
	for deadline := time.Now().Add(15 * time.Second); id == ""; time.Sleep(100 * time.Millisecond) {
		for aid, ap := range g.approvalsByID(t, append(g.auditFlag(), "--status", "pending")...) {
			if ap["tool"] == "danger" && ap["caller"] == "alice" {
				id = aid
			}
		}
		if id == "" && time.Now().After(deadline) {
			t.Fatalf("no pending approval request within 15s:\n%s", a.log())
		}
	}
	select {
	case ans := <-done:
		t.Fatalf("the call returned before any decision: %v %+v", ans.err, ans.res)
	default:
	}
	if len(g.notes(t)) != 0 {
		t.Fatal("the tool ran before the approval")
	}

	g.run(t, "", append([]string{"approvals", "approve", id, "--as", "bob"}, g.auditFlag()...)...).wantCode(t, exitOK)
	approved := time.Now()

	var ans answer
	select {
	case ans = <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the call waiting on replica A did not end within 15s of the approval:\n%s", a.log())
	}
	latency := ans.at.Sub(approved)
	t.Logf("the call on A ended %v after the approval on another process", latency.Round(time.Millisecond))
	if ans.err != nil || ans.res.IsError {
		t.Fatalf("the approved call: %v, class %q", ans.err, errorClass(ans.res))
	}
	if latency > 3*time.Second {
		t.Errorf("the call ended %v after the approval, want within 3s", latency)
	}
	if notes := g.notes(t); len(notes) != 1 || !strings.Contains(notes[0], "across replicas") {
		t.Errorf("the tool's invocations: %q, want one", notes)
	}
	ap := g.approvalsByID(t, g.auditFlag()...)[id]
	if ap["status"] != "approved" || ap["decided_by"] != "bob" || ap["consumed_by"] != callIDOf(ans.res) {
		t.Errorf("approval after the call: %v, want approved by bob, consumed by %s", ap, callIDOf(ans.res))
	}
	if in := g.pgJournal(t)[callIDOf(ans.res)]; in["status"] != "succeeded" {
		t.Errorf("the approved call's intent: %v", in)
	}
}

// napTool records its arguments in $NAP_LOG, then answers two seconds
// later: long enough to be caught running.
const napTool = `  - name: nap
    description: Record the call, answer two seconds later.
    input_schema: {type: object}
    command: [sh, -c, 'printf "%s\n" "$(cat)" >> "$NAP_LOG"; sleep 2; echo "{\"ok\":true}"']
    env: [NAP_LOG]
    timeout: 30s
`

// TestReplicaPausedPastLeaseIsFenced: replica A is stopped (SIGSTOP) while
// a call runs on it, long enough for its lease to expire and the call to
// be declared uncertain; then it continues (SIGCONT). Fencing: A cannot
// settle the call that was declared uncertain, and it starts no new call.
func TestReplicaPausedPastLeaseIsFenced(t *testing.T) {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 3s, renew_every: 1s}", `policy:
  - caller: alice
    allow: [note, nap]
tools:
`+noteTool+napTool))
	napLog := filepath.Join(g.dir, "nap.log")
	g.setEnv("NAP_LOG", napLog)
	naps := func() int {
		data, err := os.ReadFile(napLog)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.Count(string(data), "\n")
	}
	pg := db.conn(t)
	reps := startReplicas(t, g, "A", "B")
	a, b := reps[0], reps[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	csA := a.connect(ctx, t, "alice-token")
	csB := b.connect(ctx, t, "alice-token")

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	aDone := make(chan answer, 1)
	go func() {
		res, err := csA.CallTool(ctx, &mcp.CallToolParams{Name: "nap", Arguments: map[string]any{"first": true}})
		aDone <- answer{res, err}
	}()
	var callID string
	for deadline := time.Now().Add(15 * time.Second); callID == "" || naps() == 0; time.Sleep(20 * time.Millisecond) {
		if callID == "" {
			for id := range g.pgJournal(t, "--tool", "nap", "--status", "started") {
				callID = id
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nap did not start within 15s:\n%s", a.log())
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	stopped := time.Now()

	// B (or the CLI) declares A dead once its lease expires; B serves on.
	n := 0
	for deadline := stopped.Add(12 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n++
		res, err := csB.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"n": n}})
		if err != nil || res.IsError {
			t.Fatalf("replica B, call %d while A is stopped: %v %s", n, err, errorClass(res))
		}
		st := g.pgJournal(t, "--tool", "nap")[callID]["status"]
		if st == "uncertain" {
			break
		}
		if st != "started" {
			t.Fatalf("the nap's intent went from started to %v while A was stopped", st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nap's intent still started %v after A was stopped with a 3s lease", time.Since(stopped))
		}
	}
	if naps() != 1 {
		t.Fatalf("the nap ran %d times", naps())
	}

	// A continues: its nap has long finished, but the answer cannot be
	// recorded over the uncertain one.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var first answer
	select {
	case first = <-aDone:
	case <-time.After(15 * time.Second):
		t.Fatalf("the call on A did not end within 15s of SIGCONT:\n%s", a.log())
	}
	t.Logf("the call on A after SIGCONT: err %v, result %s", first.err, resultText(first.res))
	if first.err == nil && !first.res.IsError {
		t.Errorf("the call on the replica declared dead was answered as a success")
	}
	var status string
	var state string
	if err := pg.QueryRow(ctx, `SELECT coalesce(s.status, 'started'), c.state FROM intents i LEFT JOIN settlements s ON s.seq = i.seq
		JOIN incarnations c ON c.id = i.incarnation WHERE i.call_id = $1`, callID).Scan(&status, &state); err != nil {
		t.Fatal(err)
	}
	if status != "uncertain" || state != "dead" {
		t.Errorf("after A continued: intent %s, A %s; want uncertain, dead", status, state)
	}

	// Nor does A start new calls: refused before the tool runs.
	res, err := csA.CallTool(ctx, &mcp.CallToolParams{Name: "nap", Arguments: map[string]any{"second": true}})
	switch {
	case err != nil:
		t.Logf("a new call on A: %v", err)
	case !res.IsError:
		t.Errorf("replica A, declared dead, ran a new call")
	default:
		t.Logf("a new call on A: %s", resultText(res))
	}
	if naps() != 1 {
		t.Errorf("the nap ran %d times, want once", naps())
	}
	code, body := httpGet(t, a.base+"/healthz", "")
	t.Logf("A's /healthz after it lost its lease: %d %s", code, strings.TrimSpace(body))
}

// resultText is a result's structuredContent, for the log.
func resultText(res *mcp.CallToolResult) string {
	if res == nil {
		return "(none)"
	}
	return fmt.Sprintf("isError %v %s", res.IsError, structuredOf(res))
}

// TestReplicasOverviewCountsBoth: calls made on two replicas, some
// refused, are counted by either replica's overview and listed by either
// one's journal (issue 26: the overview and the refusal rows must work
// across replicas on PostgreSQL).
func TestReplicasOverviewCountsBoth(t *testing.T) {
	db := newPGSchema(t)
	g := newGWDir(t, fmt.Sprintf(replicasConfig, db.url, "{lease_ttl: 15s, renew_every: 5s, max_conns: 8}",
		fmt.Sprintf(`operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: [note]
tools:
%s`, noteTool)))
	reps := startReplicas(t, g, "A", "B")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, r := range reps {
		cs := r.connect(ctx, t, "alice-token")
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"n": i + 1}}); err != nil || res.IsError {
			t.Fatalf("%s: note: %v %+v", r.name, err, res)
		}
		// Refused: n must be at least 1.
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"n": 0}}); err == nil && !res.IsError {
			t.Fatalf("%s: an invalid note was not refused", r.name)
		}
	}
	for _, r := range reps {
		code, body := httpGet(t, r.base+"/ui/api/overview?range=15m", "ops-token")
		var o struct {
			Totals map[string]int `json:"totals"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &o) != nil {
			t.Fatalf("%s: overview: %d %s", r.name, code, body)
		}
		if o.Totals["succeeded"] != 2 || o.Totals["refused:validation"] != 2 {
			t.Errorf("%s's overview counts %v, want 2 succeeded and 2 refused:validation (one of each per replica)", r.name, o.Totals)
		}
		code, body = httpGet(t, r.base+"/ui/api/journal?status=refused", "ops-token")
		if code != http.StatusOK || strings.Count(body, `"refused": true`) != 2 {
			t.Errorf("%s's journal of refusals: %d %s, want both replicas' two", r.name, code, body)
		}
	}
}
