package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	sqlite "modernc.org/sqlite"
)

// The WAL's checkpoints run beside the writer, not inside its commits.
//
// SQLite's default (wal_autocheckpoint=1000) makes the COMMIT that takes
// the WAL past 1000 frames copy the WAL back into the database file and
// sync both, inside the writer's round: every caller of that round waits
// for it (COMMIT p99 2.5-3.0 ms against 0.3-0.55 ms without; see
// docs/benchmarks.md, issue 27 seventh session). So the writer's
// connection runs with wal_autocheckpoint=0, and a checkpointer goroutine
// with a connection of its own runs PRAGMA wal_checkpoint(PASSIVE) once the
// writer's commits have appended ckptFrames frames since the last complete
// checkpoint. A PASSIVE checkpoint takes no lock the writer needs (it never
// waits for readers or writers): the writer keeps committing meanwhile.
//
// Bound: the writer itself runs a PASSIVE checkpoint, at the end of a
// round, when the WAL is ckptHard frames long (the checkpointer fell
// behind or is stuck, or, beside a busy writer, never leaves the WAL
// wholly copied at the start of a transaction, when SQLite would start it
// over), so the WAL does not grow without limit. If the checkpointer's
// pass holds the checkpoint lock, it tries again the next round; if a
// reader's snapshot holds frames back (no checkpoint can copy them until
// it ends), only after another ckptHard/2 frames. A complete checkpoint
// is not taken to have started the WAL over: the WAL header's checkpoint
// sequence number, read after the next transaction, says whether SQLite
// did (it does not while a reader, or a pass taking the readers' locks,
// holds the WAL as that transaction begins); if not, the length stands
// and the writer tries again after ckptHard/16 frames (checkRestart; a
// finish, below, after ckptFrames/2).
//
// Finish: with one call in flight (the writer expects nobody else,
// aloneOK), the writer also runs a PASSIVE checkpoint at the end of a
// transaction once a checkpointer's pass has copied all but ckptNear
// frames of the WAL (what the writer appended while the pass ran). The
// checkpointer alone never restarts the WAL then: its pass takes
// milliseconds, and the lone caller's next commit, which would start the
// WAL over only if it began with every frame copied, almost always comes
// before the pass ends or finds the frames appended during it. Left alone,
// the WAL would grow to ckptHard frames (16 MB) before every restart, and
// a sync that grows the file costs ext4 a journal commit for the new size
// and blocks: ~300 us against ~200 us for one that overwrites (see
// docs/benchmarks.md, issue 27 eighth session). Finishing costs the one
// caller a copy of at most ckptNear pages and a sync of the database file,
// once per ckptFrames frames; the WAL then starts over at about
// ckptFrames frames and its file stops growing after the first round.
// With several callers it is not done: it would stall a round of them,
// once per ckptFrames frames instead of once per ckptHard, and the WAL's
// file stops growing there too once it has reached ckptHard frames. A
// finish that fails (a reader pins the frames, or the checkpointer holds
// its lock) is tried again only after another ckptFrames/2 frames.
//
// Durability: both connections run with synchronous=NORMAL, under which
// SQLite syncs the WAL before it copies frames into the database file and
// syncs the database file before it records the copy as done (nBackfill)
// and before any later writer may restart the WAL over those frames. A
// WAL restart thus never follows an unsynced copy: a crash at any point
// leaves every synced commit either in the WAL or in the synced database
// file. (synchronous=OFF would skip both syncs: never use it here;
// openCheckpointer checks the setting.)
//
// The count of frames is the writer's (walTotal, added to under txMu, by
// the writer goroutine or a caller in runAlone): SQLite's page-write
// counter of the writer's connection, read after each transaction. A
// complete checkpoint (every frame of the WAL copied) advances ckptBase to
// the count read before it started; every checkpoint records the WAL's
// length it saw and how much of it was copied (walSeen), from which the
// writer reckons the length now and what is left to copy.

const (
	// defaultCkptFrames is when the checkpointer is woken: SQLite's own
	// auto-checkpoint threshold.
	defaultCkptFrames = 1000
	// defaultCkptHard is when the writer checkpoints itself.
	defaultCkptHard = 4000
)

