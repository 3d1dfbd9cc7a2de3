package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
)

func openAt(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newIntent(id, caller string, created time.Time) store.Intent {
	return store.Intent{
		CallID: id, Caller: caller, Session: "sess-1", Tool: "note", DefinitionHash: "sha256:def",
		Arguments: []byte(`{"text":"` + id + `"}`), ArgsDigest: "sha256:args-" + id, CreatedAt: created,
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPersistence writes every kind of state, closes the store, reopens the
// folder and finds all of it, including what recovery owes to intents the
// closed incarnation left started.
func TestPersistence(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state") // Open creates it
	base := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	s1 := openAt(t, dir)
	inc1 := s1.Incarnation()

	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state folder: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "backplane.db")); err != nil {
		t.Errorf("database file: %v", err)
	}
	lock1 := filepath.Join(dir, "incarnations", inc1+".lock")
	if _, err := os.Stat(lock1); err != nil {
		t.Errorf("incarnation lock file while open: %v", err)
	}

	rs := func() []budget.Reservation {
		return []budget.Reservation{{Scope: "caller", Key: "alice", Quota: 10, Amount: 2}, {Scope: "session", Key: "sess-1", Quota: 5, Amount: 1}}
	}
	pending := &store.Approval{ID: "apr-pending", Caller: "alice", Tool: "danger", DefinitionHash: "sha256:d", ArgsDigest: "sha256:x",
		Status: store.ApprovalPending, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	must(t, s1.CreateApproval(ctx, pending))

	i1 := newIntent("i1", "alice", base.Add(1*time.Second))
	i1.IdempotencyKey = "key-1"
	granted := &store.Approval{ID: "apr-granted", Caller: "alice", Tool: "note", DefinitionHash: i1.DefinitionHash, ArgsDigest: i1.ArgsDigest,
		Status: store.ApprovalPending, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	must(t, s1.CreateApproval(ctx, granted))
	must(t, s1.DecideApproval(ctx, granted.ID, store.ApprovalDecision{Approve: true, By: "bob", At: base.Add(time.Millisecond)}))
	_, err := s1.CommitIntent(ctx, &store.CommitRequest{Intent: i1, Reservations: rs(), ApprovalID: granted.ID})
	must(t, err)
	result := []byte(`{"content":{"ok":true},"is_error":false}`)
	must(t, s1.Settle(ctx, "i1", store.Settlement{Status: store.StatusSucceeded, Result: result, At: base.Add(2 * time.Second)}))

	ids := []string{"i2", "i3", "i4", "i5"}
	for k, id := range ids {
		_, err := s1.CommitIntent(ctx, &store.CommitRequest{Intent: newIntent(id, "alice", base.Add(time.Duration(2+k)*time.Second)), Reservations: rs()})
		must(t, err)
	}
	must(t, s1.Settle(ctx, "i2", store.Settlement{Status: store.StatusFailed, ErrorClass: "execution_failure", ErrorMessage: "not started", At: base.Add(time.Minute)}))
	must(t, s1.Settle(ctx, "i3", store.Settlement{Status: store.StatusUncertain, ErrorClass: "timeout", ErrorMessage: "deadline", At: base.Add(time.Minute)}))
	must(t, s1.ResolveIntent(ctx, "i3", false, "operator", base.Add(time.Hour)))
	must(t, s1.Settle(ctx, "i4", store.Settlement{Status: store.StatusUncertain, ErrorClass: "timeout", ErrorMessage: "deadline", At: base.Add(time.Minute)}))
	// i5 stays started when the store closes.
	must(t, s1.Close())
	if _, err := os.Stat(lock1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after Close: %v, want it removed", err)
	}
	if err := s1.Settle(ctx, "i5", store.Settlement{Status: store.StatusSucceeded, At: base}); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("Settle after Close: %v, want ErrClosed", err)
	}

	s2 := openAt(t, dir)
	if s2.Incarnation() == inc1 {
		t.Fatal("reopening reused the incarnation id")
	}
	got, err := s2.GetIntent(ctx, "i1")
	must(t, err)
	want := i1
	want.Status, want.Incarnation, want.ApprovalID, want.Result, want.SettledAt = store.StatusSucceeded, inc1, granted.ID, result, base.Add(2*time.Second)
	if got.CallID != want.CallID || got.Caller != want.Caller || got.Session != want.Session || got.Tool != want.Tool ||
		got.DefinitionHash != want.DefinitionHash || string(got.Arguments) != string(want.Arguments) || got.ArgsDigest != want.ArgsDigest ||
		got.IdempotencyKey != want.IdempotencyKey || got.ApprovalID != want.ApprovalID || got.Incarnation != want.Incarnation ||
		got.Status != want.Status || string(got.Result) != string(want.Result) || !got.CreatedAt.Equal(want.CreatedAt) || !got.SettledAt.Equal(want.SettledAt) {
		t.Errorf("i1 after reopen:\n got %+v\nwant %+v", got, want)
	}
	if byKey, err := s2.GetIntentByKey(ctx, "alice", "key-1"); err != nil || byKey.CallID != "i1" {
		t.Errorf("GetIntentByKey after reopen: %v, %v", byKey, err)
	}
	for id, w := range map[string]store.Status{"i2": store.StatusFailed, "i3": store.StatusNotExecuted, "i4": store.StatusUncertain, "i5": store.StatusUncertain} {
		in, err := s2.GetIntent(ctx, id)
		must(t, err)
		if in.Status != w || in.Incarnation != inc1 {
			t.Errorf("%s after reopen: %s of %s, want %s of %s", id, in.Status, in.Incarnation, w, inc1)
		}
	}
	if in, _ := s2.GetIntent(ctx, "i3"); in.ResolvedBy != "operator" || !in.SettledAt.Equal(base.Add(time.Hour)) {
		t.Errorf("i3 resolution after reopen: %q at %v", in.ResolvedBy, in.SettledAt)
	}
	i5, _ := s2.GetIntent(ctx, "i5")
	if i5.ErrorClass != "unknown_outcome" || !strings.Contains(i5.ErrorMessage, "died") || i5.SettledAt.IsZero() {
		t.Errorf("i5, left started by a closed store, after reopen: class %q message %q settled %v", i5.ErrorClass, i5.ErrorMessage, i5.SettledAt)
	}
	if err := s2.Settle(ctx, "i5", store.Settlement{Status: store.StatusSucceeded, At: base}); !errors.Is(err, store.ErrNotStarted) {
		t.Errorf("Settle of the old incarnation's intent: %v, want ErrNotStarted", err)
	}
	list, err := s2.ListIntents(ctx, store.IntentFilter{})
	must(t, err)
	var order []string
	for _, in := range list {
		order = append(order, in.CallID)
	}
	if fmt.Sprint(order) != "[i5 i4 i3 i2 i1]" {
		t.Errorf("journal after reopen, newest first: %v", order)
	}

	// Budget: i1, i4 and i5 hold theirs; i2 failed and i3 was resolved not
	// executed, so theirs came back.
	usage, err := s2.BudgetUsage(ctx)
	must(t, err)
	if usageText(usage) != "[{caller alice 6} {session sess-1 3}]" {
		t.Errorf("budget after reopen: %v", usage)
	}
	// The session quota (5) is still enforced against what was persisted.
	_, err = s2.CommitIntent(ctx, &store.CommitRequest{Intent: newIntent("i6", "alice", base), Reservations: []budget.Reservation{{Scope: "session", Key: "sess-1", Quota: 5, Amount: 3}}})
	var be *store.BudgetError
	if !errors.As(err, &be) || be.Used != 3 {
		t.Errorf("over-quota commit after reopen: %v", err)
	}

	a, err := s2.GetApproval(ctx, granted.ID)
	must(t, err)
	if a.Status != store.ApprovalApproved || a.DecidedBy != "bob" || a.ConsumedBy != "i1" || !a.DecidedAt.Equal(base.Add(time.Millisecond)) || !a.ExpiresAt.Equal(base.Add(time.Hour)) {
		t.Errorf("granted approval after reopen: %+v", a)
	}
	p, err := s2.FindApproval(ctx, store.ApprovalKey{Caller: "alice", Tool: "danger", DefinitionHash: "sha256:d", ArgsDigest: "sha256:x"}, base.Add(time.Minute))
	if err != nil || p.ID != pending.ID || p.Status != store.ApprovalPending {
		t.Errorf("pending approval after reopen: %+v, %v", p, err)
	}
}

// TestTwoStoresNeverOverspend commits from two Stores on one folder (two
// connections with their own writers, as two processes have) against one
// quota.
func TestTwoStoresNeverOverspend(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	stores := []*sqlite.Store{openAt(t, dir), openAt(t, dir)}
	const goroutines, each, quota = 32, 3, 50
	var ok atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for si, s := range stores {
		for g := range goroutines {
			wg.Go(func() {
				<-start
				for i := range each {
					id := fmt.Sprintf("s%d-g%02d-%d", si, g, i)
					_, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: newIntent(id, "alice", time.Now()),
						Reservations: []budget.Reservation{{Scope: "caller", Key: "alice", Quota: quota, Amount: 1}}})
					var be *store.BudgetError
					switch {
					case err == nil:
						ok.Add(1)
					case errors.As(err, &be):
						if be.Used != quota {
							t.Errorf("%s refused with used %d of %d", id, be.Used, quota)
						}
					default:
						t.Errorf("%s: %v", id, err)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if ok.Load() != quota {
		t.Errorf("%d commits succeeded against quota %d from two stores", ok.Load(), quota)
	}
	for i, s := range stores {
		usage, err := s.BudgetUsage(ctx)
		must(t, err)
		if usageText(usage) != fmt.Sprintf("[{caller alice %d}]", quota) {
			t.Errorf("store %d sees usage %v", i, usage)
		}
		list, err := s.ListIntents(ctx, store.IntentFilter{Limit: 1000})
		must(t, err)
		if len(list) != quota {
			t.Errorf("store %d lists %d intents, want %d", i, len(list), quota)
		}
	}
}

// TestLivePeerNotRecovered: a Store never marks another live incarnation's
// intents uncertain, nor settles them; once that peer closes, Recover does.
func TestLivePeerNotRecovered(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := openAt(t, dir), openAt(t, dir)
	_, err := a.CommitIntent(ctx, &store.CommitRequest{Intent: newIntent("a1", "alice", time.Now())})
	must(t, err)
	if n, err := b.Recover(ctx); err != nil || n != 0 {
		t.Errorf("Recover with the peer alive: %d, %v; want 0", n, err)
	}
	if err := b.Settle(ctx, "a1", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); !errors.Is(err, store.ErrNotStarted) {
		t.Errorf("Settle of a peer's intent: %v, want ErrNotStarted", err)
	}
	if in, _ := b.GetIntent(ctx, "a1"); in == nil || in.Status != store.StatusStarted {
		t.Fatalf("peer's intent after Recover: %+v", in)
	}
	must(t, a.Close())
	if n, err := b.Recover(ctx); err != nil || n != 1 {
		t.Errorf("Recover after the peer closed with an intent started: %d, %v; want 1", n, err)
	}
	if in, _ := b.GetIntent(ctx, "a1"); in.Status != store.StatusUncertain || in.ErrorClass != "unknown_outcome" {
		t.Errorf("peer's intent after it closed: %s %s", in.Status, in.ErrorClass)
	}
	if n, err := b.Recover(ctx); err != nil || n != 0 {
		t.Errorf("second Recover: %d, %v; want 0", n, err)
	}
}

// TestConcurrentOpen opens one new folder from several Stores at the same
// moment: the schema is created once and every Open succeeds.
func TestConcurrentOpen(t *testing.T) {
	dir := t.TempDir()
	const n = 4
	stores := make([]*sqlite.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = sqlite.Open(dir, quiet)
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]bool{}
	for i, s := range stores {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		seen[s.Incarnation()] = true
		if _, err := s.CommitIntent(context.Background(), &store.CommitRequest{Intent: newIntent(fmt.Sprint("c", i), "alice", time.Now())}); err != nil {
			t.Errorf("commit through store %d: %v", i, err)
		}
		defer s.Close()
	}
	if len(seen) != n {
		t.Errorf("%d distinct incarnations for %d stores", len(seen), n)
	}
}

// TestNewerSchemaRefused: a database migrated by a newer program is not
// opened (and so not misread or written) by this one.
func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	must(t, s.Close())
	db, err := sql.Open("sqlite", filepath.Join(dir, sqlite.DBFile))
	must(t, err)
	_, err = db.Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion+1))
	db.Close()
	must(t, err)
	if s, err := sqlite.Open(dir, quiet); err == nil || !strings.Contains(err.Error(), "newer") {
		if s != nil {
			s.Close()
		}
		t.Errorf("Open of a newer schema: %v, want a refusal", err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "incarnations"))
	if len(ents) != 0 {
		t.Errorf("a refused Open left lock files: %v", ents)
	}
}

// TestCancelledCallerWritesNothing: a caller whose context ends gets an
// error only if its write never ran; whatever a call reports, the journal
// agrees with it.
func TestCancelledCallerWritesNothing(t *testing.T) {
	s := openAt(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.CommitIntent(ctx, &store.CommitRequest{Intent: newIntent("dead", "alice", time.Now())}); !errors.Is(err, context.Canceled) {
		t.Errorf("commit with a cancelled context: %v", err)
	}
	if _, err := s.GetIntent(context.Background(), "dead"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("cancelled commit wrote its intent: %v", err)
	}

	const n = 64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Deadlines from 0 to ~2ms land before, during and after the
			// commit of the batch holding the request.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*30*time.Microsecond)
			defer cancel()
			_, errs[i] = s.CommitIntent(ctx, &store.CommitRequest{Intent: newIntent(fmt.Sprint("c", i), "alice", time.Now())})
		})
	}
	wg.Wait()
	var written, refused int
	for i, err := range errs {
		_, gerr := s.GetIntent(context.Background(), fmt.Sprint("c", i))
		switch {
		case err == nil && gerr == nil:
			written++
		case errors.Is(err, context.DeadlineExceeded) && errors.Is(gerr, store.ErrNotFound):
			refused++
		default:
			t.Errorf("c%d: commit returned %v, reading it back %v", i, err, gerr)
		}
	}
	t.Logf("%d written, %d refused by their deadline", written, refused)
}

// usageText prints usage as [{scope key used} ...], with the window as
// @start/per when there is one: the figures these tests compare.
func usageText(us []store.Usage) string {
	parts := make([]string, len(us))
	for i, u := range us {
		w := ""
		if !u.Window.IsZero() {
			w = fmt.Sprintf("@%d/%v", u.Window.Start.Unix(), u.Window.Per)
		}
		parts[i] = fmt.Sprintf("{%s %s%s %d}", u.Scope, u.Key, w, u.Used)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
