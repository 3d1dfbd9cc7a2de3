package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
)

// migrations[i] takes the schema from user_version i to i+1. Append only:
// a released migration is never edited.
//
// Times are integer unix nanoseconds (UTC), NULL for the zero time. The
// budget_usage table holds, per (scope, key, window), the sum of the amounts
// of the reservations not released; it is maintained in the same transaction
// as the reservations (since version 5 kept in their intents' rows), so a
// check reads one row instead of summing a history that grows with the
// journal.
var migrations = []string{
	`
CREATE TABLE incarnations (
	id         TEXT PRIMARY KEY,
	pid        INTEGER NOT NULL,
	hostname   TEXT NOT NULL DEFAULT '',
	state      TEXT NOT NULL CHECK (state IN ('alive', 'closed', 'dead')),
	started_at INTEGER NOT NULL,
	ended_at   INTEGER
);

CREATE TABLE approvals (
	id              TEXT PRIMARY KEY,
	caller          TEXT NOT NULL,
	session         TEXT NOT NULL DEFAULT '',
	tool            TEXT NOT NULL,
	definition_hash TEXT NOT NULL,
	args_digest     TEXT NOT NULL,
	status          TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied')),
	decided_by      TEXT NOT NULL DEFAULT '',
	created_at      INTEGER,
	expires_at      INTEGER,
	decided_at      INTEGER,
	consumed_by     TEXT UNIQUE
);
CREATE INDEX approvals_call ON approvals (caller, tool, definition_hash, args_digest, created_at);
CREATE INDEX approvals_created ON approvals (created_at, id);

CREATE TABLE intents (
	seq             INTEGER PRIMARY KEY, -- commit order
	call_id         TEXT NOT NULL UNIQUE,
	caller          TEXT NOT NULL,
	session         TEXT NOT NULL DEFAULT '',
	tool            TEXT NOT NULL,
	definition_hash TEXT NOT NULL,
	arguments       BLOB,
	args_digest     TEXT NOT NULL,
	idempotency_key TEXT, -- NULL when none
	approval_id     TEXT,
	incarnation     TEXT NOT NULL REFERENCES incarnations (id),
	status          TEXT NOT NULL CHECK (status IN ('started', 'succeeded', 'failed', 'uncertain', 'executed', 'not_executed')),
	result          BLOB,
	error_class     TEXT NOT NULL DEFAULT '',
	error_message   TEXT NOT NULL DEFAULT '',
	resolved_by     TEXT NOT NULL DEFAULT '',
	created_at      INTEGER,
	settled_at      INTEGER
);
CREATE UNIQUE INDEX intents_idempotency ON intents (caller, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Started intents by incarnation, for recovery. Settled intents are listed
-- by status through a partial index of the rare statuses only: succeeded,
-- the common one, is found by scanning newest first, and no index entry is
-- written or moved for the calls that simply succeed.
CREATE INDEX intents_started ON intents (incarnation) WHERE status = 'started';
CREATE INDEX intents_rare ON intents (status) WHERE status NOT IN ('started', 'succeeded');

CREATE TABLE reservations (
	call_id  TEXT NOT NULL REFERENCES intents (call_id),
	scope    TEXT NOT NULL,
	key      TEXT NOT NULL,
	quota    INTEGER NOT NULL,
	amount   INTEGER NOT NULL,
	released INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX reservations_call ON reservations (call_id);

CREATE TABLE budget_usage (
	scope TEXT NOT NULL,
	key   TEXT NOT NULL,
	used  INTEGER NOT NULL,
	PRIMARY KEY (scope, key)
) WITHOUT ROWID;
`,
	// 2: pinned tool definitions (store.Pins).
	`
CREATE TABLE pins (
	tool          TEXT PRIMARY KEY,
	accepted_hash TEXT NOT NULL,
	seen_hash     TEXT NOT NULL,
	accepted_by   TEXT NOT NULL DEFAULT '',
	first_seen    INTEGER,
	updated_at    INTEGER
) WITHOUT ROWID;
`,
	// 3: what an approver sees and how the decision was made.
	`
ALTER TABLE approvals ADD COLUMN arguments BLOB;
ALTER TABLE approvals ADD COLUMN channel TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN reason TEXT NOT NULL DEFAULT '';
CREATE INDEX approvals_caller_pending ON approvals (caller) WHERE status = 'pending';
`,
	// 4: budget windows (budget.Window, kept as whole seconds: per is the
	// window's length, 0 for no window; window_start its start since the
	// epoch, 0 for no window) and the quota in force, so budget show can say
	// what remains. budget_usage is rebuilt, since its primary key grows.
	`
ALTER TABLE reservations ADD COLUMN per INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN window_start INTEGER NOT NULL DEFAULT 0;
CREATE TABLE budget_usage_new (
	scope        TEXT NOT NULL,
	key          TEXT NOT NULL,
	per          INTEGER NOT NULL DEFAULT 0,
	window_start INTEGER NOT NULL DEFAULT 0,
	quota        INTEGER NOT NULL DEFAULT 0,
	used         INTEGER NOT NULL,
	PRIMARY KEY (scope, key, per, window_start)
) WITHOUT ROWID;
INSERT INTO budget_usage_new (scope, key, quota, used)
	SELECT u.scope, u.key, coalesce((SELECT r.quota FROM reservations r
		WHERE r.scope = u.scope AND r.key = u.key ORDER BY r.rowid DESC LIMIT 1), 0), u.used
	FROM budget_usage u;
DROP TABLE budget_usage;
ALTER TABLE budget_usage_new RENAME TO budget_usage;
-- Windows by their end, for pruning the ended ones.
CREATE INDEX budget_usage_end ON budget_usage (window_start + per) WHERE per > 0;
-- The reservations still counted, by (scope, key), for an operator's reset.
CREATE INDEX reservations_held ON reservations (scope, key) WHERE released = 0;
`,
	// 5: reservations kept in their intent's row instead of a table of
	// their own (a row, two index entries and a foreign-key lookup each, on
	// every call): intents.reservations is a JSON array with one element
	// per reservation, [scope, key, quota, amount, per, window_start, gen],
	// NULL for none. An operator's reset no longer marks reservation rows
	// released: it deletes the usage rows and moves budget_generation on,
	// and a usage row made later carries the new generation in gen; a
	// release gives back only what matches its usage row's gen. A release
	// itself happens once per intent, with the status change that implies
	// it (started to failed, uncertain to not_executed), so it needs no
	// flag either. The reservations released before the upgrade (by a
	// release or a reset) are carried over with gen -1, matching no usage
	// row; the others with gen 0, the generation of every usage row.
	`
ALTER TABLE intents ADD COLUMN reservations TEXT;
ALTER TABLE budget_usage ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;
CREATE TABLE budget_generation (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	n  INTEGER NOT NULL
);
INSERT INTO budget_generation (id, n) VALUES (1, 0);
UPDATE intents SET reservations = (
	SELECT json_group_array(json_array(r.scope, r.key, r.quota, r.amount, r.per, r.window_start,
		CASE WHEN r.released = 0 THEN 0 ELSE -1 END))
	FROM reservations r WHERE r.call_id = intents.call_id)
WHERE call_id IN (SELECT call_id FROM reservations);
DROP TABLE reservations;
`,
	// 6: refused calls (store.Refusal): light rows, pruned by their time
	// and capped in number (the oldest by seq go first).
	`
CREATE TABLE refusals (
	seq         INTEGER PRIMARY KEY,
	call_id     TEXT NOT NULL UNIQUE,
	caller      TEXT NOT NULL,
	session     TEXT NOT NULL DEFAULT '',
	tool        TEXT NOT NULL,
	class       TEXT NOT NULL,
	step        TEXT NOT NULL DEFAULT '',
	message     TEXT NOT NULL DEFAULT '',
	args_digest TEXT NOT NULL DEFAULT '',
	approval_id TEXT NOT NULL DEFAULT '',
	at          INTEGER NOT NULL
);
CREATE INDEX refusals_at ON refusals (at);
`,
	// 7: the journal append-only (issue 27). An intent's row is written
	// once, at its commit; how it ended is a row of settlements, keyed by
	// the intent's seq, appended by the settlement (or by recovery, as
	// uncertain) instead of an UPDATE rewriting the intent's row and moving
	// it between partial indexes. The intents not yet settled are the rows
	// of open_intents, a small table (the calls in flight), which a trigger
	// fills at each intent's insert and each settlement empties: recovery
	// and "list started" read it instead of an index of the journal. The
	// intents table is rebuilt without its settlement columns (one
	// rewrite); settled intents are carried over to settlements, started
	// ones to open_intents. An operator's verdict on an uncertain intent
	// (rare) updates its settlement row.
	`
CREATE TABLE settlements (
	seq           INTEGER PRIMARY KEY, -- the intent's
	status        TEXT NOT NULL CHECK (status IN ('succeeded', 'failed', 'uncertain', 'executed', 'not_executed')),
	result        BLOB,
	error_class   TEXT NOT NULL DEFAULT '',
	error_message TEXT NOT NULL DEFAULT '',
	resolved_by   TEXT NOT NULL DEFAULT '',
	settled_at    INTEGER
);
-- Settled intents by the rare statuses, newest first through the rowid
-- (seq) every entry carries: succeeded, the common one, gets no entry.
CREATE INDEX settlements_rare ON settlements (status) WHERE status <> 'succeeded';
INSERT INTO settlements (seq, status, result, error_class, error_message, resolved_by, settled_at)
	SELECT seq, status, result, error_class, error_message, resolved_by, settled_at FROM intents WHERE status <> 'started';

CREATE TABLE open_intents (
	seq         INTEGER PRIMARY KEY, -- the intent's
	incarnation TEXT NOT NULL
);
INSERT INTO open_intents (seq, incarnation) SELECT seq, incarnation FROM intents WHERE status = 'started';

CREATE TABLE intents_new (
	seq             INTEGER PRIMARY KEY, -- commit order
	call_id         TEXT NOT NULL UNIQUE,
	caller          TEXT NOT NULL,
	session         TEXT NOT NULL DEFAULT '',
	tool            TEXT NOT NULL,
	definition_hash TEXT NOT NULL,
	arguments       BLOB,
	args_digest     TEXT NOT NULL,
	idempotency_key TEXT, -- NULL when none
	approval_id     TEXT,
	incarnation     TEXT NOT NULL REFERENCES incarnations (id),
	created_at      INTEGER,
	reservations    TEXT
);
INSERT INTO intents_new (seq, call_id, caller, session, tool, definition_hash, arguments, args_digest,
		idempotency_key, approval_id, incarnation, created_at, reservations)
	SELECT seq, call_id, caller, session, tool, definition_hash, arguments, args_digest,
		idempotency_key, approval_id, incarnation, created_at, reservations FROM intents;
DROP TABLE intents;
ALTER TABLE intents_new RENAME TO intents;
CREATE UNIQUE INDEX intents_idempotency ON intents (caller, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TRIGGER intents_open AFTER INSERT ON intents BEGIN
	INSERT INTO open_intents (seq, incarnation) VALUES (new.seq, new.incarnation);
END;
`,
	// 8: who made the call (issue 24): the MCP client's name/version and
	// the protocol revision it spoke, NULL when unknown. Never arguments.
	`
ALTER TABLE intents ADD COLUMN client TEXT;
ALTER TABLE intents ADD COLUMN protocol_version TEXT;
`,
	// 9: upstream credentials (store.Credential): plain metadata beside the
	// token the gateway sealed; the store holds no key.
	`
CREATE TABLE upstream_credentials (
	server  TEXT NOT NULL,
	caller  TEXT NOT NULL DEFAULT '',
	mode    TEXT NOT NULL,
	scopes  TEXT NOT NULL DEFAULT '',
	subject TEXT NOT NULL DEFAULT '',
	expiry  INTEGER,
	updated INTEGER NOT NULL,
	sealed  BLOB NOT NULL,
	PRIMARY KEY (server, caller)
);
`,
	// 10: tasks (store.Task): a call behind an operator's approval that its
	// client polls (the MCP tasks extension); one per approval request.
	`
CREATE TABLE tasks (
	id               TEXT PRIMARY KEY,
	caller           TEXT NOT NULL,
	approval_id      TEXT NOT NULL UNIQUE,
	tool             TEXT NOT NULL,
	arguments        BLOB,
	client_info      TEXT NOT NULL DEFAULT '',
	protocol_version TEXT NOT NULL DEFAULT '',
	status           TEXT NOT NULL CHECK (status IN ('waiting', 'running', 'completed', 'failed', 'cancelled')),
	run_by           TEXT NOT NULL DEFAULT '',
	outcome          BLOB,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	expires_at       INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX tasks_expires ON tasks (expires_at);
`,
	// 11: the per_caller logins in progress (store.PendingLogin), so that
	// the callback may reach any process on the store: found by a digest
	// of the state, their secrets sealed by the gateway.
	`
CREATE TABLE pending_logins (
	key     TEXT PRIMARY KEY,
	server  TEXT NOT NULL,
	caller  TEXT NOT NULL,
	scopes  TEXT NOT NULL DEFAULT '',
	created INTEGER NOT NULL,
	expires INTEGER NOT NULL,
	sealed  BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX pending_logins_caller ON pending_logins (caller, server);
CREATE INDEX pending_logins_expires ON pending_logins (expires);
`,
	// 12: the path an approval request's call resolved to
	// (store.Approval.ResolvedPath): '' for the requests made before, and
	// for tools without a path argument.
	`
ALTER TABLE approvals ADD COLUMN resolved_path TEXT NOT NULL DEFAULT '';
`,
	// 13: the lease of a running task's claim (store.Task.LeaseUntil),
	// NULL for the tasks claimed before (lapsed); and the open tasks, which
	// every serve's sweeper reads (store.Tasks.DueTasks), by status.
	`
ALTER TABLE tasks ADD COLUMN lease_until INTEGER;
CREATE INDEX tasks_open ON tasks (status, created_at) WHERE status IN ('waiting', 'running');
`,
	// 14: settlements' status CHECK as comparisons rather than IN: SQLite
	// evaluates an IN list of more than two values by building a temporary
	// index, for every row inserted, which cost 3-5 us per settlement (a
	// third of its INSERT). The same statuses; the table is rewritten once.
	`
CREATE TABLE settlements_new (
	seq           INTEGER PRIMARY KEY, -- the intent's
	status        TEXT NOT NULL CHECK (status = 'succeeded' OR status = 'failed' OR status = 'uncertain'
		OR status = 'executed' OR status = 'not_executed'),
	result        BLOB,
	error_class   TEXT NOT NULL DEFAULT '',
	error_message TEXT NOT NULL DEFAULT '',
	resolved_by   TEXT NOT NULL DEFAULT '',
	settled_at    INTEGER
);
INSERT INTO settlements_new (seq, status, result, error_class, error_message, resolved_by, settled_at)
	SELECT seq, status, result, error_class, error_message, resolved_by, settled_at FROM settlements;
DROP TABLE settlements;
ALTER TABLE settlements_new RENAME TO settlements;
CREATE INDEX settlements_rare ON settlements (status) WHERE status <> 'succeeded';
`,
	// 15: what a settled error told its caller beside its class and message
	// (store.Intent.ErrorDetail: violations, the upstream that asked for
	// input), NULL when nothing more, and for the settlements made before.
	`
ALTER TABLE settlements ADD COLUMN error_detail BLOB;
`,
}

// SchemaVersion is the user_version this package's schema has.
var SchemaVersion = len(migrations)

// migrate brings the schema to SchemaVersion. It runs inside BEGIN
// IMMEDIATE, so two processes opening a new folder at once migrate it once:
// the second waits for the first's write lock, then finds the version
// current. A database newer than this package is refused rather than
// misread.
func migrate(ctx context.Context, c *sql.Conn, log *slog.Logger) (err error) {
	if err := retryBusy(ctx, log, func() error {
		_, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`)
		return err
	}); err != nil {
		return fmt.Errorf("sqlite store: migrate: %w", err)
	}
	defer func() {
		if err != nil {
			c.ExecContext(ctx, `ROLLBACK`)
			err = fmt.Errorf("sqlite store: migrate: %w", err)
		}
	}()
	var v int
	if err := c.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this program's %d", v, len(migrations))
	}
	for ; v < len(migrations); v++ {
		if _, err := c.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("to version %d: %w", v+1, err)
		}
		// PRAGMA takes no parameters; v is an int.
		if _, err := c.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
			return err
		}
		log.Debug("schema migrated", "version", v+1)
	}
	_, err = c.ExecContext(ctx, `COMMIT`)
	return err
}
