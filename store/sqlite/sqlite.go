// Package sqlite is the embedded, durable [store.Store]: one SQLite database
// (modernc.org/sqlite, no cgo) in a state folder, shared safely by every
// process that opens the folder (a running gateway and the backplane
// commands an operator runs beside it).
//
// What it promises beyond the store contract:
//
//   - Every write but a settlement is committed with journal_mode=WAL and
//     then synced (the connection runs with synchronous=NORMAL, set once,
//     and the writer fdatasyncs the WAL after the commit, which is what
//     synchronous=FULL does inside it): when a method returns without
//     error, its write is on stable storage. Another connection may read a
//     write in the moment between its commit and that sync (a crash in that
//     moment loses it, its caller never told it succeeded). Settle returns
//     once its write is committed and visible (written to the WAL, which
//     survives the process dying) but before it is synced: the sync that
//     follows the same transaction, the next synced commit, or the writer
//     100 ms later, syncs it. An operating-system crash can thus lose the
//     settlements of that moment, leaving their intents started, for
//     recovery to mark uncertain; see docs/durability.md.
//   - A sync that fails fails its callers and breaks the Store for
//     writing: every later write fails (the kernel may have dropped the
//     pages it could not write, so no later sync can vouch for them), and
//     the Store must be closed and the folder opened again, which recovers
//     this incarnation's started intents as uncertain.
//   - Writes of concurrent goroutines share transactions (group commit): one
//     writer goroutine takes everything queued, up to Options.MaxBatch
//     requests, and runs it in one transaction (a caller finding the writer
//     idle, nothing queued and nobody expected runs its own request the
//     same way, sparing two goroutine hand-offs), in which a request that
//     fails (budget exceeded, duplicate key, approval unavailable) is undone
//     alone while the others commit: by its own SAVEPOINT, or with no
//     savepoint where it is one statement that SQLite undoes alone. One
//     transaction per round holds everything queued: intent commits,
//     settlements and the rest. The
//     intent commits of a batch share their budget work: each budget's usage
//     is read once, every reservation is checked against it in memory in
//     queue order (exact, under the write lock), and one statement per
//     budget writes the batch's sum back; settlements that give no budget
//     back are two statements per batch.
//   - The journal is append-only (schema version 7): an intent's row is
//     written once; its settlement is a row of settlements, keyed by the
//     intent's seq; the intents not yet settled are the rows of
//     open_intents. Every read (GetIntent, lists, idempotency, recovery,
//     retention) joins the two, so it sees the latest state. No caller returns before the
//     transaction holding its write is committed; a caller alone is never
//     kept waiting for a batch to fill.
//   - Writes take SQLite's write lock first (BEGIN IMMEDIATE), so budget
//     checks and approval consumption are serialised across processes: two
//     gateways on one folder never over-spend a quota.
//   - Each Store is an incarnation: a row in the incarnations table and a
//     lock file dir/incarnations/<id>.lock held with flock(2) for the life of
//     the Store. Recover (run by Open) tests the other incarnations' lock
//     files; only when a lock can be taken, proving its owner is gone, are
//     that incarnation's started intents marked uncertain.
//   - The WAL is copied back into the database file (checkpointed) beside
//     the writer, never inside its COMMIT: a checkpointer goroutine with a
//     connection of its own runs PASSIVE checkpoints, syncing the WAL
//     before copying and the database file before recording the copy; the
//     writer checkpoints itself only once the WAL is 4000 frames long (see
//     checkpoint.go).
//   - The database runs with auto_vacuum=INCREMENTAL: Prune gives the pages
//     it frees back to the file system, so the file shrinks with the
//     journal. A database made before this setting is rewritten once
//     (VACUUM) by the first Open that finds it.
package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbackplane/backplane/store"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Options tune a Store; the zero value and nil mean the defaults.
type Options struct {
	// BusyTimeout is how long a statement waits for another connection's
	// lock (SQLite busy_timeout) before failing with SQLITE_BUSY. Default 5s.
	BusyTimeout time.Duration
	// MaxBatch is the most write requests committed by one transaction.
	// Default 256.
	MaxBatch int
	// Logger receives recovery events and retried lock contention.
	// Default slog.Default().
	Logger *slog.Logger
}

