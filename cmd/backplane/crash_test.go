package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The crash tests kill real gateway processes with SIGKILL and check, from
// what a fresh process finds in the store, the promises of the journal:
// every invocation has a durable intent written before it; nothing is
// invoked twice; nothing is left started; budget held equals the costs of
// the calls that ran or may have run, never above the quota.

// crashConfig has a tool, rec, whose command appends its stdin (the call's
// arguments, one JSON line carrying a unique n) to the file $REC, and slow,
// which records its stdin the same way and answers three seconds later.
const crashConfig = `store: .backplane
policy:
  - caller: crasher
    allow: [rec, slow]
budgets:
  - scope: caller
    quota: %d
    cost: {rec: %d, slow: 1}
tools:
  - name: rec
    description: Record each invocation.
    input_schema:
      type: object
      properties: {n: {type: integer, minimum: 1}, text: {type: string}}
      required: [n]
      additionalProperties: false
    command: [sh, -c, 'cat >> "$REC"; echo >> "$REC"; echo "{\"ok\":true}"']
    env: [REC]
    timeout: 5s
  - name: slow
    description: Record the invocation, then take a while to answer.
    input_schema: {type: object}
    command: [sh, -c, 'cat >> "$REC"; echo >> "$REC"; sleep 3; echo "{\"ok\":true}"']
    env: [REC]
    timeout: 10s
`

const crashCost = 3

// crashArgs are the arguments of call n: n first, followed by a comma, so
// that a complete n can be told from a cut one in the record.
func crashArgs(n int) string { return fmt.Sprintf(`{"n":%d,"text":"crash"}`, n) }

var recordedN = regexp.MustCompile(`"n":(\d+),`)

// crashDir is a working folder for the crash tests.
type crashDir struct {
	*gwDir
	rec string
}

func newCrashDir(t *testing.T, quota int64) *crashDir {
	g := newGWDir(t, fmt.Sprintf(crashConfig, quota, crashCost))
	c := &crashDir{gwDir: g, rec: filepath.Join(g.dir, "record.log")}
	c.env = append(c.env, "REC="+c.rec, "BACKPLANE="+binary)
	return c
}

// recorded returns the n of every invocation in the record, in order.
func (c *crashDir) recorded(t *testing.T) []int {
	t.Helper()
	data, err := os.ReadFile(c.rec)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ns []int
	for _, m := range recordedN.FindAllStringSubmatch(string(data), -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		ns = append(ns, n)
	}
	return ns
}

// waitRecordStill waits until the record stops growing: a tool process
// whose gateway was killed may still be writing (the command backend runs
// it in a process group of its own).
func (c *crashDir) waitRecordStill() {
	var last int64 = -1
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		var size int64
		if fi, err := os.Stat(c.rec); err == nil {
			size = fi.Size()
		}
		if size == last {
			return
		}
		last = size
		time.Sleep(250 * time.Millisecond)
	}
}

// crashSeed is BACKPLANE_CRASH_SEED when set (to replay a failure), else
// the clock.
func crashSeed(t *testing.T) uint64 {
	if s := os.Getenv("BACKPLANE_CRASH_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BACKPLANE_CRASH_SEED: %v", err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// crashStats is what one scenario observed.
type crashStats struct {
	rounds, recorded, intents, uncertain, succeeded, failed int
	used                                                    int64
}

// crashRounds runs rounds of shell loops of "backplane call" processes,
// three loops side by side (so that processes commit, recover and settle
// concurrently on one store), all in one process group, each round killed
// with SIGKILL after a random 5-150 ms. It returns the highest n used.
func (c *crashDir) crashRounds(t *testing.T, rng *rand.Rand, rounds int) int {
	t.Helper()
	const (
		loops   = 3
		perLoop = 30 // more calls than a round can start
	)
	next := 1
	script := `for j in $(seq 1 $LOOPS); do
  (
    i=$((START + (j-1)*PER)); end=$((i+PER-1))
    while [ "$i" -le "$end" ]; do
      "$BACKPLANE" call --caller crasher --json rec "{\"n\":$i,\"text\":\"crash\"}" >> calls.out 2>&1
      i=$((i+1))
    done
  ) &
done
wait`
	// The kills land at random points of a call's life, scaled by how long
	// one uncut call takes on this machine now: fixed delays kill every
	// round before its first call commits when the machine is loaded.
	start := time.Now()
	callOK(t, c.runJSON(t, exitOK, "", "call", "--caller", "crasher", "rec", crashArgs(next)))
	oneCall := max(time.Since(start), 20*time.Millisecond)
	next++
	for round := range rounds {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = c.dir
		cmd.Env = append(slices.Clone(c.env), "START="+strconv.Itoa(next), "PER="+strconv.Itoa(perLoop), "LOOPS="+strconv.Itoa(loops))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		delay := oneCall/4 + time.Duration(rng.Int64N(int64(3*oneCall)))
		time.Sleep(delay)
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatalf("round %d: kill: %v", round, err)
		}
		cmd.Wait()
		next += loops * perLoop
	}
	return next - 1
}

// checkAnswers checks the answers the killed processes managed to print:
// each is a success or, when allowed, budget_exceeded; anything else (a
// store error under contention, an intent recovered while its process was
// alive) is a failure of the gateway, not of the test.
func (c *crashDir) checkAnswers(t *testing.T, allowed ...string) (answers int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.dir, "calls.out"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue // cut short by the kill, or empty
		}
		answers++
		if m["ok"] == true {
			continue
		}
		e, _ := m["error"].(map[string]any)
		if class, _ := e["class"].(string); !slices.Contains(allowed, class) {
			t.Errorf("a call answered %s", line)
		}
	}
	return answers
}

