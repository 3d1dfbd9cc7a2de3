package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend"
	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/postgres"
)

// BenchmarkGateway is internal/gatewaybench's benchmark over this store:
// one op is one Gateway.Call (lookup, validation, authorization, budget
// check, the durable intent commit with its reservation, the backend,
// settlement), b.N calls split among N concurrent callers. Compare
//
//	go test ./internal/gatewaybench -run '^$' -bench Gateway -benchtime 3s
//	BACKPLANE_TEST_POSTGRES_URL=... go test ./store/postgres -run '^$' -bench Gateway -benchtime 3s
func BenchmarkGateway(b *testing.B) {
	b.Run("store=postgres", func(b *testing.B) {
		for _, callers := range []int{1, 8, 64} {
			b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
				g, st := benchGateway(b)
				ctx := context.Background()
				var next atomic.Int64
				var failed atomic.Pointer[error]
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for w := range callers {
					wg.Go(func() {
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
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if err := st.Close(); err != nil {
					b.Error(err)
				}
				if p := failed.Load(); p != nil {
					b.Fatalf("a call failed: %v", *p)
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
			})
		}
	})
}

// benchGateway is a gateway over a fresh store in a schema of its own, with
// the tool, policy and quota of internal/gatewaybench.
func benchGateway(b *testing.B) (*gateway.Gateway, *postgres.Store) {
	b.Helper()
	st, err := postgres.Open(context.Background(), testURL(b), &postgres.Options{Schema: newSchema(b), Logger: quietLogger()})
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
