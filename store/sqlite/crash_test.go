package sqlite_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// helperEnv names the state folder TestHelperProcess works in; without it
// the helper is an ordinary, empty test.
const helperEnv = "BACKPLANE_SQLITE_HELPER_DIR"

// The helper's journal: started intents it leaves in flight, and one each
// settled succeeded and failed, which recovery must not touch.
var (
	helperStarted = []string{"crash-1", "crash-2", "crash-3"}
	helperSettled = map[string]store.Status{"done-ok": store.StatusSucceeded, "done-failed": store.StatusFailed}
)

func helperReservation() []budget.Reservation {
	return []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 100, Amount: 5}}
}

// TestHelperProcess is the child of TestCrashRecovery: a gateway-like
// process that commits intents, says "ready <incarnation>" and blocks until
// it is killed.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashRecovery; runs only as its child")
	}
	ctx := context.Background()
	s, err := sqlite.Open(dir, quiet)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if os.Getenv(helperSyncEnv) != "" {
		helperSyncs(s)
		return
	}
	for _, id := range append(append([]string{}, helperStarted...), "done-ok", "done-failed") {
		if _, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: newIntent(id, "alice", time.Now()), Reservations: helperReservation()}); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	for id, st := range helperSettled {
		if err := s.Settle(ctx, id, store.Settlement{Status: st, At: time.Now()}); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	fmt.Println("ready", s.Incarnation())
	select {} // until SIGKILL
}

// helperSyncEnv makes TestHelperProcess commit syncCommits intents one by one
// between two markers written to stdout, then exit.
const helperSyncEnv = "BACKPLANE_SQLITE_HELPER_SYNCS"

const syncCommits = 10