// checkCrashInvariants recovers the store (journal list opens it) and
// checks the journal, the record and the budget against each other.
func (c *crashDir) checkCrashInvariants(t *testing.T, maxN int, quota int64) crashStats {
	t.Helper()
	c.waitRecordStill()
	var st crashStats

	m := c.runJSON(t, exitOK, "", "journal", "list", "--limit", "10000")
	list, _ := m["intents"].([]any)

	byDigest := make(map[string]int, maxN)
	for n := 1; n <= maxN; n++ {
		byDigest[digest(t, crashArgs(n))] = n
	}
	intentOf := map[int]map[string]any{} // n -> intent
	var held int64
	for _, v := range list {
		in := v.(map[string]any)
		n, ok := byDigest[in["args_digest"].(string)]
		if !ok {
			t.Errorf("intent %v has the arguments of no call made", in)
			continue
		}
		if prev := intentOf[n]; prev != nil {
			t.Errorf("call n=%d has two intents: %v and %v", n, prev, in)
		}
		intentOf[n] = in
		switch in["status"] {
		case "started":
			t.Errorf("intent of n=%d left started after recovery: %v", n, in)
		case "uncertain":
			st.uncertain++
		case "succeeded":
			st.succeeded++
		case "failed":
			st.failed++
		default:
			t.Errorf("intent of n=%d in status %v", n, in["status"])
		}
		if in["status"] != "failed" && in["status"] != "not_executed" {
			held += crashCost
		}
	}
	st.intents = len(intentOf)

	ns := c.recorded(t)
	st.recorded = len(ns)
	seen := map[int]bool{}
	for _, n := range ns {
		if seen[n] {
			t.Errorf("call n=%d was invoked twice", n)
		}
		seen[n] = true
		in := intentOf[n]
		if in == nil {
			t.Errorf("call n=%d was invoked without a durable intent", n)
			continue
		}
		if in["status"] == "failed" {
			t.Errorf("call n=%d ran but its intent says failed (proven not to have run): %v", n, in)
		}
	}
	for n, in := range intentOf {
		if in["status"] == "succeeded" && !seen[n] {
			t.Errorf("intent of n=%d succeeded but the tool never recorded it: %v", n, in)
		}
	}
	// The journal holds the exact arguments, not only their digest.
	checked := 0
	for n, in := range intentOf {
		if in["status"] != "uncertain" && checked >= 3 {
			continue
		}
		show := c.runJSON(t, exitOK, "", "journal", "show", in["call_id"].(string))
		if got := string(mustJSON(t, show["arguments"])); got != crashArgs(n) {
			t.Errorf("intent of n=%d holds arguments %s, want %s", n, got, crashArgs(n))
		}
		checked++
	}

	used, q := budgetLineOf(t, c.gwDir, "caller", "crasher")
	st.used, _ = strconv.ParseInt(used, 10, 64)
	if st.used != held {
		t.Errorf("budget used %d, want %d (cost %d x %d intents that ran or may have run)", st.used, held, crashCost, held/crashCost)
	}
	if st.used > quota {
		t.Errorf("budget used %d is above the quota %d", st.used, quota)
	}
	if st.used > 0 && q != strconv.FormatInt(quota, 10) {
		t.Errorf("budget show quota %s, want %d", q, quota)
	}
	return st
}

