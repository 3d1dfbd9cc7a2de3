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

// TestSyncFailureBreaksWrites fails one sync of the WAL: its caller is
// told, so is the caller queued behind it (whose own sync would succeed,
// but cannot vouch for the frames the failed one lost), and every write
// after it is refused. Reopening the folder recovers the intent whose
// caller was told it failed as uncertain: it is never run again.
func TestSyncFailureBreaksWrites(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	if _, err := s.CommitIntent(ctx, intentReq("before", "alice")); err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("healthy before any failure: %v", err)
	}
	g := gateSyncs(t, s)
	s.queueAlways = true // c's sync held in the writer, d queued behind it

	c := commitAsync(s, "c")
	g.waitStarted(t, "c")
	d := commitAsync(s, "d") // queued while c's sync runs
	for deadline := time.Now().Add(30 * time.Second); len(s.queue) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("d was never queued")
		}
	}
	g.release <- errors.New("injected I/O error")
	if err := waitResult(t, c, "c"); err == nil || !strings.Contains(err.Error(), "injected I/O error") {
		t.Errorf("c, whose sync failed: %v, want the sync's error", err)
	}
	if err := waitResult(t, d, "d"); !errors.Is(err, errSyncFailed) {
		t.Errorf("d, queued during the failed sync: %v, want errSyncFailed", err)
	}
	select {
	case <-g.started:
		t.Errorf("a sync ran after the failed one")
	default:
	}
	if _, err := s.CommitIntent(ctx, intentReq("e", "alice")); !errors.Is(err, errSyncFailed) {
		t.Errorf("a commit after the failure: %v, want errSyncFailed", err)
	}
	if err := s.Healthy(ctx); !errors.Is(err, errSyncFailed) {
		t.Errorf("health after the failure: %v, want errSyncFailed (a balancer must stop sending calls)", err)
	}
	if err := s.Settle(ctx, "before", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); !errors.Is(err, errSyncFailed) {
		t.Errorf("a settlement after the failure: %v, want errSyncFailed", err)
	}
	for _, id := range []string{"d", "e"} {
		if _, err := s.GetIntent(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s, refused, reads back: %v", id, err)
		}
	}
	if err := s.Close(); !errors.Is(err, errSyncFailed) {
		t.Errorf("Close of the broken store: %v, want errSyncFailed", err)
	}

	again := openDir(t, dir)
	for _, id := range []string{"before", "c"} {
		in, err := again.GetIntent(ctx, id)
		if err != nil || in.Status != store.StatusUncertain {
			t.Errorf("%s after reopening: %+v, %v; want uncertain", id, in, err)
		}
	}
}

// TestFailedFlushBreaksWrites fails the sync the writer makes on its own
// for settlements no durable commit followed: nothing is waiting for it,
// but the writes after it are refused all the same.
func TestFailedFlushBreaksWrites(t *testing.T) {
	s := openDir(t, t.TempDir())
	ctx := context.Background()
	if _, err := s.CommitIntent(ctx, intentReq("a", "alice")); err != nil {
		t.Fatal(err)
	}
	f := func() error { return errors.New("injected I/O error") }
	s.syncFault.Store(&f)
	if err := s.Settle(ctx, "a", store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); s.syncFailed() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the settlement's sync never ran")
		}
	}
	if _, err := s.CommitIntent(ctx, intentReq("b", "alice")); !errors.Is(err, errSyncFailed) {
		t.Errorf("a commit after the failed flush: %v, want errSyncFailed", err)
	}
	if st := s.Stats(); st.WALSyncs != 0 {
		t.Errorf("stats %+v: the failed flush counted as a sync", st)
	}
}

// TestWALFileKept checks what the writer's held descriptor rests on: the
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