func helperSyncs(s *sqlite.Store) {
	os.Stdout.WriteString("begin-commits\n")
	for i := range syncCommits {
		if _, err := s.CommitIntent(context.Background(), &store.CommitRequest{Intent: newIntent(fmt.Sprint("sync-", i), "alice", time.Now())}); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	os.Stdout.WriteString("end-commits\n")
	// Settlements are not synced on their own (a lost one leaves its
	// intent started, for recovery to mark uncertain)...
	os.Stdout.WriteString("begin-settles\n")
	for i := range syncCommits {
		if err := s.Settle(context.Background(), fmt.Sprint("sync-", i), store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	os.Stdout.WriteString("end-settles\n")
	// ...but the writer syncs them soon after, even when nothing else is
	// written: wait until it has.
	for deadline := time.Now().Add(30 * time.Second); s.Stats().WALSyncs == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	os.Stdout.WriteString("end-idle\n")
	s.Close()
}

// TestCommitsAreSynced traces a real process with strace: between the
// markers around syncCommits sequential commits, the process calls fsync or
// fdatasync at least once per commit; during as many settlements it calls
// neither (they are written, not synced), and the writer syncs them once
// idle. (Durability cannot be observed from inside; this observes the
// system calls it rests on.)
func TestCommitsAreSynced(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed: cannot observe the sync system calls")
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-o", trace, "-e", "trace=fsync,fdatasync,write,pwrite64",
		os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir(), helperSyncEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "PTRACE") || strings.Contains(string(out), "ptrace") {
			t.Skipf("strace cannot trace here: %s", out)
		}
		t.Fatalf("traced helper: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	must(t, err)
	phase, syncs, writes := "", map[string]int{}, map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(l, `"begin-commits\n"`):
			phase = "commits"
		case strings.Contains(l, `"end-commits\n"`), strings.Contains(l, `"end-idle\n"`):
			phase = ""
		case strings.Contains(l, `"begin-settles\n"`):
			phase = "settles"
		case strings.Contains(l, `"end-settles\n"`):
			phase = "idle"
		case strings.Contains(l, "fsync(") || strings.Contains(l, "fdatasync("):
			syncs[phase]++
		case strings.Contains(l, "pwrite64("):
			writes[phase]++
		}
	}
	if syncs["commits"] < syncCommits {
		t.Errorf("%d sync calls during %d commits, want at least one per commit", syncs["commits"], syncCommits)
	}
	if syncs["settles"] != 0 || writes["settles"] < syncCommits {
		t.Errorf("%d sync and %d pwrite calls during %d settlements, want none and at least one per settlement",
			syncs["settles"], writes["settles"], syncCommits)
	}
	if syncs["idle"] == 0 {
		t.Errorf("no sync call after the settlements: they were never made durable")
	}
	t.Logf("sync calls: %d during %d commits, %d during as many settlements (%d pwrite), %d after them",
		syncs["commits"], syncCommits, syncs["settles"], writes["settles"], syncs["idle"])
}

// TestCrashRecovery runs a real child process that commits intents and is
// killed with SIGKILL: while it lives, nothing of its journal is touched;
// once it is dead, Recover marks exactly its started intents uncertain and
// removes its lock file.
func TestCrashRecovery(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 && (f[0] == "ready" || f[0] == "error") {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	var childInc string
	select {
	case l, ok := <-lines:
		f := strings.Fields(l)
		if !ok || f[0] != "ready" || len(f) != 2 {
			t.Fatalf("child did not get ready: %q", l)
		}
		childInc = f[1]
	case <-time.After(30 * time.Second):
		t.Fatal("child not ready after 30s")
	}
	lock := filepath.Join(dir, "incarnations", childInc+".lock")

	// The child is alive: Open (which runs Recover) and Recover leave its
	// intents started.
	s := openAt(t, dir)
	if n, err := s.Recover(ctx); err != nil || n != 0 {
		t.Errorf("Recover while the child lives: %d, %v; want 0", n, err)
	}
	for _, id := range helperStarted {
		in, err := s.GetIntent(ctx, id)
		must(t, err)
		if in.Status != store.StatusStarted || in.Incarnation != childInc {
			t.Errorf("%s while the child lives: %s of %s, want started of %s", id, in.Status, in.Incarnation, childInc)
		}
	}
	if err := s.Settle(ctx, helperStarted[0], store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); !errors.Is(err, store.ErrNotStarted) {
		t.Errorf("settling the live child's intent: %v, want ErrNotStarted", err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Errorf("child's lock file while it lives: %v", err)
	}

	must(t, cmd.Process.Signal(syscall.SIGKILL))
	werr := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", werr)
	}

	n, err := s.Recover(ctx)
	must(t, err)
	if n != len(helperStarted) {
		t.Errorf("Recover after the kill marked %d intents, want %d", n, len(helperStarted))
	}
	for _, id := range helperStarted {
		in, err := s.GetIntent(ctx, id)
		must(t, err)
		if in.Status != store.StatusUncertain || in.ErrorClass != "unknown_outcome" ||
			!strings.Contains(in.ErrorMessage, "died") || in.SettledAt.IsZero() || in.Incarnation != childInc {
			t.Errorf("%s after the kill: %+v", id, in)
		}
	}
	for id, st := range helperSettled {
		in, err := s.GetIntent(ctx, id)
		must(t, err)
		if in.Status != st || in.ErrorClass != "" {
			t.Errorf("%s, settled %s before the kill, is now %s %q", id, st, in.Status, in.ErrorClass)
		}
	}
	if _, err := os.Stat(lock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("child's lock file after recovery: %v, want it removed", err)
	}
	// Uncertain calls keep their budget: 3 uncertain + 1 succeeded, 5 each.
	usage, err := s.BudgetUsage(ctx)
	must(t, err)
	if usageText(usage) != "[{caller alice 20}]" {
		t.Errorf("budget after recovery: %v, want alice 20", usage)
	}
	// Recovery is done once: another process opening the folder (here a
	// second Store) finds nothing more to recover.
	if n, err := openAt(t, dir).Recover(ctx); err != nil || n != 0 {
		t.Errorf("Recover by a later process: %d, %v; want 0", n, err)
	}
	list, err := s.ListIntents(ctx, store.IntentFilter{Status: store.StatusUncertain})
	must(t, err)
	if len(list) != len(helperStarted) {
		t.Errorf("%d uncertain intents listed, want %d", len(list), len(helperStarted))
	}
}
