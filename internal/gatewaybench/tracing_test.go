package gatewaybench

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/tracing"
)

// discard is an exporter that takes every span and keeps none: the cost
// measured is the gateway's spans and the export queue, not a collector's.
type discard struct{ n atomic.Int64 }

func (d *discard) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.n.Add(int64(len(spans)))
	return nil
}
func (d *discard) Shutdown(context.Context) error { return nil }

// BenchmarkGatewayTracing is BenchmarkGateway with tracing off and on
// (every call sampled, exported to a discarding exporter through package
// tracing's bounded queue), side by side so that one run gives the ratio.
// store=memory (not durable) leaves out the synced commit that dominates a
// call over SQLite: the gateway's own CPU cost, against which tracing's is
// largest.
//
//	go test ./internal/gatewaybench -run '^$' -bench GatewayTracing -count 5
func BenchmarkGatewayTracing(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		for _, kind := range []string{"sqlite", "memory"} {
			callers := 1
			b.Run("tracing="+mode+"/store="+kind+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				var st store.Store = memstore.New()
				if kind == "sqlite" {
					var err error
					if st, err = sqlite.Open(b.TempDir(), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)}); err != nil {
						b.Fatal(err)
					}
				}
				defer st.Close()
				var err error
				var opts []func(*gateway.Options)
				var exp *discard
				var tp *tracing.Provider
				if mode == "on" {
					exp = &discard{}
					tp, err = tracing.New(context.Background(), &tracing.Options{Exporter: exp})
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, func(o *gateway.Options) { o.Tracer = tp.Tracer() })
				}
				runCallers(b, newGateway(b, st, opts...), callers)
				if tp != nil {
					if err := tp.Shutdown(context.Background()); err != nil {
						b.Fatal(err)
					}
					full, failed := tp.Dropped()
					// Two spans a call (the call's and its backend's).
					if got := exp.n.Load() + int64(full+failed); got != 2*int64(b.N) {
						b.Fatalf("%d spans exported or dropped, want %d", got, 2*b.N)
					}
					b.ReportMetric(float64(full), "dropped")
				}
			})
		}
	}
}