// Stats counts the writer's work since Open.
type Stats struct {
	// Transactions is the number of write transactions committed.
	Transactions int64
	// Synced is how many of them were synced to stable storage at their
	// commit; the others (settlements alone) were made durable by the next
	// synced commit or checkpoint.
	Synced int64
	// WALSyncs counts the syncs of the write-ahead log the writer made
	// because no synced commit followed a lazy one soon enough.
	WALSyncs int64
	// Requests is the number of write requests those transactions carried
	// (including requests that failed alone inside their savepoint).
	Requests int64
	// Checkpoints counts the checkpointer's passes over the write-ahead
	// log (see checkpoint.go); WriterCheckpoints, the writer's own, run
	// when the checkpointer fell too far behind.
	Checkpoints       int64
	WriterCheckpoints int64
	// WriterFinishes counts the writer's checkpoints of the last few
	// frames a checkpointer's pass left, with one call in flight, so that
	// the WAL starts over near ckptFrames rather than at the bound.
	WriterFinishes int64
}

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("sqlite store: closed")

// DBFile is the database's file name inside the state folder.
const DBFile = "backplane.db"

// busyRetries bounds how many times a write transaction that could not get
// the write lock within BusyTimeout is tried again before failing.
const busyRetries = 3

// readConns is the number of pooled read connections; WAL readers never
// block the writer, so a few suffice for the gateway's lookups.
const readConns = 4