// openCheckpointer opens the checkpointer's connection and starts it.
func (s *Store) openCheckpointer(ctx context.Context, dsn string) error {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("sqlite store: %w", err)
	}
	s.ckdb = db
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	if s.ckc, err = db.Conn(ctx); err != nil {
		return fmt.Errorf("sqlite store: checkpointer: %w", err)
	}
	var sync int
	if err := s.ckc.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return fmt.Errorf("sqlite store: checkpointer: %w", err)
	}
	if sync != 1 && sync != 2 {
		// See above: OFF would let a WAL restart follow an unsynced copy.
		return fmt.Errorf("sqlite store: checkpointer connection synchronous=%d, want 1 (NORMAL) or 2 (FULL)", sync)
	}
	s.ckWake = make(chan struct{}, 1)
	s.ckStop = make(chan struct{})
	s.ckDone = make(chan struct{})
	go s.checkpointer()
	return nil
}

// stopCheckpointer stops the checkpointer and waits for it, if started.
func (s *Store) stopCheckpointer() {
	if s.ckDone == nil {
		return
	}
	close(s.ckStop)
	<-s.ckDone
	s.ckDone = nil
}

// checkpointer runs a checkpoint each time the writer wakes it.
func (s *Store) checkpointer() {
	defer close(s.ckDone)
	for {
		select {
		case <-s.ckStop:
			return
		case <-s.ckWake:
		}
		if h := s.ckptHook; h != nil {
			h()
		}
		s.checkpoint(s.ckc)
		s.nCkpt.Add(1)
	}
}

// checkpoint runs one PASSIVE checkpoint on c and reports how far it got;
// once complete, ckptBase is advanced to what was counted before it began
// (every frame counted then was in the WAL). It records the WAL's length
// the pass saw (walSeen).
func (s *Store) checkpoint(c *sql.Conn) ckptResult {
	start := s.walTotal.Load()
	var busy, logged, done int
	if err := c.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logged, &done); err != nil {
		s.log.Warn("checkpoint of the write-ahead log failed", "error", err)
		return ckptFailed
	}
	if logged >= 0 {
		s.walSeen.Store(&walLen{frames: int64(logged), copied: int64(max(done, 0)), at: start})
	}
	switch {
	case busy != 0:
		return ckptBusy
	case logged < 0 || done != logged:
		return ckptPinned
	}
	for {
		b := s.ckptBase.Load()
		if b >= start || s.ckptBase.CompareAndSwap(b, start) {
			return ckptComplete
		}
	}
}

// ckptResult is how far a checkpoint got.
type ckptResult int

const (
	ckptComplete ckptResult = iota // every frame of the WAL copied
	// ckptBusy: another connection's checkpoint held the lock (PASSIVE
	// never waits for it); it ends within milliseconds.
	ckptBusy
	// ckptPinned: some frames could not be copied, a reader's snapshot
	// needing them (or the WAL is not readable); until that reader ends,
	// trying again copies nothing more.
	ckptPinned
	ckptFailed // an error, logged
)

// A walLen is the WAL's length in frames as a checkpoint saw it, and how
// many of them were copied into the database file once it ended, when the
// writer had counted at frames (walTotal).
type walLen struct{ frames, copied, at int64 }

