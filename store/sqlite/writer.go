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

// A writeReq is one caller's write, run by the writer goroutine (or by its
// caller, see runAlone) in a shared transaction: inside its own savepoint,
// or with none where undoing it alone needs none (oneWrite, and the groups
// of commits and settlements; see runTx).
type writeReq struct {
	fn func(w *wtx) error
	// commit, when set instead of fn, is an intent commit, which the
	// writer runs itself so that a batch of them shares its budget work.
	commit *commitOp
	// settle, when set, marks a settlement that gives no budget back, which
	// the writer may run in one statement with others (fn is its fallback).
	settle *settleOp
	// oneWrite marks a request whose fn is refused, if at all, only before
	// or in its first write, a single statement that SQLite undoes alone:
	// it needs no savepoint. A failure after that first write is returned
	// as a txBroken and fails the whole transaction.
	oneWrite bool
	// lazy marks a request whose durability may wait for the next synced
	// commit (a settlement): it is answered once its transaction is
	// committed, before the sync that durable requests wait for.
	lazy  bool
	state atomic.Int32 // reqQueued, reqTaken or reqAbandoned
	err   error        // fn's result, then the batch's
	done  chan error   // receives the final result once, buffered
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
	return s.enqueue(ctx, &writeReq{fn: fn})
}

// write1 is write for a request that writes at most one statement (see
// writeReq.oneWrite).
func (s *Store) write1(ctx context.Context, fn func(w *wtx) error) error {
	return s.enqueue(ctx, &writeReq{fn: fn, oneWrite: true})
}

func (s *Store) enqueue(ctx context.Context, r *writeReq) error {
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

	r.done = make(chan error, 1)
	if s.runAlone(r) {
		return <-r.done
	}
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

// runAlone runs r in a transaction of its own, on the caller's goroutine,
// if the writer is idle, nothing is queued and the writer expects nobody
// (aloneOK): then the writer would have taken r alone at once anyway, and
// handing r over and its answer back costs two goroutine wake-ups. It
// reports whether it ran r, whose result is then in r.done.
//
// Everything else is as if the writer ran it: one transaction at a time
// on the writer's connection (txMu), the same runBatch, and the flush of
// lazy commits armed the same way. Requests that arrive meanwhile find
// txMu held and queue; the writer takes them when r's transaction is done,
// together. r is never abandoned: its caller's ctx was live on entry, and
// once running it is waited for, as a request the writer has taken is.
func (s *Store) runAlone(r *writeReq) bool {
	if s.queueAlways || !s.aloneOK.Load() || len(s.queue) > 0 || !s.txMu.TryLock() {
		return false
	}
	defer s.txMu.Unlock()
	s.aloneBatch[0] = r
	s.runBatch(s.w, s.aloneBatch[:])
	s.aloneBatch[0] = nil
	s.armFlush()
	s.walCheck()
	return true
}

// armFlush sets the flush timer after a transaction when it left a lazy
// commit unsynced, and stops it when nothing is left to sync. Called under
// txMu.
func (s *Store) armFlush() {
	switch {
	case s.pendingSync && !s.flushArmed:
		s.flush.Reset(lazyFlush)
		s.flushArmed = true
	case !s.pendingSync && s.flushArmed:
		s.flush.Stop()
		s.flushArmed = false
	}
}

// writer is the only goroutine that writes through s.wc, apart from a
// caller running its request alone (runAlone), each under txMu. It commits what is
// queued, as soon as it is queued, in one transaction per round (see
// runBatch), and syncs the WAL after each that holds a durable request:
// while it syncs, the next requests pile up in the queue and share the
// following commit. (Syncing beside the writer, while it runs the next
// transaction, was tried: the rounds got shorter and their transactions
// smaller, which cost more CPU per request than the overlap saved; see
// docs/benchmarks.md, issue 27 fifth session.)
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
	defer s.wal.close()
	defer s.flush.Stop()
	batch := make([]*writeReq, 0, s.maxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var (
		expect   int           // requests expected for the next transaction
		lastDur  time.Duration // how long the last transaction took, sync included
		timedOut bool          // the last wait gave up
	)
	for {
		batch = batch[:0]
		select {
		case r, ok := <-s.queue:
			if !ok {
				return
			}
			batch = append(batch, r)
		case <-s.flush.C:
			s.txMu.Lock()
			s.flushArmed = false
			if s.pendingSync { // a caller's commit may have synced since
				s.flushLazy()
			}
			s.txMu.Unlock()
			continue
		}
		// Held until the batch is answered, waits for company included:
		// a caller arriving meanwhile queues to join it.
		s.txMu.Lock()
		s.drain(&batch)
		linger := min(lastDur/2, maxLinger)
		if want := min(expect, s.maxBatch); len(batch) < want && !timedOut {
			if linger > 0 {
				timedOut = !s.collect(&batch, want, linger, timer)
			}
		} else {
			timedOut = false
		}
		t0 := time.Now()
		answered := s.runBatch(s.w, batch)
		lastDur = time.Since(t0)
		expect = answered + len(s.queue)
		s.aloneOK.Store(expect <= 1)
		clear(batch)
		s.armFlush()
		s.walCheck()
		s.txMu.Unlock()
	}
}

// lazyFlush is the longest a lazy commit stays unsynced: the writer syncs
// the WAL this long after it unless a synced commit did so before.
const lazyFlush = 100 * time.Millisecond

// flushLazy syncs the WAL for the lazy commits no synced commit followed.
func (s *Store) flushLazy() {
	if err := s.syncWAL(); err != nil {
		// The settlements' callers are gone; every later write fails.
		s.log.Error("sync of the write-ahead log failed", "error", err)
		return
	}
	s.nWALSync.Add(1)
}

// collect adds queued requests to batch until it holds want of them,
// waiting at most linger; it reports whether it got them. timer is the
// writer's, stopped.
func (s *Store) collect(batch *[]*writeReq, want int, linger time.Duration, timer *time.Timer) bool {
	s.drain(batch)
	if len(*batch) >= want {
		return true
	}
	if linger <= 0 {
		return false
	}
	timer.Reset(linger)
	defer timer.Stop()
	for len(*batch) < want {
		select {
		case r, ok := <-s.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, r)
			s.drain(batch)
		case <-timer.C:
			return false
		}
	}
	return true
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

// runBatch commits what batch holds in one transaction (under txMu):
// intent commits, settlements and every other write together, in queue
// order. The
// settlements (lazy requests) are answered as soon as it is committed and
// visible; the others once the WAL is synced after it (see syncWAL). One
// transaction per round, whatever it holds, where a settlement used to take
// an unsynced transaction of its own before the intents' synced one.
//
// It returns how many requests it answered: the callers expected back
// soon (a settled caller comes back with its next call's intent, a
// committed one with its settlement).
func (s *Store) runBatch(w *wtx, batch []*writeReq) int {
	live := s.live[:0]
	defer func() { clear(live); s.live = live[:0] }()
	for _, r := range batch {
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			live = append(live, r)
		}
	}
	if err := s.syncFailed(); err != nil {
		// Nothing written from now on could be made durable (see syncWAL).
		for _, r := range live {
			r.done <- err
		}
		return 0
	}
	if len(live) > 0 {
		s.runTx(w, live)
	}
	return len(live)
}

