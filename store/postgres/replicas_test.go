package postgres_test

// Several replicas on one database: real second processes (this test
// binary run again as TestHelperProcess), shared quotas, recovery after a
// SIGKILL, fencing of a replica that lost its lease.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
)

// The helper process reads its mode and schema from these; without them it
// is an ordinary, skipped test.
const (
	helperModeEnv   = "BACKPLANE_PG_HELPER_MODE"
	helperSchemaEnv = "BACKPLANE_PG_HELPER_SCHEMA"
)

// The shared quota of TestReplicasNeverOverspend: each commit takes 1 from
// caller alice (quota 30) and 1 from one of three sessions (quota 12 each).
// 3 × 12 > 30, so exactly 30 commits fit, whatever the interleaving.
const (
	sharedQuota  = 30
	sessionQuota = 12
	sessions     = 3
	perReplica   = 40 // commits attempted by each of the three replicas
	// With windows (TestReplicasNeverOverspendWindows), each commit also
	// takes 1 from alice's quota of the window of the hour i%2 (of two
	// fixed windows, not the clock's): 2 × 12 < 30 and < 3 × 12, so exactly
	// 12 commits fit in each window.
	windowQuota   = 12
	crashLeaseTTL = 2 * time.Second
)

// Started intents the crashing helper leaves in flight, and the ones it
// settles, which recovery must not touch.
var (
	crashStarted = []string{"crash-1", "crash-2", "crash-3"}
	crashSettled = map[string]store.Status{"done-ok": store.StatusSucceeded, "done-failed": store.StatusFailed}
)

// TestHelperProcess is the second replica of the tests below.
//
//   - mode reserve: opens the store, prints "ready", waits for a line on
//     stdin, makes perReplica concurrent commits against the shared quota,
//     prints "won <n>" and exits.
//   - mode crash: opens the store with a lease of crashLeaseTTL, commits
//     crashStarted and the crashSettled intents (settling those), prints
//     "ready <incarnation>" and blocks until it is killed.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperModeEnv)
	if mode == "" {
		t.Skip("helper process of the replica tests; runs only as their child")
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(2)
	}
	opts := &postgres.Options{Schema: os.Getenv(helperSchemaEnv), Logger: quietLogger()}
	if mode == "crash" {
		opts.LeaseTTL = crashLeaseTTL
	}
	s, err := postgres.Open(ctx, os.Getenv(URLEnv), opts)
	if err != nil {
		fail(err)
	}
	switch mode {
	case "reserve", "reserve-windows":
		fmt.Println("ready")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fail(err)
		}
		won, err := contend(s, "child", perReplica, mode == "reserve-windows")
		if err != nil {
			fail(err)
		}
		fmt.Println("won", won)
		if err := s.Close(); err != nil {
			fail(err)
		}
	case "crash":
		for _, id := range append(append([]string{}, crashStarted...), "done-ok", "done-failed") {
			r := &store.CommitRequest{Intent: intent(id, "alice"), Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 100, Amount: 5}}}
			if _, err := s.CommitIntent(ctx, r); err != nil {
				fail(err)
			}
		}
		for id, st := range crashSettled {
			if err := s.Settle(ctx, id, store.Settlement{Status: st, At: time.Now()}); err != nil {
				fail(err)
			}
		}
		fmt.Println("ready", s.Incarnation())
		select {} // until SIGKILL
	default:
		fail(fmt.Errorf("unknown helper mode %q", mode))
	}
}

func intent(callID, caller string) store.Intent {
	return store.Intent{
		CallID: callID, Caller: caller, Tool: "note", DefinitionHash: "sha256:def-note",
		Arguments: []byte(`{"text":"x"}`), ArgsDigest: "sha256:args-" + callID, CreatedAt: time.Now(),
	}
}

