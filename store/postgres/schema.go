package postgres

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// migrations[i] takes the schema from version i to i+1, recorded in the
// schema_migrations table. Append only: a released migration is never
// edited.
//
// Times are timestamptz (microseconds, UTC instants), NULL for the zero
// time; bytes are bytea, NULL for nil. scope and key are COLLATE "C" so the
// database orders them byte by byte, as Go does: budget rows are always
// locked in that one order (see reserve and release), which keeps
// concurrent reservations from deadlocking each other.
var migrations = []string{
	`
CREATE TABLE incarnations (
	id               text PRIMARY KEY,
	pid              integer NOT NULL,
	hostname         text NOT NULL DEFAULT '',
	state            text NOT NULL CHECK (state IN ('alive', 'closed', 'dead')),
	started_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
	lease_expires_at timestamptz NOT NULL,
	ended_at         timestamptz
);

CREATE TABLE approvals (
	id              text PRIMARY KEY,
	caller          text NOT NULL,
	session         text NOT NULL DEFAULT '',
	tool            text NOT NULL,
	definition_hash text NOT NULL,
	args_digest     text NOT NULL,
	status          text NOT NULL CHECK (status IN ('pending', 'approved', 'denied')),
	decided_by      text NOT NULL DEFAULT '',
	created_at      timestamptz,
	expires_at      timestamptz,
	decided_at      timestamptz,
	consumed_by     text UNIQUE
);
CREATE INDEX approvals_call ON approvals (caller, tool, definition_hash, args_digest, created_at);
CREATE INDEX approvals_created ON approvals (created_at, id);

CREATE TABLE intents (
	seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- commit order
	call_id         text NOT NULL UNIQUE,
	caller          text NOT NULL,
	session         text NOT NULL DEFAULT '',
	tool            text NOT NULL,
	definition_hash text NOT NULL,
	arguments       bytea,
	args_digest     text NOT NULL,
	idempotency_key text, -- NULL when none
	approval_id     text,
	incarnation     text NOT NULL REFERENCES incarnations (id),
	status          text NOT NULL CHECK (status IN ('started', 'succeeded', 'failed', 'uncertain', 'executed', 'not_executed')),
	result          bytea,
	error_class     text NOT NULL DEFAULT '',
	error_message   text NOT NULL DEFAULT '',
	resolved_by     text NOT NULL DEFAULT '',
	created_at      timestamptz,
	settled_at      timestamptz
);
CREATE UNIQUE INDEX intents_idempotency ON intents (caller, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Started intents by incarnation, for recovery; the statuses other than
-- started and succeeded (rare) by status, for an operator's listing.
CREATE INDEX intents_started ON intents (incarnation) WHERE status = 'started';
CREATE INDEX intents_rare ON intents (status, seq) WHERE status NOT IN ('started', 'succeeded');

CREATE TABLE reservations (
	call_id  text NOT NULL REFERENCES intents (call_id),
	scope    text COLLATE "C" NOT NULL,
	key      text COLLATE "C" NOT NULL,
	quota    bigint NOT NULL,
	amount   bigint NOT NULL,
	released boolean NOT NULL DEFAULT false
);
CREATE INDEX reservations_call ON reservations (call_id);

-- Per (scope, key), the sum of the amounts of the reservations not
-- released, maintained in the transactions that reserve and release: a
-- check reads and locks one row instead of summing a growing history.
CREATE TABLE budget_usage (
	scope text COLLATE "C" NOT NULL,
	key   text COLLATE "C" NOT NULL,
	used  bigint NOT NULL,
	PRIMARY KEY (scope, key)
);

-- backplane_refuse raises the error CommitIntent recognises as a refusal
-- (SQLSTATE BP001, the message naming what refused). CommitIntent's
-- statements are sent together in one implicit transaction, and a guard
-- calling this function when a condition fails rolls the whole transaction
-- back without another round trip.
CREATE FUNCTION backplane_refuse(what text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'backplane: % refused', what USING ERRCODE = 'BP001';
END
$$;

CREATE TABLE pins (
	tool          text PRIMARY KEY,
	accepted_hash text NOT NULL,
	seen_hash     text NOT NULL,
	accepted_by   text NOT NULL DEFAULT '',
	first_seen    timestamptz,
	updated_at    timestamptz
);
`,
	// 2: what an approver sees and how the decision was made.
	`
ALTER TABLE approvals ADD COLUMN arguments bytea;
ALTER TABLE approvals ADD COLUMN channel text NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN reason text NOT NULL DEFAULT '';
CREATE INDEX approvals_caller_pending ON approvals (caller) WHERE status = 'pending';
`,
	// 3: budget windows (budget.Window, kept as whole seconds: per is the
	// window's length, 0 for no window; window_start its start since the
	// epoch, 0 for no window) and the quota in force, so budget show can say
	// what remains. Usage rows are locked in (scope, key, per, window_start)
	// order.
	`
ALTER TABLE reservations
	ADD COLUMN per bigint NOT NULL DEFAULT 0,
	ADD COLUMN window_start bigint NOT NULL DEFAULT 0;
ALTER TABLE budget_usage
	ADD COLUMN per bigint NOT NULL DEFAULT 0,
	ADD COLUMN window_start bigint NOT NULL DEFAULT 0,
	ADD COLUMN quota bigint NOT NULL DEFAULT 0;
UPDATE budget_usage u SET quota = coalesce((SELECT r.quota FROM reservations r JOIN intents i USING (call_id)
	WHERE r.scope = u.scope AND r.key = u.key ORDER BY i.seq DESC LIMIT 1), 0);
ALTER TABLE budget_usage DROP CONSTRAINT budget_usage_pkey;
ALTER TABLE budget_usage ADD PRIMARY KEY (scope, key, per, window_start);
-- Windows by their end, for pruning the ended ones.
CREATE INDEX budget_usage_end ON budget_usage ((window_start + per)) WHERE per > 0;
-- The reservations still counted, by (scope, key), for an operator's reset.
CREATE INDEX reservations_held ON reservations (scope, key) WHERE NOT released;
`,
	// 4: no foreign keys on the per-call rows. Each ran, for every row
	// inserted, a query of its own that share-locked the referenced row
	// (for a reservation, its intent just inserted: a lock written to that
	// row and logged), at every call; what they guarded holds by
	// construction: an intent is inserted only while its incarnation is
	// alive, in the statement that share-locks that row (insertIntent),
	// and Prune deletes an incarnation only when it is closed or dead and
	// no intent names it; reservations are inserted in their intent's
	// transaction and deleted with it (pruneIntents).
	`
ALTER TABLE intents DROP CONSTRAINT IF EXISTS intents_incarnation_fkey;
ALTER TABLE reservations DROP CONSTRAINT IF EXISTS reservations_call_id_fkey;
`,
	// 5: refused calls (store.Refusal): light rows written by every
	// replica, pruned by their time and capped in number (the oldest by
	// seq go first).
	`
CREATE TABLE refusals (
	seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	call_id     text NOT NULL UNIQUE,
	caller      text NOT NULL,
	session     text NOT NULL DEFAULT '',
	tool        text NOT NULL,
	class       text NOT NULL,
	step        text NOT NULL DEFAULT '',
	message     text NOT NULL DEFAULT '',
	args_digest text NOT NULL DEFAULT '',
	approval_id text NOT NULL DEFAULT '',
	at          timestamptz NOT NULL
);
CREATE INDEX refusals_at ON refusals (at);
`,
	// 6: who made the call (issue 24): the MCP client's name/version and
	// the protocol revision it spoke, NULL when unknown. Never arguments.
	`
ALTER TABLE intents ADD COLUMN client text, ADD COLUMN protocol_version text;
`,
	// 7: the journal append-only (issue 27), as on SQLite. An intent's row
	// is written once, at its commit; how it ended is a row of
	// settlements, keyed by the intent's seq, inserted by the settlement
	// (or by recovery, as uncertain). The settlement used to be an UPDATE
	// of the intent's row that could not be HOT (status was in two partial
	// indexes): a new version of the whole row, arguments included, and
	// new entries in every index of intents. The intents not yet settled
	// are the rows of open_intents, inserted with each intent and deleted
	// by its settlement: recovery and "list started" read it. An
	// operator's verdict on an uncertain intent (rare) updates its
	// settlement row. Settled intents are carried over to settlements,
	// started ones to open_intents; dropping the old columns rewrites
	// nothing.
	`
CREATE TABLE settlements (
	seq           bigint PRIMARY KEY, -- the intent's
	status        text NOT NULL CHECK (status IN ('succeeded', 'failed', 'uncertain', 'executed', 'not_executed')),
	result        bytea,
	error_class   text NOT NULL DEFAULT '',
	error_message text NOT NULL DEFAULT '',
	resolved_by   text NOT NULL DEFAULT '',
	settled_at    timestamptz
);
-- The statuses other than succeeded (rare) by status, for an operator's
-- listing.
CREATE INDEX settlements_rare ON settlements (status, seq) WHERE status <> 'succeeded';
INSERT INTO settlements (seq, status, result, error_class, error_message, resolved_by, settled_at)
	SELECT seq, status, result, error_class, error_message, resolved_by, settled_at FROM intents WHERE status <> 'started';
CREATE TABLE open_intents (
	seq         bigint PRIMARY KEY, -- the intent's
	incarnation text NOT NULL
);
INSERT INTO open_intents (seq, incarnation) SELECT seq, incarnation FROM intents WHERE status = 'started';
DROP INDEX intents_started;
DROP INDEX intents_rare;
ALTER TABLE intents DROP COLUMN status, DROP COLUMN result, DROP COLUMN error_class, DROP COLUMN error_message,
	DROP COLUMN resolved_by, DROP COLUMN settled_at;
`,
	// 8: upstream credentials (store.Credential), shared by the replicas:
	// plain metadata beside the token the gateway sealed; the store holds
	// no key.
	`
CREATE TABLE upstream_credentials (
	server  text NOT NULL,
	caller  text NOT NULL DEFAULT '',
	mode    text NOT NULL,
	scopes  text NOT NULL DEFAULT '',
	subject text NOT NULL DEFAULT '',
	expiry  timestamptz,
	updated timestamptz NOT NULL,
	sealed  bytea NOT NULL,
	PRIMARY KEY (server, caller)
);
`,
	// 9: tasks (store.Task): a call behind an operator's approval that its
	// client polls (the MCP tasks extension), one per approval request,
	// read by every replica; a move is one UPDATE conditioned on the
	// status, so one replica claims a task to run it.
	`
CREATE TABLE tasks (
	id               text PRIMARY KEY,
	caller           text NOT NULL,
	approval_id      text NOT NULL UNIQUE,
	tool             text NOT NULL,
	arguments        bytea,
	client_info      text NOT NULL DEFAULT '',
	protocol_version text NOT NULL DEFAULT '',
	status           text NOT NULL CHECK (status IN ('waiting', 'running', 'completed', 'failed', 'cancelled')),
	run_by           text NOT NULL DEFAULT '',
	outcome          bytea,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	expires_at       timestamptz NOT NULL
);
CREATE INDEX tasks_expires ON tasks (expires_at);
`,
	// 10: reservations kept in their intent's row (issue 27), as on SQLite
	// (its schema 5), instead of a table of their own: a row and two index
	// entries per reservation on every call, and a statement per group.
	// intents.reservations is a JSON array with one element per
	// reservation, [scope, key, quota, amount, per, window_start, gen],
	// NULL for none; gen is 0, or -1 for a reservation released before
	// this version (by its own release or an operator's reset), which
	// gives nothing back. A release happens once per intent, with the
	// status change that implies it (started to failed, uncertain to
	// not_executed), so it needs no flag.
	//
	// An operator's reset can no longer mark reservations released (they
	// are inside journal rows no index finds by budget): it deletes the
	// usage rows and records, per row deleted, a reset mark in
	// budget_resets, a value drawn from the intents' seq sequence while it
	// holds the rows' locks. A release gives back only to a usage row with
	// no reset mark above its intent's seq. That is exact because
	// CommitIntent takes its budget rows' locks before it inserts the
	// intent (the intent's seq is drawn while it holds them): a
	// reservation counted in a row that a reset deleted drew its seq
	// before the reset could lock the row, hence below the mark, and one
	// counted in a row made after the reset drew its seq after the reset
	// committed, hence above it.
	`
ALTER TABLE intents ADD COLUMN reservations jsonb;
UPDATE intents i SET reservations = r.j FROM (
	SELECT call_id, jsonb_agg(jsonb_build_array(scope, key, quota, amount, per, window_start,
		CASE WHEN released THEN -1 ELSE 0 END) ORDER BY ctid) AS j
	FROM reservations GROUP BY call_id) r
WHERE r.call_id = i.call_id;
DROP TABLE reservations;
CREATE TABLE budget_resets (
	scope        text COLLATE "C" NOT NULL,
	key          text COLLATE "C" NOT NULL,
	per          bigint NOT NULL,
	window_start bigint NOT NULL,
	mark         bigint NOT NULL, -- from the intents' seq sequence
	PRIMARY KEY (scope, key, per, window_start)
);
`,
	// 11: the per_caller logins in progress (store.PendingLogin), so that
	// the callback may reach any replica: found by a digest of the state,
	// their secrets sealed by the gateway.
	`
CREATE TABLE pending_logins (
	key     text PRIMARY KEY,
	server  text NOT NULL,
	caller  text NOT NULL,
	scopes  text NOT NULL DEFAULT '',
	created timestamptz NOT NULL,
	expires timestamptz NOT NULL,
	sealed  bytea NOT NULL
);
CREATE INDEX pending_logins_caller ON pending_logins (caller, server);
CREATE INDEX pending_logins_expires ON pending_logins (expires);
`,
	// 12: the path an approval request's call resolved to
	// (store.Approval.ResolvedPath): '' for the requests made before, and
	// for tools without a path argument.
	`
ALTER TABLE approvals ADD COLUMN resolved_path text NOT NULL DEFAULT '';
`,
	// 13: the lease of a running task's claim (store.Task.LeaseUntil),
	// NULL for the tasks claimed before (lapsed); and the open tasks, which
	// every replica's sweeper reads (store.Tasks.DueTasks), by status.
	`
ALTER TABLE tasks ADD COLUMN lease_until timestamptz;
CREATE INDEX tasks_open ON tasks (status, created_at) WHERE status IN ('waiting', 'running');
`,
	// 14: what a settled error told its caller beside its class and message
	// (store.Intent.ErrorDetail: violations, the upstream that asked for
	// input), NULL when nothing more, and for the settlements made before.
	`
ALTER TABLE settlements ADD COLUMN error_detail bytea;
`,
}

// SchemaVersion is the schema version this package migrates to.
var SchemaVersion = len(migrations)

// migrationLock is the first key of the advisory lock migrations take (the
// second is the hash of the schema name), so replicas migrating the same
// schema at once take turns and those of other schemas do not wait.
const migrationLock = 0x6270 // "bp"

// migrate creates the schema if it is missing and brings it to
// SchemaVersion, in one transaction under an advisory lock: two replicas
// starting at once migrate it once (the second waits for the first's
// commit, then finds the version current), and a failed migration leaves
// nothing half done. A schema newer than this package is refused rather
// than misread.
func migrate(ctx context.Context, c *pgx.Conn, schema string, log *slog.Logger) (err error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres store: migrate: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
			err = fmt.Errorf("postgres store: migrate schema %s: %w", schema, err)
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrationLock, schema); err != nil {
		return err
	}
	// CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the
	// database even when the schema exists; a role given only its schema
	// must still be able to start.
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		return err
	}
	var v int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this program's %d", v, len(migrations))
	}
	for ; v < len(migrations); v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("to version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, v+1); err != nil {
			return err
		}
		log.Debug("schema migrated", "version", v+1)
	}
	return tx.Commit(ctx)
}
