// Package postgres is the [store.Store] shared by several gateway replicas:
// one PostgreSQL database (through github.com/jackc/pgx/v5), so budgets,
// approvals, idempotency keys, pins and the journal are the same whichever
// replica serves a call.
//
// What it promises beyond the store contract:
//
//   - Open applies the schema migrations (versioned in a schema_migrations
//     table) in one transaction under pg_advisory_xact_lock: replicas
//     starting at once migrate once; a schema newer than this package is
//     refused.
//   - Every write is one transaction committed with the server's
//     synchronous_commit (on by default: the commit is on the server's
//     stable storage when a method returns), except settlements, which
//     commit with synchronous_commit=off (visible at once, on disk within
//     the server's wal_writer_delay; see docs/durability.md for what a
//     crash of the database server can lose). CommitIntent is one
//     transaction: each budget row's reservation, then the intent row
//     (which records its reservations, schema version 10), and the
//     approval's consumption, or nothing; its statements are sent in one round trip
//     (a pipelined batch, run by the server as one implicit transaction),
//     and a condition that refuses the commit raises an error in its
//     statement, which rolls the whole transaction back. The statements
//     every call runs are named prepared statements, prepared once per
//     connection (so a pooler must keep a connection's prepared
//     statements: PgBouncer's transaction mode needs
//     max_prepared_statements).
//   - Group commit (group.go): one committer per Store commits the intents
//     queued at the moment in one transaction (one WAL flush, one update
//     per budget row with the group's summed amount); a group that cannot
//     commit as a whole writes nothing and its intents are committed one
//     by one, each with the outcome it would have had alone. A settler
//     likewise writes the settlements queued at the moment in one
//     statement. The journal is append-only (schema version 7): an intent's
//     row is written once, with its reservations (schema version 10); its
//     settlement is a row of settlements (keyed by the intent's seq, which
//     the Store keeps from the commit) and the deletion of its
//     open_intents row, the table of the calls in flight that recovery
//     reads. No statement a call runs reads the journal's rows.
//   - Budget reservations are atomic across replicas without SERIALIZABLE:
//     each is one conditional upsert of the (scope, key) row of
//     budget_usage (INSERT ... ON CONFLICT DO UPDATE ... WHERE used + amount
//     <= quota), which takes that row's lock until commit, so a concurrent
//     reservation of the same key, in any process, waits and then re-checks
//     against the committed sum. Rows are locked in one global order (scope,
//     then key, byte order), so reservations never deadlock each other; a
//     deadlock or serialization failure that still happens (40P01, 40001)
//     is retried a few times with the whole transaction. The budget rows
//     are locked before the intent is inserted, so an intent's seq is
//     drawn while its transaction holds them: an operator's reset marks
//     the rows it removes with a value of the same sequence, and a later
//     release gives back only to a row no mark above its intent's seq
//     covers. A group takes each
//     budget row's lock once for all its intents, so the rate at which a
//     row is locked is at most one per WAL flush per replica while the
//     calls per flush grow with the load.
//   - Each Store is an incarnation with a lease in the incarnations table,
//     on the database's clock: Open records lease_expires_at =
//     clock_timestamp() + LeaseTTL, and a goroutine renews it every
//     RenewEvery and runs Recover every LeaseTTL, so a live replica cleans
//     up after a dead one. Recover declares dead only the incarnations
//     whose lease has expired, and in the same transaction marks their
//     started intents uncertain: never while a lease is alive.
//   - Fencing: CommitIntent inserts the intent only while its incarnation
//     is alive with an unexpired lease (checked and share-locked in the
//     same statement, so recovery waits for commits in flight and commits
//     after it are refused); Settle moves only intents still started by an
//     incarnation still alive. A replica that comes back after being
//     declared dead can neither settle what recovery marked nor commit new
//     calls: its renewal finds its row dead, logs it at error level, and
//     the store refuses every further CommitIntent with [ErrLeaseLost].
//   - Approvals decided through any replica are seen by all: the gateway
//     polls GetApproval while a call waits (gateway.ApprovalOptions.PollInterval,
//     100ms by default), which bounds how late a waiting call learns of a
//     decision made elsewhere. The store sends no notifications.
//   - A write, once its connection is acquired, runs to its end even if the
//     caller's context ends (bounded by writeTimeout), so a caller never
//     abandons a transaction that may still commit.
package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbackplane/backplane/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Options tune a Store; nil and zero fields mean the defaults.
type Options struct {
	// Schema is the PostgreSQL schema holding the store's tables, created
	// if missing. Default: the connection URL's search_path parameter when
	// it names one schema, else "public".
	Schema string
	// LeaseTTL is how long this incarnation stays alive without renewing
	// its lease; another replica's Recover may declare it dead after that.
	// Default 15s.
	LeaseTTL time.Duration
	// RenewEvery is how often the lease is renewed; it must be shorter
	// than LeaseTTL. Default LeaseTTL/3.
	RenewEvery time.Duration
	// Logger receives recovery and lease events. Default slog.Default().
	Logger *slog.Logger
	// MaxConns is the most connections the Store opens at once. Default:
	// the URL's pool_max_conns parameter if given, else 16.
	MaxConns int32
}