// contendWindows are the two windows of contend with windows.
var contendWindows = [2]budget.Window{
	budget.WindowAt(time.Hour, time.Date(2030, 1, 1, 10, 30, 0, 0, time.UTC)),
	budget.WindowAt(time.Hour, time.Date(2030, 1, 1, 11, 30, 0, 0, time.UTC)),
}

// contend makes n concurrent commits against the shared quota, half of
// them listing the session's reservation first, and returns how many
// succeeded. Any refusal other than a BudgetError that really did not fit
// is an error. With windows, each commit also reserves in one of
// contendWindows.
func contend(s store.Store, prefix string, n int, windows bool) (int, error) {
	var won atomic.Int64
	errs := make(chan error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in := intent(fmt.Sprintf("%s-%03d", prefix, i), "alice")
			in.Session = fmt.Sprintf("s%d", i%sessions)
			rs := []budget.Reservation{
				{Scope: "caller", Key: "alice", Quota: sharedQuota, Amount: 1},
				{Scope: "session", Key: in.Session, Quota: sessionQuota, Amount: 1},
			}
			if i%2 == 1 {
				rs[0], rs[1] = rs[1], rs[0]
			}
			if windows {
				w := budget.Reservation{Scope: "caller", Key: "alice", Quota: windowQuota, Amount: 1, Window: contendWindows[i%2]}
				rs = append([]budget.Reservation{w}, rs...)
			}
			<-start
			_, err := s.CommitIntent(context.Background(), &store.CommitRequest{Intent: in, Reservations: rs})
			var be *store.BudgetError
			switch {
			case err == nil:
				won.Add(1)
			case errors.As(err, &be) && be.Used+be.Requested > be.Quota:
			default:
				errs <- fmt.Errorf("commit %s: %v", in.CallID, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	return int(won.Load()), <-errs
}

// startHelper runs TestHelperProcess in mode on schema and returns it
// with its stdin and the channel of its stdout lines.
func startHelper(t *testing.T, mode, schema string) (*exec.Cmd, io.WriteCloser, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperModeEnv+"="+mode, helperSchemaEnv+"="+schema)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, stdin, lines
}

// expect returns the helper's next line starting with word (or "error").
func expect(t *testing.T, lines <-chan string, word string) []string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("helper exited before saying %q", word)
			}
			f := strings.Fields(l)
			if len(f) > 0 && f[0] == "error" {
				t.Fatalf("helper: %s", l)
			}
			if len(f) > 0 && f[0] == word {
				return f
			}
		case <-timeout:
			t.Fatalf("helper did not say %q within 60s", word)
		}
	}
}

// Three replicas (two Stores with their own connections in this process
// and a second process) commit concurrently against one caller quota and
// three session quotas: exactly the quota is reserved, never more.
func TestReplicasNeverOverspend(t *testing.T) { testNeverOverspend(t, false) }

// The same with a quota per window besides: exactly the window quota is
// reserved in each window, across replicas.
func TestReplicasNeverOverspendWindows(t *testing.T) { testNeverOverspend(t, true) }

