package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// The plain cost of a synced row, BenchmarkJournalRaw, is in
// internal/gatewaybench, beside the gateway it is compared with.

// Rows comparable to the intents the gateway commits: ~40-byte ids, a
// 200-byte arguments blob, SHA-256 digests in hex.
var (
	benchArgs   = []byte(`{"text":"` + strings.Repeat("x", 200-len(`{"text":""}`)) + `"}`)
	benchDigest = "sha256:" + strings.Repeat("ab", 32)
	benchDef    = "sha256:" + strings.Repeat("cd", 32)
)

func benchCallID(run string, i int) string {
	return fmt.Sprintf("call-%s-%026d", run, i) // 40 bytes with an 8-byte run tag
}

// BenchmarkCommitIntent measures CommitIntent (with one budget reservation)
// followed by Settle, per op, from 1, 8 and 64 goroutines sharing one store:
// what group commit buys. req/tx is the mean number of write requests
// (two per op) per transaction.
func BenchmarkCommitIntent(b *testing.B) {
	for _, callers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s, err := sqlite.Open(b.TempDir(), quiet)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			run := fmt.Sprintf("%08d", b.N%1e8)
			result := []byte(`{"content":{"ok":true},"is_error":false}`)
			reservation := []budget.Reservation{{Scope: "caller", Key: "alice", Quota: math.MaxInt64, Amount: 1}}
			var next atomic.Int64
			before := s.Stats()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							return
						}
						id := benchCallID(run, i)
						_, err := s.CommitIntent(ctx, &store.CommitRequest{
							Intent: store.Intent{CallID: id, Caller: "alice", Tool: "note", DefinitionHash: benchDef,
								Arguments: benchArgs, ArgsDigest: benchDigest, CreatedAt: time.Now()},
							Reservations: reservation,
						})
						if err == nil {
							err = s.Settle(ctx, id, store.Settlement{Status: store.StatusSucceeded, Result: result, At: time.Now()})
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			after := s.Stats()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			if tx := after.Transactions - before.Transactions; tx > 0 {
				b.ReportMetric(float64(after.Requests-before.Requests)/float64(tx), "req/tx")
			}
		})
	}
}

// BenchmarkSynchronousSwitch measures what the writer paid per round for
// switching the connection to synchronous=NORMAL for its settlements and
// back to FULL for its intents (Store.setSynced, gone since the mode is set
// once and the writer syncs the WAL itself; kept for the record): two cached PRAGMA
// statements (SQLite applies this PRAGMA when it prepares it, so each
// execution is a re-preparation of that one statement; the connection's
// other statements stay prepared). select, a prepared one-row lookup on the
// same connection, gives the scale. Issue 27 asked whether this switch is
// worth removing; see docs/benchmarks.md (2026-12-01).
func BenchmarkSynchronousSwitch(b *testing.B) {
	db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "x.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'x')`); err != nil {
		b.Fatal(err)
	}
	var stmts []*sql.Stmt
	// Closed before the connection (deferred after it), which they need.
	defer func() {
		for _, st := range stmts {
			st.Close()
		}
	}()
	prep := func(q string) *sql.Stmt {
		st, err := c.PrepareContext(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		stmts = append(stmts, st)
		return st
	}
	normal, full, sel := prep(`PRAGMA synchronous = NORMAL`), prep(`PRAGMA synchronous = FULL`), prep(`SELECT v FROM t WHERE id = ?`)
	b.Run("switch", func(b *testing.B) {
		for b.Loop() {
			if _, err := normal.Exec(); err != nil {
				b.Fatal(err)
			}
			if _, err := full.Exec(); err != nil {
				b.Fatal(err)
			}
		}
		// The cached statements must really switch the mode, or this
		// measures nothing the writer does. The mode is read with a fresh
		// statement: a cached PRAGMA query keeps the value it was prepared
		// with.
		var got int
		if _, err := normal.Exec(); err != nil {
			b.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&got); err != nil || got != 1 {
			b.Fatalf("after PRAGMA synchronous = NORMAL: %d, %v; want 1", got, err)
		}
	})
	b.Run("select", func(b *testing.B) {
		var v string
		for b.Loop() {
			if err := sel.QueryRow(1).Scan(&v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