// Errors of this store beyond the contract's.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("postgres store: closed")
	// ErrLeaseLost: another replica declared this incarnation dead after its
	// lease expired and marked its started intents uncertain. The store
	// commits nothing more; the process should restart.
	ErrLeaseLost = errors.New("postgres store: this replica's lease expired and another replica declared it dead; it can no longer start or settle calls (restart it)")
	// ErrLeaseExpired: the lease has expired and has not been renewed yet
	// (the database was unreachable or slow). Calls are refused until the
	// renewal succeeds, since another replica may recover this one at any
	// moment.
	ErrLeaseExpired = errors.New("postgres store: this replica's lease has expired; refusing to start calls until it is renewed")
)

const (
	defaultLeaseTTL = 15 * time.Second
	defaultMaxConns = 16
	// writeTimeout bounds a write transaction once started, independently
	// of the caller's context.
	writeTimeout = 30 * time.Second
	// txRetries is how many times a transaction failing with a deadlock or
	// serialization failure is run again.
	txRetries = 5
)

// Store is a PostgreSQL store.Store. It is safe for concurrent use.
type Store struct {
	pool        *pool
	schema      string
	incarnation string
	log         *slog.Logger
	leaseTTL    time.Duration
	renewEvery  time.Duration
	maxConns    int32 // the pool's size (LockCredential needs two)

	lost        atomic.Bool // declared dead by another replica
	renewPaused atomic.Bool // test hook: the lease is not renewed

	closeMu  sync.RWMutex
	closed   bool
	inflight sync.WaitGroup

	stopKeep context.CancelFunc
	keepDone chan struct{}

	commits committers

	// open maps the call ids of the intents this Store committed and has
	// not settled to their seq, so that their settlements find their rows
	// by seq instead of looking each up by call id (see group.go). It is
	// filled when a commit's transaction has committed and emptied by the
	// settlements; an intent missing from it is looked up.
	openMu sync.Mutex
	open   map[string]int64
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL or key=value
// connection string), migrates the schema, records a new incarnation with
// its lease, starts renewing it and runs Recover. Errors never show the
// URL's password.
func Open(ctx context.Context, url string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = defaultLeaseTTL
	}
	if o.RenewEvery <= 0 {
		o.RenewEvery = o.LeaseTTL / 3
	}
	if o.RenewEvery >= o.LeaseTTL {
		return nil, fmt.Errorf("postgres store: RenewEvery %v must be shorter than LeaseTTL %v", o.RenewEvery, o.LeaseTTL)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cfg, err := pgx.ParseConfig(url) // its errors redact the password
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if v, ok := cfg.RuntimeParams["pool_max_conns"]; ok {
		// A pgxpool parameter; the server would refuse it as a setting.
		delete(cfg.RuntimeParams, "pool_max_conns")
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("postgres store: pool_max_conns %q is not a positive integer", v)
		}
		if o.MaxConns <= 0 {
			o.MaxConns = int32(n)
		}
	}
	if o.MaxConns <= 0 {
		o.MaxConns = defaultMaxConns
	}
	schema := o.Schema
	if schema == "" {
		schema = strings.TrimSpace(cfg.RuntimeParams["search_path"])
		if strings.Contains(schema, ",") {
			return nil, fmt.Errorf("postgres store: search_path %q names several schemas; set one (or Options.Schema)", schema)
		}
		if len(schema) >= 2 && schema[0] == '"' && schema[len(schema)-1] == '"' {
			schema = strings.ReplaceAll(schema[1:len(schema)-1], `""`, `"`)
		}
	}
	if schema == "" {
		schema = "public"
	}
	// Statement descriptions are cached, but no named statements are
	// prepared on the server by the batches themselves: after an error
	// inside a pipelined batch the server skips the batch's later Parse
	// messages, which would leave a cache of prepared statements pointing
	// at statements that do not exist. The statements of every call are
	// prepared explicitly instead (see prepare).
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	// Every connection works in the schema, and only there.
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()

	pl, err := newPool(cfg, int(o.MaxConns))
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	s := &Store{
		pool:        pl,
		schema:      schema,
		incarnation: newIncarnationID(),
		leaseTTL:    o.LeaseTTL,
		renewEvery:  o.RenewEvery,
		maxConns:    o.MaxConns,
		keepDone:    make(chan struct{}),
		open:        map[string]int64{},
	}
	s.log = o.Logger.With("store", "postgres", "schema", schema, "incarnation", s.incarnation)
	ok := false
	defer func() {
		if !ok {
			s.pool.close()
		}
	}()

	c, err := s.pool.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	err = migrate(ctx, c.Conn, schema, s.log)
	if err == nil {
		_, err = c.Exec(ctx, `INSERT INTO incarnations (id, pid, hostname, state, lease_expires_at)
			VALUES ($1, $2, $3, 'alive', clock_timestamp() + $4 * interval '1 microsecond')`,
			s.incarnation, os.Getpid(), hostname(), s.leaseTTL.Microseconds())
		if err != nil {
			err = fmt.Errorf("postgres store: record incarnation: %w", err)
		}
	}
	s.pool.release(c, err)
	if err != nil {
		return nil, err
	}
	keepCtx, stop := context.WithCancel(context.Background())
	s.stopKeep = stop
	go s.keepAlive(keepCtx)
	s.startCommitters()
	if _, err := s.Recover(ctx); err != nil {
		s.Close()
		ok = true // Close released everything
		return nil, err
	}
	ok = true
	return s, nil
}