func testNeverOverspend(t *testing.T, windows bool) {
	schema := newSchema(t)
	a := openStore(t, schema, nil)
	b := openStore(t, schema, nil)
	mode, want := "reserve", sharedQuota
	if windows {
		mode, want = "reserve-windows", 2*windowQuota
	}
	cmd, stdin, lines := startHelper(t, mode, schema)
	expect(t, lines, "ready")

	type result struct {
		won int
		err error
	}
	results := make(chan result, 2)
	for _, r := range []struct {
		s      store.Store
		prefix string
	}{{a, "a"}, {b, "b"}} {
		go func() {
			won, err := contend(r.s, r.prefix, perReplica, windows)
			results <- result{won, err}
		}()
	}
	_, err := io.WriteString(stdin, "go\n")
	must(t, err)
	total, winners := 0, 0
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Error(r.err)
		}
		total += r.won
		if r.won > 0 {
			winners++
		}
	}
	f := expect(t, lines, "won")
	var childWon int
	if _, err := fmt.Sscan(f[1], &childWon); err != nil {
		t.Fatalf("helper said %q", f)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	// A group commit can take a whole quota in one flush, so one replica
	// may win every commit and the others only refusals (each refusal is
	// checked by contend to be a budget refusal with the quota reached);
	// what the test needs is that some replica won and that the three
	// together reserved exactly the quota.
	if childWon > 0 {
		winners++
	}
	if winners == 0 {
		t.Errorf("no replica won a commit: the test shows nothing")
	}
	total += childWon
	if total != want {
		t.Errorf("%d commits succeeded across three replicas, want exactly %d", total, want)
	}

	ctx := context.Background()
	usage, err := a.BudgetUsage(ctx)
	must(t, err)
	var sessionSum int64
	windowsSeen := 0
	for _, u := range usage {
		switch {
		case u.Scope == "caller" && u.Key == "alice" && !u.Window.IsZero():
			windowsSeen++
			if !windows || u.Used != windowQuota || (!u.Window.Start.Equal(contendWindows[0].Start) && !u.Window.Start.Equal(contendWindows[1].Start)) {
				t.Errorf("window usage %+v, want %d in one of %v", u, windowQuota, contendWindows)
			}
		case u.Scope == "caller" && u.Key == "alice":
			if u.Used != int64(want) {
				t.Errorf("caller alice holds %d, want %d", u.Used, want)
			}
		case u.Scope == "session":
			if u.Used > sessionQuota {
				t.Errorf("session %s holds %d, above its quota %d", u.Key, u.Used, sessionQuota)
			}
			sessionSum += u.Used
		default:
			t.Errorf("unexpected usage %+v", u)
		}
	}
	if windows && windowsSeen != 2 {
		t.Errorf("%d windows in the usage, want 2", windowsSeen)
	}
	if sessionSum != int64(want) {
		t.Errorf("sessions hold %d in all, want %d", sessionSum, want)
	}
	list, err := b.ListIntents(ctx, store.IntentFilter{Limit: 1000})
	must(t, err)
	if len(list) != want {
		t.Errorf("%d intents in the journal, want %d", len(list), want)
	}
	perCommit := 2
	if windows {
		perCommit = 3
	}
	if n := countReservations(t, schema); n != perCommit*want {
		t.Errorf("%d reservations recorded in the intents, want %d", n, perCommit*want)
	}
}

// leaseAlive reports whether incarnation id's lease is unexpired on the
// database's clock.
func leaseAlive(t *testing.T, schema, id string) bool {
	t.Helper()
	var alive bool
	must(t, sqlConn(t, schema).QueryRow(context.Background(),
		`SELECT lease_expires_at > clock_timestamp() FROM incarnations WHERE id = $1`, id).Scan(&alive))
	return alive
}

func incarnationState(t *testing.T, schema, id string) string {
	t.Helper()
	var state string
	must(t, sqlConn(t, schema).QueryRow(context.Background(), `SELECT state FROM incarnations WHERE id = $1`, id).Scan(&state))
	return state
}

