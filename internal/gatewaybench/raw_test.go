package gatewaybench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the driver the SQLite store uses
)

// Rows comparable to the intents the gateway commits: ~40-byte ids, a
// 200-byte arguments blob, SHA-256 digests in hex.
var (
	rawArgs   = []byte(`{"text":"` + strings.Repeat("x", 200-len(`{"text":""}`)) + `"}`)
	rawDigest = "sha256:" + strings.Repeat("ab", 32)
	rawDef    = "sha256:" + strings.Repeat("cd", 32)
)

func rawCallID(run string, i int) string {
	return fmt.Sprintf("call-%s-%026d", run, i) // 40 bytes with an 8-byte run tag
}

// rawSchema is the intents table's columns without its secondary indexes,
// foreign keys or the budget tables: the plain cost of a synced row.
const rawSchema = `CREATE TABLE intents (
	seq INTEGER PRIMARY KEY, call_id TEXT NOT NULL UNIQUE, caller TEXT NOT NULL, session TEXT NOT NULL DEFAULT '',
	tool TEXT NOT NULL, definition_hash TEXT NOT NULL, arguments BLOB, args_digest TEXT NOT NULL,
	idempotency_key TEXT, approval_id TEXT, incarnation TEXT NOT NULL, status TEXT NOT NULL,
	result BLOB, error_class TEXT NOT NULL DEFAULT '', error_message TEXT NOT NULL DEFAULT '',
	resolved_by TEXT NOT NULL DEFAULT '', created_at INTEGER, settled_at INTEGER)`

// BenchmarkJournalRaw inserts intent-sized rows with the store's PRAGMAs
// (WAL, synchronous=FULL): one synced commit per row, or 64 rows per
// commit. One op is one row in both, so ns/op compare directly with
// BenchmarkGateway's calls: run them in one command, so that their ratio
// is taken on the same machine state.
//
// BenchmarkJournalRaw/postgres/callers=N is the PostgreSQL peer (see
// benchmarkJournalRawPostgres), skipped without BACKPLANE_TEST_POSTGRES_URL.
func BenchmarkJournalRaw(b *testing.B) {
	b.Run("postgres", benchmarkJournalRawPostgres)
	for _, bc := range []struct {
		name  string
		batch int
	}{{"commit-per-row", 1}, {"batch=64", 64}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "raw.db")+
				"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			c, err := db.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.ExecContext(ctx, rawSchema); err != nil {
				b.Fatal(err)
			}
			ins, err := c.PrepareContext(ctx, `INSERT INTO intents (call_id, caller, session, tool, definition_hash, arguments,
				args_digest, idempotency_key, approval_id, incarnation, status, created_at)
				VALUES (?, 'alice', '', 'note', ?, ?, ?, NULL, NULL, 'p1234-abcdefghijklmnop', 'started', ?)`)
			if err != nil {
				b.Fatal(err)
			}
			defer ins.Close()
			run := fmt.Sprintf("%08d", b.N%1e8)
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; {
				n := min(bc.batch, b.N-i)
				if bc.batch > 1 {
					if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
						b.Fatal(err)
					}
				}
				for range n {
					if _, err := ins.Exec(rawCallID(run, i), rawDef, rawArgs, rawDigest, time.Now().UnixNano()); err != nil {
						b.Fatal(err)
					}
					i++
				}
				if bc.batch > 1 {
					if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			reportCPU(b, cpu)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
