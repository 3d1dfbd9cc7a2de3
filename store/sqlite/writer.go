package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// A writeReq is one caller's write, run by the writer goroutine inside its
// own savepoint of a shared transaction.
type writeReq struct {
	fn func(w *wtx) error
	// oneWrite marks a request whose fn writes with at most one statement
	// and fails only before or in it: SQLite undoes a failed statement
	// alone, so it needs no savepoint.
	oneWrite bool
	state    atomic.Int32 // reqQueued, reqTaken or reqAbandoned
	err      error        // fn's result, then the batch's
	done     chan error   // receives the final result once, buffered
}

const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

// write queues fn for the writer and waits for the commit of the
// transaction that ran it. fn's error is returned as is (its savepoint was
// rolled back); a transaction failure is returned to every request of the
// batch. A caller whose ctx ends while its request is still queued leaves
// with ctx.Err() and its request never runs; once the writer has taken it,
// the caller waits for the outcome, so no caller ever returns while its
// write may still commit.
func (s *Store) write(ctx context.Context, fn func(w *wtx) error) error {
	return s.enqueue(ctx, false, fn)
}

// write1 is write for a request that writes at most one statement (see
// writeReq.oneWrite).
func (s *Store) write1(ctx context.Context, fn func(w *wtx) error) error {
	return s.enqueue(ctx, true, fn)
}

func (s *Store) enqueue(ctx context.Context, oneWrite bool, fn func(w *wtx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	s.inflight.Add(1)
	s.closeMu.RUnlock()
	defer s.inflight.Done()

	r := &writeReq{fn: fn, oneWrite: oneWrite, done: make(chan error, 1)}
	select {
	case s.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return ctx.Err()
		}
		return <-r.done
	}
}