// opened records the seq of an intent this Store committed.
func (s *Store) opened(callID string, seq int64) {
	s.openMu.Lock()
	s.open[callID] = seq
	s.openMu.Unlock()
}

// openSeq returns the seq of callID's intent if this Store committed it
// and has not settled it.
func (s *Store) openSeq(callID string) (int64, bool) {
	s.openMu.Lock()
	seq, ok := s.open[callID]
	s.openMu.Unlock()
	return seq, ok
}

// forget removes callID from the intents this Store may settle by seq.
func (s *Store) forget(callID string) {
	s.openMu.Lock()
	delete(s.open, callID)
	s.openMu.Unlock()
}

// Healthy reports ErrLeaseLost once another replica has declared this one
// dead: from then on every CommitIntent is refused, so it must not be sent
// calls (store.HealthChecker).
func (s *Store) Healthy(ctx context.Context) error {
	if s.lost.Load() {
		return ErrLeaseLost
	}
	return nil
}

var _ store.HealthChecker = (*Store)(nil)

// Incarnation returns this Store's incarnation id.
func (s *Store) Incarnation() string { return s.incarnation }

// Schema returns the schema the Store works in.
func (s *Store) Schema() string { return s.schema }

// Close stops renewing the lease, waits for the calls in progress, marks
// the incarnation closed and closes the connections. Calls after the first
// return nil. Intents still started stay started; the next Recover (by any
// replica) marks them uncertain, since this incarnation can no longer
// settle them.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.inflight.Wait()
	s.stopKeep()
	<-s.keepDone
	s.stopCommitters()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.conn(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `UPDATE incarnations SET state = 'closed', ended_at = clock_timestamp() WHERE id = $1 AND state = 'alive'`, s.incarnation)
		return err
	})
	s.pool.close()
	if err != nil {
		return fmt.Errorf("postgres store: close: %w", err)
	}
	return nil
}

// enter admits one call unless the store is closed; the caller must call
// s.inflight.Done when it ends.
func (s *Store) enter() error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.inflight.Add(1)
	return nil
}

// conn runs fn with a pooled connection.
func (s *Store) conn(ctx context.Context, fn func(c *pgx.Conn) error) error {
	c, err := s.pool.acquire(ctx)
	if err != nil {
		return err
	}
	err = fn(c.Conn)
	s.pool.release(c, err)
	return err
}

// read runs fn, a read, with a pooled connection, unless the store is
// closed.
func (s *Store) read(ctx context.Context, fn func(c *pgx.Conn) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	return s.conn(ctx, fn)
}

// write runs fn, a write, with a pooled connection. The caller's ctx bounds
// the wait for a connection; fn gets a context that ctx's end does not
// cancel (see the package comment), bounded by writeTimeout.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, c *pgx.Conn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	return s.writeConn(ctx, fn)
}

// writeConn is write without the closed check, for Close and the lease
// goroutine.
func (s *Store) writeConn(ctx context.Context, fn func(ctx context.Context, c *pgx.Conn) error) error {
	return s.conn(ctx, func(c *pgx.Conn) error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
		defer cancel()
		return fn(wctx, c)
	})
}

// inTx runs fn in a transaction (see write), committed when fn returns nil
// and rolled back otherwise.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.write(ctx, func(ctx context.Context, c *pgx.Conn) error { return s.runTx(ctx, c, fn) })
}

// runTx runs fn in a transaction on c. A deadlock or serialization failure
// runs the whole transaction again, up to txRetries times; fn must
// therefore set its results afresh on each run.
func (s *Store) runTx(ctx context.Context, c *pgx.Conn, fn func(ctx context.Context, tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return fn(ctx, tx) })
		if err == nil || !retryable(err) || attempt > txRetries {
			return err
		}
		s.log.Debug("transaction retried", "attempt", attempt, "error", err)
		time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
	}
}

// retryable reports a deadlock or serialization failure: the transaction
// was rolled back and may simply be run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func newIncarnationID() string {
	return fmt.Sprintf("pg-p%d-%s", os.Getpid(), strings.ToLower(rand.Text()[:16]))
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
