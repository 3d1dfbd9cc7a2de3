// Package gatewaybench measures the whole gateway pipeline over the SQLite
// store: one benchmark op is one Gateway.Call (lookup, validation,
// authorization, budget check, the synced intent commit, the backend,
// settlement), so its ns/op compares with the store's own per-row figures.
//
//	go test ./internal/gatewaybench -run '^$' -bench . -benchtime 3s -count 3
package gatewaybench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// BenchmarkGateway runs b.N calls split among N concurrent callers, each a
// goroutine taking the next call number from a shared counter until b.N are
// taken: concurrent calls are what group commit is for.
func BenchmarkGateway(b *testing.B) {
	for _, callers := range []int{1, 8, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			g, st := newGateway(b)
			ctx := context.Background()
			var next atomic.Int64
			var failed atomic.Pointer[error]
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					caller := "bench-" + strconv.Itoa(w%8)
					buf := make([]byte, 0, 64)
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						buf = append(buf[:0], `{"text":"benchmark call","n":`...)
						buf = strconv.AppendInt(buf, i, 10)
						buf = append(buf, '}')
						_, err := g.Call(ctx, gateway.CallRequest{Caller: caller, Tool: "noop", Arguments: json.RawMessage(buf)})
						if err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			stats := st.Stats()
			if err := st.Close(); err != nil {
				b.Error(err)
			}
			if p := failed.Load(); p != nil {
				b.Fatalf("a call failed: %v", *p)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			// Writes per synced transaction: how much group commit shares.
			if stats.Transactions > 0 {
				b.ReportMetric(float64(stats.Requests)/float64(stats.Transactions), "writes/commit")
			}
		})
	}
}

// newGateway is a gateway over a fresh SQLite store in a temp folder, with
// one no-op tool of a small schema, callers bench-0..7 allowed, and a quota
// no run reaches (so the budget check and reservation are part of each
// call).
func newGateway(b *testing.B) (*gateway.Gateway, *sqlite.Store) {
	b.Helper()
	st, err := sqlite.Open(b.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	var rules []policy.Rule
	for i := range 8 {
		rules = append(rules, policy.Rule{Caller: fmt.Sprintf("bench-%d", i), Allow: []string{"*"}})
	}
	pol, err := policy.NewRules(rules)
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(&gateway.Options{
		Store:   st,
		Policy:  pol,
		Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1 << 60}},
	})
	err = g.Register(gateway.Tool{
		Name:        "noop",
		Description: "Does nothing.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer","minimum":1}},"required":["text"],"additionalProperties":false}`),
		Backend: backend.Func(func(ctx context.Context, c *backend.Call) (*backend.Result, error) {
			return &backend.Result{Content: json.RawMessage(`{}`)}, nil
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	return g, st
}