// TestCrashSIGKILL is the crash test, with a quota never reached
// and with a small one that is.
func TestCrashSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("kills gateway processes for a few seconds; skipped with -short")
	}
	seed := crashSeed(t)
	t.Logf("seed %d (set BACKPLANE_CRASH_SEED=%d to replay)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6261636b706c616e))
	const rounds = 24

	t.Run("large quota", func(t *testing.T) {
		const quota = 1_000_000
		c := newCrashDir(t, quota)
		maxN := c.crashRounds(t, rng, rounds)
		// After the crashes, the gateway still works: one call, uncut.
		maxN++
		callOK(t, c.runJSON(t, exitOK, "", "call", "--caller", "crasher", "rec", crashArgs(maxN)))
		st := c.checkCrashInvariants(t, maxN, quota)
		st.rounds = rounds
		t.Logf("%d complete answers printed before the kills", c.checkAnswers(t))
		t.Logf("%d rounds: %d invocations recorded, %d intents (%d succeeded, %d uncertain, %d failed), budget used %d",
			st.rounds, st.recorded, st.intents, st.succeeded, st.uncertain, st.failed, st.used)
		if st.recorded < 2 {
			t.Errorf("only %d invocations were recorded: the test proved little", st.recorded)
		}
	})

	t.Run("small quota", func(t *testing.T) {
		const quota = 5 * crashCost
		c := newCrashDir(t, quota)
		maxN := c.crashRounds(t, rng, rounds)
		// Use up what is left of the quota, uncut, until it refuses.
		refused := false
		for range quota/crashCost + 1 {
			maxN++
			r := c.run(t, "", "call", "--caller", "crasher", "--json", "rec", crashArgs(maxN))
			m := decodeObject(t, r.stdout)
			if r.code == exitOK {
				callOK(t, m)
				continue
			}
			r.wantCode(t, exitNegative)
			callError(t, m, "budget_exceeded")
			refused = true
			break
		}
		if !refused {
			t.Fatalf("the quota of %d (cost %d) was never reached", quota, crashCost)
		}
		st := c.checkCrashInvariants(t, maxN, quota)
		st.rounds = rounds
		t.Logf("%d rounds: %d invocations recorded, %d intents (%d succeeded, %d uncertain, %d failed), budget used %d of %d",
			st.rounds, st.recorded, st.intents, st.succeeded, st.uncertain, st.failed, st.used, quota)
		if st.used != quota {
			t.Errorf("after a budget_exceeded refusal, used %d, want the quota %d", st.used, quota)
		}
		answers := c.checkAnswers(t, "budget_exceeded")
		out, _ := os.ReadFile(filepath.Join(c.dir, "calls.out"))
		t.Logf("%d complete answers printed before the kills, %d of them budget_exceeded", answers, bytes.Count(out, []byte(`"class":"budget_exceeded"`)))
	})
}

// TestCrashRecoveryLiveness: a started intent of a live process is left
// alone by another process's recovery; once that process is killed, the
// next process to open the store marks it uncertain, and it is never
// re-run.
func TestCrashRecoveryLiveness(t *testing.T) {
	c := newCrashDir(t, 100)
	start := func(args string) (*exec.Cmd, *bytes.Buffer) {
		cmd := c.command("", "call", "--caller", "crasher", "--json", "slow", args)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	// waitInvoked waits until the tool has recorded args: the intent was
	// committed before, and the tool is now sleeping.
	waitInvoked := func(args string) {
		for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if data, _ := os.ReadFile(c.rec); strings.Contains(string(data), args) {
				return
			}
		}
		t.Fatalf("the tool never recorded %s", args)
	}
	statusOf := func(args string) string {
		for _, v := range c.runJSON(t, exitOK, "", "journal", "list")["intents"].([]any) {
			in := v.(map[string]any)
			if in["args_digest"] == digest(t, args) {
				return in["status"].(string)
			}
		}
		return "(none)"
	}

	live := `{"case":"live"}`
	cmd, out := start(live)
	waitInvoked(live)
	if st := statusOf(live); st != "started" {
		t.Errorf("while its process is alive, the intent is %s, want started", st)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the live call failed: %v\n%s", err, out)
	}
	if st := statusOf(live); st != "succeeded" {
		t.Errorf("after the call returned, the intent is %s, want succeeded", st)
	}

	killed := `{"case":"killed"}`
	cmd, _ = start(killed)
	waitInvoked(killed)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if st := statusOf(killed); st != "uncertain" {
		t.Errorf("after SIGKILL, the intent is %s, want uncertain", st)
	}
	c.waitRecordStill()
	data, _ := os.ReadFile(c.rec)
	if n := strings.Count(string(data), killed); n != 1 {
		t.Errorf("the killed call was invoked %d times", n)
	}
	if used := budgetUsed(t, c.gwDir, "caller", "crasher"); used != "2" {
		t.Errorf("used %s, want 2 (a succeeded and an uncertain call of cost 1)", used)
	}
}