// A replica killed with SIGKILL keeps its started intents started while its
// lease is alive; once the lease expires, the other replica's Recover marks
// exactly those intents uncertain. The other replica serves calls all
// along.
func TestLeaseRecoveryAfterSIGKILL(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	// A lease long enough that this store's own periodic recovery does not
	// run during the test: only the Recover calls below recover.
	parent := openStore(t, schema, &postgres.Options{LeaseTTL: time.Minute})
	cmd, _, lines := startHelper(t, "crash", schema)
	childInc := expect(t, lines, "ready")[1]

	// The parent keeps serving: commit and settle its own calls.
	var served atomic.Int64
	serveErr := make(chan error, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("parent-%04d", i)
			r := &store.CommitRequest{Intent: intent(id, "bob"), Reservations: []budget.Reservation{{Scope: "caller", Key: "bob", Quota: 1 << 40, Amount: 1}}}
			_, err := parent.CommitIntent(ctx, r)
			if err == nil {
				err = parent.Settle(ctx, id, store.Settlement{Status: store.StatusSucceeded, Result: []byte(`{}`), At: time.Now()})
			}
			if err != nil {
				serveErr <- err
				return
			}
			served.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()

	must(t, cmd.Process.Signal(syscall.SIGKILL))
	werr := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", werr)
	}
	killed := time.Now()
	servedAtKill := served.Load()

	// Dead, but its lease is alive: nothing is marked.
	n, err := parent.Recover(ctx)
	must(t, err)
	if !leaseAlive(t, schema, childInc) {
		t.Fatal("the child's lease expired before the first Recover; the machine is too slow for this test's 2s lease")
	}
	if n != 0 {
		t.Errorf("Recover while the killed child's lease is alive marked %d intents, want 0", n)
	}
	for _, id := range crashStarted {
		in, err := parent.GetIntent(ctx, id)
		must(t, err)
		if in.Status != store.StatusStarted || in.Incarnation != childInc {
			t.Errorf("%s while the child's lease is alive: %s of %s, want started of %s", id, in.Status, in.Incarnation, childInc)
		}
	}
	if err := parent.Settle(ctx, crashStarted[0], store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); !errors.Is(err, store.ErrNotStarted) {
		t.Errorf("the parent settling the child's intent: %v, want ErrNotStarted", err)
	}

	// Once the lease expires, Recover marks exactly the started intents.
	total, calls := 0, 0
	deadline := time.Now().Add(crashLeaseTTL + 5*time.Second)
	for total < len(crashStarted) && time.Now().Before(deadline) {
		n, err := parent.Recover(ctx)
		must(t, err)
		calls++
		if n > 0 && leaseAlive(t, schema, childInc) {
			t.Fatalf("Recover marked %d intents while the child's lease is still alive", n)
		}
		total += n
		if total < len(crashStarted) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	recovered := time.Since(killed)
	if total != len(crashStarted) {
		t.Fatalf("Recover marked %d intents in all within %v of the kill, want %d", total, recovered, len(crashStarted))
	}
	if calls < 2 {
		t.Errorf("recovered at the first poll (%v after the kill): the lease was not waited for", recovered)
	}
	t.Logf("recovered %v after the SIGKILL (lease %v), after %d Recover calls", recovered, crashLeaseTTL, calls)
	for _, id := range crashStarted {
		in, err := parent.GetIntent(ctx, id)
		must(t, err)
		if in.Status != store.StatusUncertain || in.ErrorClass != "unknown_outcome" ||
			!strings.Contains(in.ErrorMessage, childInc) || in.SettledAt.IsZero() || in.Incarnation != childInc {
			t.Errorf("%s after recovery: %+v", id, in)
		}
	}
	for id, st := range crashSettled {
		in, err := parent.GetIntent(ctx, id)
		must(t, err)
		if in.Status != st || in.ErrorClass != "" {
			t.Errorf("%s, settled %s before the kill, is now %s %q", id, st, in.Status, in.ErrorClass)
		}
	}
	if st := incarnationState(t, schema, childInc); st != "dead" {
		t.Errorf("the child's incarnation is %s, want dead", st)
	}
	if st := incarnationState(t, schema, parent.Incarnation()); st != "alive" {
		t.Errorf("the parent's incarnation is %s, want alive", st)
	}
	// Uncertain calls keep their budget: 3 uncertain + 1 succeeded, 5 each.
	usage, err := parent.BudgetUsage(ctx)
	must(t, err)
	for _, u := range usage {
		if u.Key == "alice" && u.Used != 20 {
			t.Errorf("alice holds %d after recovery, want 20", u.Used)
		}
	}
	if n, err := parent.Recover(ctx); err != nil || n != 0 {
		t.Errorf("a second Recover: %d, %v; want 0", n, err)
	}

	select {
	case err := <-serveErr:
		t.Fatalf("the parent stopped serving: %v", err)
	default:
	}
	if got := served.Load(); got <= servedAtKill {
		t.Errorf("the parent served %d calls before the kill and %d by the recovery: it did not keep serving", servedAtKill, got)
	}
}

// A replica whose lease expired can settle what nobody has marked yet, and
// is refused new calls; once another replica has declared it dead it can
// settle nothing recovery marked and commit nothing at all.
func TestFencing(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	a := openStore(t, schema, &postgres.Options{LeaseTTL: time.Second})
	b := openStore(t, schema, &postgres.Options{LeaseTTL: time.Minute})
	rs := func() []budget.Reservation {
		return []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 100, Amount: 1}}
	}
	for _, id := range []string{"a-1", "a-2", "a-3"} {
		_, err := a.CommitIntent(ctx, &store.CommitRequest{Intent: intent(id, "alice"), Reservations: rs()})
		must(t, err)
	}
	must(t, a.Settle(ctx, "a-3", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}))

	resume := a.PauseRenewal()
	defer resume()
	deadline := time.Now().Add(5 * time.Second)
	for leaseAlive(t, schema, a.Incarnation()) {
		if time.Now().After(deadline) {
			t.Fatal("A's lease still alive 5s after its renewal stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Expired, not yet declared dead: no new calls, but a call in progress
	// can still record its outcome (nobody has marked it).
	_, err := a.CommitIntent(ctx, &store.CommitRequest{Intent: intent("a-4", "alice"), Reservations: rs()})
	if !errors.Is(err, postgres.ErrLeaseExpired) {
		t.Errorf("commit with an expired lease: %v, want ErrLeaseExpired", err)
	}
	must(t, a.Settle(ctx, "a-2", store.Settlement{Status: store.StatusFailed, At: time.Now()}))

	n, err := b.Recover(ctx)
	must(t, err)
	if n != 1 {
		t.Errorf("B's Recover marked %d intents, want 1 (a-1)", n)
	}
	if st := incarnationState(t, schema, a.Incarnation()); st != "dead" {
		t.Fatalf("A's incarnation is %s after B's Recover, want dead", st)
	}

	// A comes back: its renewal cannot revive it, it cannot settle what B
	// marked, nor commit anything.
	resume()
	for _, st := range []store.Status{store.StatusSucceeded, store.StatusFailed, store.StatusUncertain} {
		err := a.Settle(ctx, "a-1", store.Settlement{Status: st, Result: []byte(`{"late":true}`), At: time.Now()})
		if !errors.Is(err, store.ErrNotStarted) {
			t.Errorf("A settling a-1 %s after it was marked: %v, want ErrNotStarted", st, err)
		}
	}
	in, err := b.GetIntent(ctx, "a-1")
	must(t, err)
	if in.Status != store.StatusUncertain || in.Result != nil {
		t.Errorf("a-1 after A's late settlements: %s %q, want uncertain without result", in.Status, in.Result)
	}
	_, err = a.CommitIntent(ctx, &store.CommitRequest{Intent: intent("a-5", "alice"), Reservations: rs()})
	if !errors.Is(err, postgres.ErrLeaseLost) {
		t.Errorf("commit after being declared dead: %v, want ErrLeaseLost", err)
	}
	for _, id := range []string{"a-4", "a-5"} {
		if _, err := b.GetIntent(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s was written: %v", id, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // a renewal or two
	if leaseAlive(t, schema, a.Incarnation()) || incarnationState(t, schema, a.Incarnation()) != "dead" {
		t.Error("A's renewal revived a dead incarnation")
	}
	// a-1 uncertain and a-3 succeeded hold their budget; a-2 failed does not.
	usage, err := b.BudgetUsage(ctx)
	must(t, err)
	if len(usage) != 1 || usage[0].Used != 2 {
		t.Errorf("budget after fencing: %+v, want alice 2", usage)
	}
}

// syncBuffer is an io.Writer safe for the store's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// The renewal goroutine itself notices that its incarnation was declared
// dead, says so at error level, and the store refuses calls from then on
// without asking the database.
func TestLeaseLostNoticedByRenewal(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	var logs syncBuffer
	a := openStore(t, schema, &postgres.Options{LeaseTTL: time.Second, RenewEvery: 100 * time.Millisecond,
		Logger: slogText(&logs)})
	b := openStore(t, schema, &postgres.Options{LeaseTTL: time.Minute})
	resume := a.PauseRenewal()
	deadline := time.Now().Add(5 * time.Second)
	for leaseAlive(t, schema, a.Incarnation()) {
		if time.Now().After(deadline) {
			t.Fatal("A's lease still alive 5s after its renewal stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err := b.Recover(ctx)
	must(t, err)
	if a.Healthy(context.Background()) != nil {
		t.Fatal("A reported itself unhealthy before it was declared dead")
	}
	if a.Lost() {
		t.Fatal("A knew it was lost before any renewal")
	}
	resume()
	deadline = time.Now().Add(3 * time.Second)
	for !a.Lost() {
		if time.Now().After(deadline) {
			t.Fatal("A's renewal did not notice within 3s that A was declared dead")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "LEASE LOST") {
		t.Errorf("no error-level LEASE LOST in the log:\n%s", logs.String())
	}
	_, err = a.CommitIntent(ctx, &store.CommitRequest{Intent: intent("late", "alice")})
	if !errors.Is(err, postgres.ErrLeaseLost) {
		t.Errorf("commit after the loss: %v, want ErrLeaseLost", err)
	}
	if err := a.Healthy(ctx); !errors.Is(err, postgres.ErrLeaseLost) {
		t.Errorf("Healthy after the loss: %v, want ErrLeaseLost (a health check must stop traffic)", err)
	}
}

// A replica closed with calls in progress leaves them started; the next
// Recover by another replica marks them uncertain at once (no lease to
// wait for), and the closed replica stays closed, not dead.
func TestRecoverAfterClose(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	b := openStore(t, schema, &postgres.Options{LeaseTTL: time.Minute})
	a, err := postgres.Open(ctx, testURL(t), &postgres.Options{Schema: schema, Logger: quietLogger()})
	must(t, err)
	_, err = a.CommitIntent(ctx, &store.CommitRequest{Intent: intent("in-flight", "alice")})
	must(t, err)
	_, err = a.CommitIntent(ctx, &store.CommitRequest{Intent: intent("done", "alice")})
	must(t, err)
	must(t, a.Settle(ctx, "done", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}))
	if n, err := b.Recover(ctx); err != nil || n != 0 {
		t.Errorf("Recover while A is open: %d, %v; want 0", n, err)
	}
	must(t, a.Close())
	if _, err := a.CommitIntent(ctx, &store.CommitRequest{Intent: intent("after", "alice")}); !errors.Is(err, postgres.ErrClosed) {
		t.Errorf("commit after Close: %v, want ErrClosed", err)
	}
	if st := incarnationState(t, schema, a.Incarnation()); st != "closed" {
		t.Errorf("A's incarnation after Close is %s, want closed", st)
	}
	n, err := b.Recover(ctx)
	must(t, err)
	if n != 1 {
		t.Errorf("Recover after A closed marked %d, want 1", n)
	}
	in, err := b.GetIntent(ctx, "in-flight")
	must(t, err)
	if in.Status != store.StatusUncertain {
		t.Errorf("in-flight after recovery: %s, want uncertain", in.Status)
	}
	if st := incarnationState(t, schema, a.Incarnation()); st != "closed" {
		t.Errorf("A's incarnation after recovery is %s, want closed", st)
	}
}
