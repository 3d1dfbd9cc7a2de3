// Package gatewaybench measures the whole gateway pipeline over the SQLite
// store: one benchmark op is one Gateway.Call (lookup, validation,
// authorization, budget check, the synced intent commit, the backend,
// settlement), so its ns/op compares with the store's own per-row figures.
//
//	go test ./internal/gatewaybench -run '^$' -bench . -benchtime 3s -count 3
//	(with BACKPLANE_TEST_POSTGRES_URL set, also over PostgreSQL)
package gatewaybench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/postgres"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tool"
	"github.com/jackc/pgx/v5"
)

// BenchmarkGateway runs b.N calls split among N concurrent callers, each a
// goroutine taking the next call number from a shared counter until b.N are
// taken: concurrent calls are what group commit is for. The SQLite store is
// the default (callers=N); store=postgres/callers=N runs the same over
// PostgreSQL when BACKPLANE_TEST_POSTGRES_URL is set.
func BenchmarkGateway(b *testing.B) {
	for _, callers := range []int{1, 8, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			st, err := sqlite.Open(b.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			runCallers(b, newGateway(b, st), callers)
			stats := st.Stats()
			if err := st.Close(); err != nil {
				b.Error(err)
			}
			// Writes per synced transaction: how much group commit shares.
			if stats.Transactions > 0 {
				b.ReportMetric(float64(stats.Requests)/float64(stats.Transactions), "writes/commit")
			}
		})
	}
	b.Run("store=postgres", func(b *testing.B) {
		url := os.Getenv("BACKPLANE_TEST_POSTGRES_URL")
		if url == "" {
			b.Skip("BACKPLANE_TEST_POSTGRES_URL is not set: the PostgreSQL figures need a database (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)")
		}
		for _, callers := range []int{1, 8, 64} {
			b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
				schema := "bp_bench_" + strings.ToLower(rand.Text()[:10])
				st, err := postgres.Open(context.Background(), url, &postgres.Options{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { dropSchema(b, url, schema) })
				runCallers(b, newGateway(b, st), callers)
				cs := st.CommitStats()
				if err := st.Close(); err != nil {
					b.Error(err)
				}
				// Intents per intent transaction: how much group commit shares.
				if n := cs.Groups + cs.Single; n > 0 {
					b.ReportMetric(float64(cs.Grouped+cs.Single)/float64(n), "intents/commit")
				}
			})
		}
	})
}

// runCallers makes b.N calls of the no-op tool from callers goroutines and
// reports calls/s.
func runCallers(b *testing.B, g *gateway.Gateway, callers int) {
	ctx := context.Background()
	fanOut(b, callers, "calls/s", func(w int) func(i int64) error {
		caller := "bench-" + strconv.Itoa(w%8)
		buf := make([]byte, 0, 64)
		return func(i int64) error {
			buf = append(buf[:0], `{"text":"benchmark call","n":`...)
			buf = strconv.AppendInt(buf, i, 10)
			buf = append(buf, '}')
			_, err := g.Call(ctx, gateway.CallRequest{Caller: caller, Tool: "noop", Arguments: json.RawMessage(buf)})
			return err
		}
	})
}

// fanOut runs b.N operations, numbered from 1, from workers goroutines
// (worker w's operation is newOp(w)), and reports them per second as unit.
// The first failure stops its worker and fails the benchmark.
func fanOut(b *testing.B, workers int, unit string, newOp func(w int) func(i int64) error) {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	for w := range workers {
		op := newOp(w)
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := op(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatalf("an operation failed: %v", *p)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
	reportCPU(b, cpu)
}

func dropSchema(b *testing.B, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Logf("drop schema %s: %v", schema, err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		b.Logf("drop schema %s: %v", schema, err)
	}
}

// newGateway is a gateway over st with one no-op tool of a small schema,
// callers bench-0..7 allowed, and a quota no run reaches (so the budget
// check and reservation are part of each call).
func newGateway(b *testing.B, st store.Store, opts ...func(*gateway.Options)) *gateway.Gateway {
	b.Helper()
	var rules []policy.Rule
	for i := range 8 {
		rules = append(rules, policy.Rule{Caller: fmt.Sprintf("bench-%d", i), Allow: []string{"*"}})
	}
	pol, err := policy.NewRules(rules)
	if err != nil {
		b.Fatal(err)
	}
	o := &gateway.Options{
		Store:   st,
		Policy:  pol,
		Budgets: []budget.Quota{{Scope: budget.ScopeCaller, Quota: 1 << 60}},
	}
	for _, f := range opts {
		f(o)
	}
	g := gateway.New(o)
	err = g.Register(context.Background(), tool.Tool{
		Name:        "noop",
		Description: "Does nothing.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer","minimum":1}},"required":["text"],"additionalProperties":false}`),
		Backend: tool.BackendFunc(func(ctx context.Context, c *tool.Call) (*tool.Result, error) {
			return &tool.Result{Content: json.RawMessage(`{}`)}, nil
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	return g
}
