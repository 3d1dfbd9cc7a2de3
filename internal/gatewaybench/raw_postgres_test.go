package gatewaybench

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rawPostgresSchema is rawSchema in PostgreSQL's types: the intents
// table's columns without its secondary indexes, foreign keys or the
// budget tables.
const rawPostgresSchema = `CREATE TABLE intents (
	seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, call_id text NOT NULL UNIQUE, caller text NOT NULL,
	session text NOT NULL DEFAULT '', tool text NOT NULL, definition_hash text NOT NULL, arguments bytea,
	args_digest text NOT NULL, idempotency_key text, approval_id text, incarnation text NOT NULL,
	status text NOT NULL, result bytea, error_class text NOT NULL DEFAULT '', error_message text NOT NULL DEFAULT '',
	resolved_by text NOT NULL DEFAULT '', created_at timestamptz, settled_at timestamptz)`

// rawPostgresConns is the raw benchmark's pool size: the PostgreSQL
// store's default (postgres.Options.MaxConns), so both open as many
// connections to the same server.
const rawPostgresConns = 16

// benchmarkJournalRawPostgres is the PostgreSQL peer of BenchmarkGateway's
// store=postgres runs: callers goroutines share a pool of rawPostgresConns
// connections, and each op is one INSERT of an intent-sized row in its
// own transaction (autocommit), committed with the server's
// synchronous_commit=on, as a prepared statement. Concurrent commits
// share WAL flushes the way the server always does; no rows are batched.
// It is run as BenchmarkJournalRaw/postgres/callers=N.
func benchmarkJournalRawPostgres(b *testing.B) {
	url := os.Getenv("BACKPLANE_TEST_POSTGRES_URL")
	if url == "" {
		b.Skip("BACKPLANE_TEST_POSTGRES_URL is not set: the PostgreSQL figures need a database (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
	}
	for _, callers := range []int{1, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			ctx := context.Background()
			schema := "bp_rawbench_" + strings.ToLower(rand.Text()[:10])
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = rawPostgresConns
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { dropSchema(b, url, schema) })
			if _, err := p.Exec(ctx, rawPostgresSchema); err != nil {
				b.Fatal(err)
			}
			run := fmt.Sprintf("%08d", b.N%1e8)
			fanOut(b, callers, "rows/s", func(int) func(i int64) error {
				return func(i int64) error {
					_, err := p.Exec(ctx, `INSERT INTO intents (call_id, caller, session, tool, definition_hash, arguments,
						args_digest, idempotency_key, approval_id, incarnation, status, created_at)
						VALUES ($1, 'alice', '', 'note', $2, $3, $4, NULL, NULL, 'p1234-abcdefghijklmnop', 'started', $5)`,
						rawCallID(run, int(i)), rawDef, rawArgs, rawDigest, time.Now())
					return err
				}
			})
		})
	}
}
