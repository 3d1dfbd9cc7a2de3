package sqlite_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
			reservation := []store.Reservation{{Scope: "caller", Key: "alice", Quota: math.MaxInt64, Amount: 1}}
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