// Store is a SQLite store.Store. It is safe for concurrent use.
type Store struct {
	dir         string
	incarnation string
	log         *slog.Logger
	maxBatch    int

	lockFile *os.File // this incarnation's flock, held until Close

	wdb  *sql.DB   // the writer's pool: one connection
	wc   *sql.Conn // the writer's connection, used under txMu
	rdb  *sql.DB   // read-only connections
	wstm map[string]*sql.Stmt
	rmu  sync.Mutex
	rstm map[string]*sql.Stmt

	queue      chan *writeReq
	writerDone chan struct{}
	// txMu is held by whoever runs a write transaction on wc: the writer
	// goroutine, or a caller that found it idle and runs its own request
	// (see runAlone). What follows, down to flushArmed, is used under it.
	txMu sync.Mutex
	w    *wtx     // the write transactions' statements and state
	wal  *walFile // the writer's (see syncWAL)
	// flush bounds how long a lazy commit stays unsynced when no synced
	// commit follows it (an idle gateway after its last settlement); the
	// writer goroutine syncs when it fires. flushArmed: it is set.
	flush      *time.Timer
	flushArmed bool
	// aloneBatch and live are runAlone's and runBatch's slices, reused.
	aloneBatch [1]*writeReq
	live       []*writeReq
	// aloneOK is true while the writer expects no request but the next
	// (it would not wait for company before committing it): a caller that
	// then finds the queue empty and the writer idle runs its request
	// itself, saving two goroutine hand-offs (see runAlone).
	aloneOK atomic.Bool
	// syncErr is set by the first failed sync: every write fails after it
	// (see syncWAL).
	syncErr atomic.Pointer[error]

	closeMu  sync.RWMutex
	closed   bool
	inflight sync.WaitGroup

	nTx, nSynced, nReq, nWALSync atomic.Int64
	nCkpt, nWriterCkpt           atomic.Int64
	nWriterFinish                atomic.Int64

	// The checkpointer (see checkpoint.go): its connection, its wake-up
	// and stop channels, closed ckDone when it has stopped.
	ckdb                 *sql.DB
	ckc                  *sql.Conn
	ckWake               chan struct{}
	ckStop, ckDone       chan struct{}
	ckptFrames, ckptHard int64 // the thresholds, in frames
	ckptNear             int64 // what the writer finishes copying itself, in frames
	walTotal, ckptBase   atomic.Int64
	walSeen              atomic.Pointer[walLen]
	ckptWoken, ckptRetry int64       // under txMu
	ckptNearRetry        int64       // under txMu
	restart              *walRestart // under txMu: see checkRestart
	// ckptHook, when set (by internal tests), runs before each of the
	// checkpointer's passes.
	ckptHook func()
	// pendingSync is true while a commit is not yet synced (see
	// syncWAL). Used under txMu.
	pendingSync bool

	// onBatch, when set (by internal tests, before the writes it observes),
	// is told the size of each committed transaction and how many of its
	// requests failed alone.
	onBatch func(size, failed int)
	// queueAlways, when set (by internal tests, before writing), sends
	// every request through the queue, never runAlone: for the tests that
	// hold the writer in a transaction and count what queues behind it.
	queueAlways bool
	// syncFault, when set (by internal tests), runs after each successful
	// sync of the WAL, and an error it returns is taken as the sync's.
	syncFault atomic.Pointer[func() error]
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed, with mode 0700) the state folder dir and
// its database dir/backplane.db, migrates the schema, starts a new
// incarnation and runs Recover.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	if strings.ContainsAny(abs, "?#") {
		// The driver reads its parameters after '?'.
		return nil, fmt.Errorf("sqlite store: folder %q: '?' and '#' are not allowed in the path", abs)
	}
	if err := os.MkdirAll(filepath.Join(abs, "incarnations"), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	if err := tightenPermissions(abs, o.Logger); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}

	s := &Store{
		dir:         abs,
		incarnation: newIncarnationID(),
		log:         o.Logger.With("store", "sqlite", "dir", abs),
		maxBatch:    o.MaxBatch,
		wstm:        map[string]*sql.Stmt{},
		rstm:        map[string]*sql.Stmt{},
		queue:       make(chan *writeReq, o.MaxBatch),
		writerDone:  make(chan struct{}),
	}
	ok, writing := false, false
	defer func() {
		if ok {
			return
		}
		if writing {
			close(s.queue)
			<-s.writerDone
		}
		s.stopCheckpointer()
		s.abandon()
	}()

	// The lock is taken before the incarnation row exists, so whoever sees
	// the row finds the lock held while this process lives.
	if s.lockFile, err = lockNew(s.lockPath(s.incarnation)); err != nil {
		return nil, fmt.Errorf("sqlite store: incarnation lock: %w", err)
	}

	base := filepath.Join(abs, DBFile) + "?" + pragmas(o.BusyTimeout)
	if s.wdb, err = sql.Open("sqlite", base); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetConnMaxIdleTime(0)
	s.wdb.SetConnMaxLifetime(0)
	if s.rdb, err = sql.Open("sqlite", base+"&_pragma=query_only(1)"); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	s.rdb.SetMaxOpenConns(readConns)
	s.rdb.SetMaxIdleConns(readConns)

	ctx := context.Background()
	// Connecting applies journal_mode=WAL, which needs a brief exclusive
	// lock when the file is new; a process opening the folder at the same
	// moment may see SQLITE_BUSY even after the busy timeout.
	if err := retryBusy(ctx, s.log, func() error {
		c, err := s.wdb.Conn(ctx)
		s.wc = c
		return err
	}); err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", base, err)
	}
	if err := s.checkPragmas(ctx); err != nil {
		return nil, err
	}
	// Checkpoints run beside the writer (see checkpoint.go), never inside
	// its COMMIT.
	if _, err := s.wc.ExecContext(ctx, `PRAGMA wal_autocheckpoint=0`); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	if err := ensureIncrementalVacuum(ctx, s.wc, s); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	if err := migrate(ctx, s.wc, s.log); err != nil {
		return nil, err
	}
	s.w = &wtx{s: s, tally: newTally(), queries: map[multiRowKey]string{}, open: map[string]int64{}}
	s.wal = &walFile{path: filepath.Join(s.dir, DBFile) + "-wal", dir: s.dir}
	s.flush = time.NewTimer(time.Hour)
	s.flush.Stop()
	s.aloneOK.Store(true)
	s.ckptFrames, s.ckptHard, s.ckptNear = defaultCkptFrames, defaultCkptHard, defaultCkptFrames/8
	if err := s.openCheckpointer(ctx, base); err != nil {
		return nil, err
	}
	go s.writer()
	writing = true

	now := time.Now().UTC()
	if err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO incarnations(id, pid, hostname, state, started_at) VALUES (?, ?, ?, 'alive', ?)`,
			s.incarnation, os.Getpid(), hostname(), now.UnixNano())
		return err
	}); err != nil {
		return nil, fmt.Errorf("sqlite store: record incarnation: %w", err)
	}
	if _, err := s.Recover(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// pragmas is the DSN query every connection is opened with. busy_timeout is
// applied first by the driver; synchronous and foreign_keys are
// per-connection settings; journal_mode=WAL is persistent in the file.
func pragmas(busy time.Duration) string {
	return strings.Join([]string{
		fmt.Sprintf("_pragma=busy_timeout(%d)", busy.Milliseconds()),
		// Before journal_mode: a new file takes it before its first page
		// is written (see ensureIncrementalVacuum for older files).
		"_pragma=auto_vacuum(2)",
		"_pragma=journal_mode(WAL)",
		// Set once: the writer syncs the WAL itself after each commit
		// that needs it (Store.syncWAL), so a settlement's commit does not
		// pay a sync, and the mode is never switched.
		"_pragma=synchronous(NORMAL)",
		"_pragma=foreign_keys(1)",
		// The WAL file is cut back to this size after a checkpoint, so a
		// burst of writes (a large prune) does not leave it large.
		"_pragma=journal_size_limit(67108864)",
	}, "&")
}

// checkPragmas verifies that the writer connection really runs with the
// settings durability depends on, rather than trusting the DSN.
func (s *Store) checkPragmas(ctx context.Context) error {
	var mode string
	var sync, fk int
	if err := s.wc.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("sqlite store: %w", err)
	}
	if err := s.wc.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return fmt.Errorf("sqlite store: %w", err)
	}
	if err := s.wc.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
		return fmt.Errorf("sqlite store: %w", err)
	}
	if !strings.EqualFold(mode, "wal") || sync != 1 || fk != 1 {
		return fmt.Errorf("sqlite store: connection settings journal_mode=%s synchronous=%d foreign_keys=%d, want wal, 1 (NORMAL, the writer syncing the WAL itself), 1", mode, sync, fk)
	}
	return nil
}

// Incarnation returns this Store's incarnation id.
func (s *Store) Incarnation() string { return s.incarnation }

// Dir returns the state folder (absolute).
func (s *Store) Dir() string { return s.dir }

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	return Stats{Transactions: s.nTx.Load(), Synced: s.nSynced.Load(), WALSyncs: s.nWALSync.Load(), Requests: s.nReq.Load(),
		Checkpoints: s.nCkpt.Load(), WriterCheckpoints: s.nWriterCkpt.Load(), WriterFinishes: s.nWriterFinish.Load()}
}

// Close waits for writes in progress, marks the incarnation closed, closes
// the database and releases and removes the incarnation's lock file. Calls
// after the first return nil. Intents still started stay started; the next
// Recover (by any process) marks them uncertain, since this incarnation can
// no longer settle them.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.inflight.Wait()

	// The writer is idle and nobody else can queue: mark the incarnation
	// closed through it directly.
	r := &writeReq{fn: func(w *wtx) error {
		_, err := w.exec(`UPDATE incarnations SET state = 'closed', ended_at = ? WHERE id = ? AND state = 'alive'`,
			time.Now().UnixNano(), s.incarnation)
		return err
	}, done: make(chan error, 1)}
	s.queue <- r
	err := <-r.done
	close(s.queue)
	<-s.writerDone
	s.stopCheckpointer()
	if e := s.abandon(); err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("sqlite store: close: %w", err)
	}
	return nil
}

// abandon releases every resource Open acquired, in reverse order. The
// lock file is removed while still locked, then unlocked by closing it.
func (s *Store) abandon() error {
	var errs []error
	for _, st := range s.wstm {
		errs = append(errs, st.Close())
	}
	for _, st := range s.rstm {
		errs = append(errs, st.Close())
	}
	if s.wc != nil {
		errs = append(errs, s.wc.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.ckc != nil {
		errs = append(errs, s.ckc.Close())
	}
	if s.ckdb != nil {
		errs = append(errs, s.ckdb.Close())
	}
	if s.lockFile != nil {
		errs = append(errs, os.Remove(s.lockPath(s.incarnation)), s.lockFile.Close())
	}
	return errors.Join(errs...)
}

func newIncarnationID() string {
	return fmt.Sprintf("p%d-%s", os.Getpid(), strings.ToLower(rand.Text()[:16]))
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func (s *Store) lockPath(id string) string {
	return filepath.Join(s.dir, "incarnations", id+".lock")
}

// lockNew creates path holding an exclusive flock. The file is locked under
// a temporary name and then renamed into place, so a lock file is never
// visible unlocked (a recoverer finding it unlocked would take its owner
// for dead). Go opens files close-on-exec, so backends the gateway starts
// never inherit the lock (a surviving child would keep a dead gateway
// looking alive).
func lockNew(path string) (*os.File, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	fmt.Fprintf(f, "pid %d\n", os.Getpid())
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	return f, nil
}