// walCheck counts the frames the writer's connection wrote since it was
// last called, wakes the checkpointer once ckptFrames are not yet copied
// and checkpoints itself once the WAL is ckptHard frames long (see above).
// Called under txMu after each transaction, whoever ran it.
//
// The WAL's length is not what is left to copy: SQLite starts the WAL
// over only at a write transaction that begins with every frame copied,
// which a checkpoint beside a busy writer rarely leaves (the writer has
// appended more by then). The writer's own checkpoint runs under txMu,
// with nothing appended meanwhile: once complete, the next transaction
// starts the WAL over, and what is left to copy is small, the checkpointer
// having copied the rest.
func (s *Store) walCheck() {
	var n int
	if err := s.wc.Raw(func(dc any) error {
		var err error
		n, _, err = dc.(sqlite.DBStatus).Status(sqlite.DBStatusCacheWrite, true)
		return err
	}); err != nil {
		s.log.Warn("reading the writer's page count failed", "error", err)
		return
	}
	if n == 0 {
		return
	}
	total := s.walTotal.Add(int64(n))
	if out := total - s.ckptBase.Load(); out >= s.ckptFrames && total-s.ckptWoken >= s.ckptFrames/2 {
		s.ckptWoken = total
		select {
		case s.ckWake <- struct{}{}:
		default:
		}
	}
	s.checkRestart(total)
	seen := s.walSeen.Load()
	length := total // none seen yet: as if the WAL held every frame
	if seen != nil {
		length = seen.frames + total - seen.at
	}
	switch {
	case length >= s.ckptHard && total >= s.ckptRetry:
		s.nWriterCkpt.Add(1)
		s.writerCheckpoint(total, &s.ckptRetry, s.ckptHard/2, s.ckptHard/16)
	case s.ckptNear > 0 && seen != nil && seen.copied > 0 && length-seen.copied <= s.ckptNear &&
		total >= s.ckptNearRetry && s.aloneOK.Load():
		// A pass copied nearly everything and one call is in flight:
		// finish it (see above). copied > 0 only after a pass: the
		// writer's own complete checkpoints record nothing copied.
		s.nWriterFinish.Add(1)
		s.writerCheckpoint(total, &s.ckptNearRetry, s.ckptFrames/2, s.ckptFrames/2)
	}
}

// A walRestart is a complete checkpoint of the writer's, awaiting the
// transaction after it, which SQLite makes start the WAL over, unless a
// reader (or a checkpointer's pass, which takes the readers' locks in
// turn) holds the WAL at that moment. Assuming the restart made the WAL's
// length reckoned too short whenever it did not happen, by up to ckptHard
// frames: checkRestart asks the WAL's header instead.
type walRestart struct {
	seq   uint32 // the header's checkpoint sequence number after the checkpoint
	at    int64  // walTotal at the checkpoint
	retry *int64 // the threshold to move if the WAL was not started over
	// again is how many frames later the writer tries again if the WAL
	// was not started over: soon for the bound (a checkpointer's pass,
	// the usual reason, is short), no sooner than after a failure for a
	// finish (it is an optimisation: not worth a sync each few calls
	// behind a long reader).
	again int64
}

// writerCheckpoint runs the writer's own checkpoint. If it copied the
// whole WAL, it records what checkRestart needs to tell whether the next
// transaction started the WAL over. If another checkpoint held the lock,
// the next round tries again; if frames are pinned by a reader, or on an
// error, not before backoff more frames. Called under txMu; retry is the
// threshold (ckptRetry or ckptNearRetry) of the kind of checkpoint run,
// again its delay if the WAL is not started over (see walRestart).
func (s *Store) writerCheckpoint(total int64, retry *int64, backoff, again int64) {
	switch s.checkpoint(s.wc) {
	case ckptComplete:
		// checkpoint recorded the WAL's length as it saw it, all copied:
		// until checkRestart sees the WAL started over, that length stands.
		seq, err := s.wal.seq()
		if err != nil {
			s.log.Warn("reading the write-ahead log's header failed", "error", err)
			*retry = total + backoff
			return
		}
		s.restart = &walRestart{seq: seq, at: total, retry: retry, again: again}
	case ckptBusy:
		// The checkpointer's pass ends soon: the next round tries again.
	default:
		*retry = total + backoff
	}
}

// checkRestart, after the transaction that followed a complete checkpoint
// of the writer's, reads the WAL's header: a new checkpoint sequence number
// means SQLite started the WAL over, whose length is then the frames
// written since the checkpoint; otherwise the length checkpoint recorded
// stands, and the checkpoint is not tried again before the threshold moves
// on (a reader pins the WAL; trying each round would cost a sync each).
func (s *Store) checkRestart(total int64) {
	r := s.restart
	if r == nil || total == r.at {
		return
	}
	s.restart = nil
	seq, err := s.wal.seq()
	if err == nil && seq != r.seq {
		if seen := s.walSeen.Load(); seen == nil || seen.at <= r.at {
			// (A pass since the restart recorded a length of its own.)
			s.walSeen.Store(&walLen{at: r.at})
		}
		return
	}
	// Not started over: a reader, or a checkpointer's pass taking the
	// readers' locks, held the WAL as the transaction began.
	*r.retry = total + r.again
}