// writer is the only goroutine that writes through s.wc. It commits what is
// queued, as soon as it is queued: while one transaction syncs, the next
// requests pile up in the queue and share the following commit.
//
// One refinement: the callers answered by a transaction tend to come back
// together (a gateway call commits its intent, then settles it), but not all
// within the instant the writer needs to start the next transaction. So the
// writer expects as many requests as the last transaction held plus those
// that queued while it ran, and waits for them at most half the last
// transaction's duration (capped by maxLinger). A caller alone expects
// nobody and never waits; a wait that times out (the callers went off to do
// something slower) is not repeated for the next transaction; and a wait
// never exceeds what a sync costs anyway.
func (s *Store) writer() {
	defer close(s.writerDone)
	w := &wtx{s: s}
	batch := make([]*writeReq, 0, s.maxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var (
		expect   int           // requests expected for the next transaction
		lastDur  time.Duration // how long the last transaction took, sync included
		timedOut bool          // the last wait gave up
	)
	for first := range s.queue {
		batch = append(batch[:0], first)
		s.drain(&batch)
		if want := min(expect, s.maxBatch); len(batch) < want && !timedOut {
			if linger := min(lastDur/2, maxLinger); linger > 0 {
				timer.Reset(linger)
			wait:
				for len(batch) < want {
					select {
					case r, ok := <-s.queue:
						if !ok {
							break wait
						}
						batch = append(batch, r)
						s.drain(&batch)
					case <-timer.C:
						timedOut = true
						break wait
					}
				}
				timer.Stop()
			}
		} else {
			timedOut = false
		}
		t0 := time.Now()
		s.runBatch(w, batch)
		lastDur = time.Since(t0)
		expect = len(batch) + len(s.queue)
		clear(batch)
	}
}

// drain appends to batch what is queued, without waiting.
func (s *Store) drain(batch *[]*writeReq) {
	for len(*batch) < s.maxBatch {
		select {
		case r, ok := <-s.queue:
			if !ok {
				return
			}
			*batch = append(*batch, r)
		default:
			return
		}
	}
}

// maxLinger caps the writer's wait for returning callers.
const maxLinger = time.Millisecond

func (s *Store) runBatch(w *wtx, batch []*writeReq) {
	live := batch[:0]
	for _, r := range batch {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	finish := func(txErr error) {
		for _, r := range live {
			if txErr != nil {
				r.err = txErr
			}
			r.done <- r.err
		}
	}

	// BEGIN IMMEDIATE takes the database's write lock now, so every read
	// inside the transaction (budget used, approval state) is current and
	// stays so until COMMIT, across processes.
	ctx := context.Background()
	if err := retryBusy(ctx, s.log, func() error { return w.execErr(`BEGIN IMMEDIATE`) }); err != nil {
		finish(fmt.Errorf("sqlite store: begin: %w", err))
		return
	}
	for _, r := range live {
		if r.oneWrite {
			r.err = r.fn(w)
			if c := sqliteCode(r.err); c != 0 && c != sqlite3.SQLITE_CONSTRAINT {
				// Errors other than a constraint's (I/O, full disk) may
				// have rolled the whole transaction back.
				finish(s.rollback(w, fmt.Errorf("sqlite store: %w", r.err)))
				return
			}
			continue
		}
		if err := w.execErr(`SAVEPOINT req`); err != nil {
			finish(s.rollback(w, fmt.Errorf("sqlite store: savepoint: %w", err)))
			return
		}
		if r.err = r.fn(w); r.err != nil {
			if err := w.execErr(`ROLLBACK TO req`); err != nil {
				// The transaction itself is gone (an I/O error rolls it
				// back): nothing of this batch is written.
				finish(s.rollback(w, fmt.Errorf("sqlite store: %w (rolling back after: %v)", err, r.err)))
				return
			}
		}
		if err := w.execErr(`RELEASE req`); err != nil {
			finish(s.rollback(w, fmt.Errorf("sqlite store: release savepoint: %w", err)))
			return
		}
	}
	if err := w.execErr(`COMMIT`); err != nil {
		// The outcome on disk may be unknown (a failed sync); callers are
		// told it failed, which is the safe side: the gateway invokes
		// nothing, and an intent that did reach the disk is later
		// recovered as uncertain.
		finish(s.rollback(w, fmt.Errorf("sqlite store: commit: %w", err)))
		return
	}
	s.nTx.Add(1)
	s.nReq.Add(int64(len(live)))
	if s.onBatch != nil {
		failed := 0
		for _, r := range live {
			if r.err != nil {
				failed++
			}
		}
		s.onBatch(len(live), failed)
	}
	finish(nil)
}

// rollback ends a broken transaction, if SQLite has not already, and
// returns err for the batch's callers.
func (s *Store) rollback(w *wtx, err error) error {
	if rerr := w.execErr(`ROLLBACK`); rerr != nil {
		s.log.Debug("rollback after failed batch", "error", rerr)
	}
	return err
}

// wtx runs statements on the writer's connection, preparing each distinct
// statement once.
type wtx struct{ s *Store }

func (w *wtx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := w.s.wstm[query]; ok {
		return st, nil
	}
	st, err := w.s.wc.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	w.s.wstm[query] = st
	return st, nil
}

func (w *wtx) exec(query string, args ...any) (sql.Result, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

func (w *wtx) execErr(query string, args ...any) error {
	_, err := w.exec(query, args...)
	return err
}

// affected runs an UPDATE or DELETE and returns how many rows it changed.
func (w *wtx) affected(query string, args ...any) (int64, error) {
	res, err := w.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (w *wtx) queryRow(query string, args ...any) *sql.Row {
	st, err := w.stmt(query)
	if err != nil {
		// sql.Row cannot be built with an error outside database/sql;
		// an unprepared statement fails again, reporting the error.
		return w.s.wc.QueryRowContext(context.Background(), query, args...)
	}
	return st.QueryRow(args...)
}

// rstmt returns a prepared statement of the read pool.
func (s *Store) rstmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if st, ok := s.rstm[query]; ok {
		return st, nil
	}
	st, err := s.rdb.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	s.rstm[query] = st
	return st, nil
}

// sqliteCode is the primary result code of err, or 0.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code() & 0xff
	}
	return 0
}

func isBusy(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// retryBusy runs fn until it does not fail with SQLITE_BUSY, at most
// busyRetries more times. Each attempt has already waited the busy timeout
// inside SQLite; a retry covers the cases SQLite does not wait for (a
// deadlock between a reader upgrading and a writer, a WAL being recovered).
func retryBusy(ctx context.Context, log *slog.Logger, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !isBusy(err) || attempt >= busyRetries {
			return err
		}
		log.Warn("database busy, retrying", "attempt", attempt+1, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(10<<attempt) * time.Millisecond):
		}
	}
}
