package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// syncGate holds each sync of the WAL, after the real one, until the test
// releases it with the error the sync is to report.
type syncGate struct {
	started chan struct{}
	release chan error
}

func gateSyncs(t *testing.T, s *Store) *syncGate {
	g := &syncGate{started: make(chan struct{}, 16), release: make(chan error)}
	f := func() error {
		g.started <- struct{}{}
		return <-g.release
	}
	s.syncFault.Store(&f)
	t.Cleanup(func() { s.syncFault.Store(nil) }) // before the Store's Close
	return g
}

func (g *syncGate) waitStarted(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.started:
	case <-time.After(30 * time.Second):
		t.Fatalf("no sync started for %s", what)
	}
}

// commitAsync commits intent id from a goroutine; its result arrives on the
// channel returned.
func commitAsync(s *Store, id string) chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := s.CommitIntent(context.Background(), intentReq(id, "alice"))
		ch <- err
	}()
	return ch
}

func waitResult(t *testing.T, ch chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// waitCommitted waits until the writer has committed more than n
// transactions.
func waitCommitted(t *testing.T, s *Store, n int64, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Stats().Transactions <= n; {
		if time.Now().After(deadline) {
			t.Fatalf("%s was never committed", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSyncPipelined holds the WAL's syncs to show the order the writer and
// the syncer keep: a commit made while a sync runs is committed (and
// visible) at once, but its caller is answered only by a sync that started
// after it, never by the one in progress.
func TestSyncPipelined(t *testing.T) {
	s := openDir(t, t.TempDir())
	g := gateSyncs(t, s)

	a := commitAsync(s, "a")
	g.waitStarted(t, "a")
	tx := s.Stats().Transactions
	b := commitAsync(s, "b")
	waitCommitted(t, s, tx, "b")
	if _, err := s.GetIntent(context.Background(), "b"); err != nil {
		t.Errorf("b, committed during a's sync, is not visible: %v", err)
	}
	g.release <- nil // a's sync succeeds
	if err := waitResult(t, a, "a"); err != nil {
		t.Fatalf("a: %v", err)
	}
	g.waitStarted(t, "b") // the sync that covers b, started after its commit
	select {
	case err := <-b:
		t.Fatalf("b was answered (%v) before a sync that started after its commit returned", err)
	default:
	}
	g.release <- nil
	if err := waitResult(t, b, "b"); err != nil {
		t.Fatalf("b: %v", err)
	}
	if st := s.Stats(); st.Synced < 2 {
		t.Errorf("stats %+v: want a and b counted synced", st)
	}
}

// TestSyncFailureBreaksWrites fails one sync of the WAL: its callers are
// told, so is the caller committed while it ran (whose later sync would
// succeed, but cannot vouch for the frames the failed one lost), and every
// write after it is refused. Reopening the folder recovers the intents the
// callers were told failed as uncertain: none is ever run again.
func TestSyncFailureBreaksWrites(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	if _, err := s.CommitIntent(ctx, intentReq("before", "alice")); err != nil {
		t.Fatal(err)
	}
	g := gateSyncs(t, s)

	c := commitAsync(s, "c")
	g.waitStarted(t, "c")
	tx := s.Stats().Transactions
	d := commitAsync(s, "d")
	waitCommitted(t, s, tx, "d")
	g.release <- errors.New("injected I/O error")
	if err := waitResult(t, c, "c"); err == nil || !strings.Contains(err.Error(), "injected I/O error") {
		t.Errorf("c, whose sync failed: %v, want the sync's error", err)
	}
	if err := waitResult(t, d, "d"); !errors.Is(err, errSyncFailed) {
		t.Errorf("d, committed during the failed sync: %v, want errSyncFailed", err)
	}
	select {
	case <-g.started:
		t.Errorf("a sync ran after the failed one")
	default:
	}
	if _, err := s.CommitIntent(ctx, intentReq("e", "alice")); !errors.Is(err, errSyncFailed) {
		t.Errorf("a commit after the failure: %v, want errSyncFailed", err)
	}
	if err := s.Settle(ctx, "before", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); !errors.Is(err, errSyncFailed) {
		t.Errorf("a settlement after the failure: %v, want errSyncFailed", err)
	}
	if _, err := s.GetIntent(ctx, "e"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("e, refused, reads back: %v", err)
	}
	if err := s.Close(); !errors.Is(err, errSyncFailed) {
		t.Errorf("Close of the broken store: %v, want errSyncFailed", err)
	}

	again := openDir(t, dir)
	for _, id := range []string{"before", "c", "d"} {
		in, err := again.GetIntent(ctx, id)
		if err != nil || in.Status != store.StatusUncertain {
			t.Errorf("%s after reopening: %+v, %v; want uncertain", id, in, err)
		}
	}
}

// TestWALFileKept checks what the syncer's held descriptor rests on: the
// WAL file stays the same file while the Store is open, through
// checkpoints that rewind it, one that truncates it, and other
// connections opening and closing the database.
func TestWALFileKept(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	path := filepath.Join(dir, DBFile) + "-wal"
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Enough commits for SQLite's automatic checkpoints (every 1000 pages)
	// to rewind the WAL several times.
	for i := range 600 {
		if _, err := s.CommitIntent(ctx, intentReq(fmt.Sprint("kept-", i), "alice")); err != nil {
			t.Fatal(err)
		}
	}
	other := openDir(t, dir)
	if _, err := other.CommitIntent(ctx, intentReq("other", "bob")); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	var busy, logged, done int
	if err := db.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &done); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CommitIntent(ctx, intentReq("after", "alice")); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("the WAL file was replaced while the Store was open")
	}
	if st := s.Stats(); st.Transactions < 600 {
		t.Errorf("stats %+v", st)
	}
}