// runTx runs live in one transaction, in order, then syncs the WAL if any
// of live is durable (see syncWAL). Runs of
// settlements are grouped (settleGroup), runs of intent commits too
// (commitGroup); what is not grouped runs alone (runCommit, or fn). The
// budgets the commits took are written (tally.flush) before any other
// request runs and before COMMIT.
func (s *Store) runTx(w *wtx, live []*writeReq) {
	synced := false
	for _, r := range live {
		synced = synced || !r.lazy
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
	t := w.tally
	defer t.reset()
	solo := 0 // requests left to run alone after a group that failed
	for i := 0; i < len(live); i++ {
		r := live[i]
		if solo > 0 {
			solo--
		} else if n := w.settleRun(live[i:]); n > 1 {
			ok, err := s.settleGroup(w, live[i:i+n])
			if err != nil {
				finish(s.rollback(w, err))
				return
			}
			if ok {
				i += n - 1
				continue
			}
			// Some of them are not this incarnation's started intents:
			// each is run alone below, to be told its own outcome.
			solo = n - 1
		} else if r.commit != nil {
			n, ok, err := s.commitGroup(w, live[i:], t)
			if err != nil {
				finish(s.rollback(w, err))
				return
			}
			if ok {
				i += n - 1
				continue
			}
			if n > 0 {
				// Some call id or idempotency key was taken: each is
				// run alone below, to be told its own outcome.
				solo = n - 1
			}
		}
		if r.commit != nil {
			var txErr error
			if r.err, txErr = s.runCommit(w, r.commit, t); txErr != nil {
				finish(s.rollback(w, txErr))
				return
			}
			continue
		}
		// Anything else may read or change budgets: the intents' sums are
		// written first.
		if t.dirty() {
			if err := t.flush(w); err != nil {
				finish(s.rollback(w, err))
				return
			}
		}
		t.reset()
		if r.oneWrite {
			r.err = r.fn(w)
			var broken *txBroken
			if errors.As(r.err, &broken) {
				finish(s.rollback(w, broken.err))
				return
			}
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
	if t.dirty() {
		if err := t.flush(w); err != nil {
			finish(s.rollback(w, err))
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
	// The intents this transaction committed are open, and this Store's to
	// settle: their seq is kept for their settlements (settleGroup).
	for _, r := range live {
		if op := r.commit; op != nil && r.err == nil && op.seq != 0 {
			w.open[op.in.CallID] = op.seq
		}
	}
	if s.onBatch != nil {
		failed := 0
		for _, r := range live {
			if r.err != nil {
				failed++
			}
		}
		s.onBatch(len(live), failed)
	}
	s.pendingSync = true
	if !synced {
		finish(nil)
		return
	}
	// The lazy requests need only the commit: they are answered before
	// the sync; the others are kept, in place, for after it.
	durable := live[:0]
	for _, r := range live {
		if r.lazy {
			r.done <- r.err
		} else {
			durable = append(durable, r)
		}
	}
	live = durable // finish answers these
	if err := s.syncWAL(); err != nil {
		// Committed and visible, but perhaps not on stable storage: the
		// callers are told it failed, the safe side (the gateway invokes
		// nothing; an intent left started is recovered as uncertain once
		// this process is gone).
		finish(err)
		return
	}
	s.nSynced.Add(1)
	finish(nil)
}

// txBroken is the error of a oneWrite request that failed after its first
// write: having no savepoint, it cannot be undone alone, so the
// transaction is rolled back and err returned to every request in it.
type txBroken struct{ err error }

func (e *txBroken) Error() string { return e.err.Error() }
func (e *txBroken) Unwrap() error { return e.err }

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
type wtx struct {
	s       *Store
	tally   *tally                 // the budgets of the transaction's intents, not yet written
	queries map[multiRowKey]string // multi-row statements built so far
	// open maps the call ids of the intents this Store committed and has
	// not settled to their seq, so that a group of settlements finds its
	// rows without looking each up by call id. It is filled when a
	// transaction commits and emptied by settlements; an intent missing
	// from it (settled elsewhere, or a failed settlement) is looked up.
	open map[string]int64
}

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
