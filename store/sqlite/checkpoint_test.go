package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store"
)

// walFrames is how many frames the WAL file has room for: its high-water
// mark since it was created (a checkpoint rewinds it, the file keeps its
// size).
func walFrames(t *testing.T, dir string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, DBFile) + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return (fi.Size() - 32) / (4096 + 24)
}

func commitN(t *testing.T, s *Store, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := s.CommitIntent(context.Background(), intentReq(fmt.Sprintf("%s-%d", prefix, i), "alice")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBackgroundCheckpoint: the writer's connection never checkpoints by
// itself (wal_autocheckpoint=0), and the checkpointer copies the WAL into
// the database file once enough frames are written, without the writer's
// bound ever being reached.
func TestBackgroundCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	s.ckptFrames, s.ckptHard = 50, 1<<40
	ctx := context.Background()

	s.txMu.Lock()
	var auto int
	err := s.wc.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&auto)
	s.txMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Fatalf("writer's wal_autocheckpoint = %d, want 0", auto)
	}
	fi, err := os.Stat(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	before := fi.Size()

	n := 0
	for s.Stats().Checkpoints < 3 || s.ckptBase.Load() == 0 {
		if n >= 20000 {
			t.Fatalf("after %d commits: %+v, base %d", n, s.Stats(), s.ckptBase.Load())
		}
		commitN(t, s, fmt.Sprint("c", n), 50)
		n += 50
	}
	st := s.Stats()
	if st.WriterCheckpoints != 0 {
		t.Errorf("the writer checkpointed itself: %+v", st)
	}
	if total := s.walTotal.Load(); total < int64(n) {
		t.Errorf("counted %d frames for %d commits", total, n)
	}
	fi, err = os.Stat(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= before {
		t.Errorf("database file %d bytes before, %d after the checkpoints: nothing copied", before, fi.Size())
	}
	// The checkpointed database reads back whole through another connection.
	if _, err := s.GetIntent(ctx, "c0-0"); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointerStuck holds the checkpointer in its first pass: the
// writer's own checkpoints keep the WAL within its bound. Then a reader's
// long transaction pins the WAL: the writer's checkpoints cannot finish,
// and it does not retry them at every round; once the reader ends, the
// next one finishes.
func TestCheckpointerStuck(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	const hard = 400
	s.ckptFrames, s.ckptHard = 50, hard
	held, release := make(chan struct{}, 1), make(chan struct{})
	s.ckptHook = func() {
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
	}
	t.Cleanup(func() { close(release) }) // before the Store's Close

	commitN(t, s, "a", 1500)
	select {
	case <-held:
	default:
		t.Fatal("the checkpointer was never woken")
	}
	st := s.Stats()
	if st.Checkpoints != 0 || st.WriterCheckpoints < 3 {
		t.Fatalf("stats %+v: want the writer's checkpoints alone", st)
	}
	if f := walFrames(t, dir); f > hard+100 {
		t.Errorf("WAL grew to %d frames, bound %d", f, hard)
	}

	rdb, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	tx, err := rdb.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var count int
	if err := tx.QueryRow(`SELECT count(*) FROM intents`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	// The reader's snapshot pins every frame written from now on.
	w0, base0 := s.Stats().WriterCheckpoints, s.ckptBase.Load()
	total0 := s.walTotal.Load()
	commitN(t, s, "b", 1000)
	tries := s.Stats().WriterCheckpoints - w0
	frames := s.walTotal.Load() - total0
	if tries < 1 || tries > frames/(hard/2)+2 {
		t.Errorf("%d writer checkpoints over %d frames behind a reader (bound %d: retried every ckptHard/2 frames)", tries, frames, hard)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	commitN(t, s, "c", 300)
	if base := s.ckptBase.Load(); base <= base0 || base < total0+frames {
		t.Errorf("checkpoint base %d (was %d, frames written behind the reader up to %d): no checkpoint finished after the reader ended", base, base0, total0+frames)
	}
}

// TestCloseCheckpoints closes the Store while the checkpointer is in a
// pass: Close waits for it, stops it, and leaves a consistent database
// holding every commit, the WAL merged into it and removed.
func TestCloseCheckpoints(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, quietOpts)
	if err != nil {
		t.Fatal(err)
	}
	s.ckptFrames = 20
	held, release := make(chan struct{}), make(chan struct{})
	first := true
	s.ckptHook = func() {
		if first {
			first = false
			close(held)
			<-release
		}
	}
	n := 0
	for waiting := true; waiting; {
		commitN(t, s, fmt.Sprint("c", n), 10)
		n += 10
		select {
		case <-held:
			waiting = false
		default:
			if n > 20000 {
				t.Fatal("the checkpointer was never woken")
			}
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Checkpoints < 1 {
		t.Errorf("the pass Close waited for is not counted: %+v", st)
	}
	if s.ckDone != nil {
		t.Error("the checkpointer was not stopped")
	}
	if _, err := os.Stat(filepath.Join(dir, DBFile) + "-wal"); !os.IsNotExist(err) {
		t.Errorf("WAL left after Close: %v", err)
	}

	db, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ok string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q, %v", ok, err)
	}
	var count int
	if err := db.QueryRow(`SELECT count(*) FROM intents`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Errorf("%d intents in the database, %d committed", count, n)
	}
}

// TestWALBoundBusyWriter: beside writers that never pause, the
// checkpointer's passes rarely leave the WAL wholly copied when a
// transaction begins, the moment SQLite starts it over; the writer's own
// checkpoint does, so the WAL file stays within its bound.
func TestWALBoundBusyWriter(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	const hard = 400
	s.ckptFrames, s.ckptHard = 50, hard
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := fmt.Sprintf("g%d-%d", g, i)
				if _, err := s.CommitIntent(context.Background(), intentReq(id, "alice")); err != nil {
					errs <- err
					return
				}
				if err := s.Settle(context.Background(), id, store.Settlement{Status: store.StatusSucceeded, At: time.Now()}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := s.Stats()
	if s.walTotal.Load() < 4*hard {
		t.Fatalf("only %d frames written", s.walTotal.Load())
	}
	// A round of 32 requests writes well under 300 frames.
	if f := walFrames(t, dir); f > hard+300 {
		t.Errorf("WAL grew to %d frames, bound %d (%+v)", f, hard, st)
	}
}

// walSeq is the WAL header's checkpoint sequence number, which SQLite
// increments each time it starts the WAL over.
func walSeq(t *testing.T, dir string) uint32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, DBFile) + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 32 {
		t.Fatalf("WAL of %d bytes: no header", len(b))
	}
	return binary.BigEndian.Uint32(b[12:16])
}

// TestWriterFinishesCheckpoint: with one call in flight, a checkpointer's
// pass that ran while the writer appended leaves a few frames uncopied, so
// SQLite never starts the WAL over; the writer copies those few itself and
// the next transaction starts it over, in the file's room. Without the
// finish (ckptNear 0, the control) the WAL keeps growing.
func TestWriterFinishesCheckpoint(t *testing.T) {
	for _, near := range []int64{64, 0} {
		t.Run(fmt.Sprint("near=", near), func(t *testing.T) {
			dir := t.TempDir()
			s := openDir(t, dir)
			// The checkpointer is never woken and the bound never reached:
			// the one pass is the test's.
			s.ckptFrames, s.ckptHard, s.ckptNear = 1<<40, 1<<40, near
			commitN(t, s, "a", 30)
			seq := walSeq(t, dir)
			// A pass on the checkpointer's connection inside a transaction
			// of the writer copies every committed frame, and the
			// transaction's own frames come after it: what a lone caller's
			// commit during a pass leaves.
			if err := s.write(context.Background(), func(w *wtx) error {
				if s.checkpoint(s.ckc) != ckptComplete {
					return fmt.Errorf("the pass did not copy every frame")
				}
				// Two updates that cancel out: the page is written (an
				// update to the same bytes writes nothing).
				if _, err := w.exec(`UPDATE incarnations SET pid = pid + 1 WHERE id = ?`, s.incarnation); err != nil {
					return err
				}
				_, err := w.exec(`UPDATE incarnations SET pid = pid - 1 WHERE id = ?`, s.incarnation)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			frames := walFrames(t, dir)
			commitN(t, s, "b", 3)
			st := s.Stats()
			if near == 0 {
				if st.WriterFinishes != 0 || walSeq(t, dir) != seq || walFrames(t, dir) <= frames {
					t.Errorf("control: %d finishes, WAL sequence %d (was %d), %d frames (were %d): the WAL started over without the finish",
						st.WriterFinishes, walSeq(t, dir), seq, walFrames(t, dir), frames)
				}
				return
			}
			if st.WriterFinishes != 1 || st.WriterCheckpoints != 0 {
				t.Errorf("%+v, want one finish and no bound checkpoint", st)
			}
			if got := walSeq(t, dir); got != seq+1 {
				t.Errorf("WAL checkpoint sequence %d, want %d: not started over after the finish", got, seq+1)
			}
			if got := walFrames(t, dir); got != frames {
				t.Errorf("WAL file grew from %d to %d frames after it started over", frames, got)
			}
			if _, err := s.GetIntent(context.Background(), "b-2"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWriterCheckpointRestartHeld: a complete checkpoint of the writer's
// does not start the WAL over while a reader that began before it still
// reads; the writer must not then take the WAL for started over (its
// reckoned length would fall short and the WAL outgrow its bound), and it
// checkpoints again once the reader is gone.
func TestWriterCheckpointRestartHeld(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	s.ckptFrames, s.ckptHard = 1<<40, 1<<40 // the test's checkpoints only
	commitN(t, s, "a", 20)
	seq := walSeq(t, dir)

	// A reader whose snapshot holds every frame so far: a checkpoint can
	// copy them all, but SQLite cannot start the WAL over under it.
	rc, err := s.rdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rc.QueryRowContext(ctx, `SELECT count(*) FROM intents`).Scan(&n); err != nil || n != 20 {
		t.Fatalf("reader sees %d intents, %v", n, err)
	}
	s.txMu.Lock()
	total := s.walTotal.Load()
	s.writerCheckpoint(total, &s.ckptRetry, 64, 8)
	pending := s.restart != nil
	s.txMu.Unlock()
	if !pending {
		t.Fatal("the writer's checkpoint was not complete")
	}
	before := s.walSeen.Load()
	commitN(t, s, "b", 1)
	if got := walSeq(t, dir); got != seq {
		t.Fatalf("the WAL started over under a reader (sequence %d -> %d)", seq, got)
	}
	s.txMu.Lock()
	seen, total, retry, left := s.walSeen.Load(), s.walTotal.Load(), s.ckptRetry, s.restart
	s.txMu.Unlock()
	if left != nil {
		t.Error("the restart was not checked after the next transaction")
	}
	if length := seen.frames + total - seen.at; length < before.frames {
		t.Errorf("WAL reckoned %d frames long after a restart that did not happen; it holds at least %d", length, before.frames)
	}
	if retry <= total {
		t.Errorf("retry threshold %d not moved past %d", retry, total)
	}

	// The reader gone, the next checkpoint starts the WAL over.
	if _, err := rc.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	s.txMu.Lock()
	s.writerCheckpoint(s.walTotal.Load(), &s.ckptRetry, 64, 8)
	s.txMu.Unlock()
	commitN(t, s, "c", 1)
	if got := walSeq(t, dir); got == seq {
		t.Error("the WAL was not started over once the reader ended")
	}
	s.txMu.Lock()
	seen, total = s.walSeen.Load(), s.walTotal.Load()
	s.txMu.Unlock()
	if length := seen.frames + total - seen.at; length > 16 {
		t.Errorf("WAL reckoned %d frames long after starting over with one commit", length)
	}
}
