package tracing_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/agentbackplane/backplane/internal/otlptest"
	"github.com/agentbackplane/backplane/tracing"
)

const wait = 30 * time.Second // a bound for a broken exporter, never a timing claim

func ptr[T any](v T) *T { return &v }

func newProvider(t *testing.T, o *tracing.Options) *tracing.Provider {
	t.Helper()
	p, err := tracing.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestExportOverHTTP(t *testing.T) {
	r := otlptest.Start(t)
	p := newProvider(t, &tracing.Options{Endpoint: r.URL, Protocol: tracing.ProtocolHTTP,
		Headers: map[string]string{"X-Collector-Key": "k1"}, ServiceVersion: "v9"})
	_, span := p.Tracer().Start(context.Background(), "one", trace.WithAttributes(attribute.String("a", "b")))
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := r.Spans()
	if len(spans) != 1 || spans[0].Name != "one" || spans[0].Attrs["a"] != "b" {
		t.Fatalf("spans: %+v", spans)
	}
	if got := spans[0].Resource["service.name"]; got != "backplane" {
		t.Errorf("service.name %q", got)
	}
	if got := spans[0].Resource["service.version"]; got != "v9" {
		t.Errorf("service.version %q", got)
	}
	if h := r.Headers(); len(h) == 0 || h[0].Get("X-Collector-Key") != "k1" {
		t.Errorf("headers: %v", h)
	}
	if _, failed := p.Dropped(); failed != 0 || p.Exported() != 1 {
		t.Errorf("dropped %d, exported %d", failed, p.Exported())
	}
}

// The standard variables fill what the options leave out.
func TestEnvironmentFillsEndpointAndHeaders(t *testing.T) {
	r := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-from-env=e1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "bp-test")
	p := newProvider(t, nil)
	_, span := p.Tracer().Start(context.Background(), "env")
	span.End()
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := r.WaitFor(t, wait, func(s []otlptest.Span) bool { return len(s) == 1 })
	if spans[0].Resource["service.name"] != "bp-test" {
		t.Errorf("OTEL_SERVICE_NAME not applied: %v", spans[0].Resource)
	}
	if h := r.Headers(); h[0].Get("x-from-env") != "e1" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS not applied: %v", h[0])
	}
}

func TestBadProtocol(t *testing.T) {
	_, err := tracing.New(context.Background(), &tracing.Options{Protocol: "http/json"})
	if !errors.Is(err, tracing.ErrConfig) {
		t.Fatalf("err %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift")
	if _, err := tracing.New(context.Background(), nil); !errors.Is(err, tracing.ErrConfig) {
		t.Fatalf("env protocol: err %v", err)
	}
	if _, err := tracing.New(context.Background(), &tracing.Options{Protocol: "grpc", Endpoint: "ftp://x"}); !errors.Is(err, tracing.ErrConfig) {
		t.Fatalf("endpoint: err %v", err)
	}
	if _, err := tracing.New(context.Background(), &tracing.Options{Sample: ptr(1.5)}); !errors.Is(err, tracing.ErrConfig) {
		t.Fatalf("sample: err %v", err)
	}
}

// A collector that is down: ending spans still returns, and every span of
// the failed batches is counted as dropped.
func TestReceiverDownCountsDrops(t *testing.T) {
	r := otlptest.Start(t)
	url := r.URL
	r.Close() // the port now refuses connections (127.0.0.1 only)
	p := newProvider(t, &tracing.Options{Endpoint: url})
	for range 5 {
		_, span := p.Tracer().Start(context.Background(), "lost")
		span.End()
	}
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	full, failed := p.Dropped()
	if full != 0 || failed != 5 || p.Exported() != 0 {
		t.Fatalf("queue_full %d export_failed %d exported %d; want 0 5 0", full, failed, p.Exported())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "backplane_tracing_spans_dropped_total" {
			continue
		}
		for _, m := range mf.Metric {
			if m.Label[0].GetValue() == "export_failed" && m.Counter.GetValue() == 5 {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("backplane_tracing_spans_dropped_total{reason=export_failed} 5 not in %v", mfs)
	}
}

// blockingExporter holds every export until released: a collector that
// hangs. It implements the SDK's exporter interface, as OTLP's does.
type blockingExporter struct {
	release chan struct{}
	mu      sync.Mutex
	got     int
}

func (e *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	<-e.release
	e.mu.Lock()
	e.got += len(spans)
	e.mu.Unlock()
	return nil
}
func (e *blockingExporter) Shutdown(context.Context) error { return nil }

// A hung collector fills the bounded queue; later spans are dropped, not
// waited for, and counted.
func TestQueueFullDrops(t *testing.T) {
	exp := &blockingExporter{release: make(chan struct{})}
	p := newProvider(t, &tracing.Options{Exporter: exp, QueueSize: 2, BatchSize: 1})
	const n = 10
	for range n {
		_, span := p.Tracer().Start(context.Background(), "s")
		span.End() // returns although the exporter is stuck
	}
	full, _ := p.Dropped()
	// At most the queue (2) and the one batch being exported (1) are kept.
	if full < n-3 {
		t.Fatalf("queue_full %d, want at least %d", full, n-3)
	}
	close(exp.release)
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.Exported(); got+full != n {
		t.Fatalf("exported %d + dropped %d != %d", got, full, n)
	}
}

func TestSampling(t *testing.T) {
	r := otlptest.Start(t)
	p := newProvider(t, &tracing.Options{Endpoint: r.URL, Sample: ptr(0.0)})
	_, span := p.Tracer().Start(context.Background(), "unsampled-root")
	span.End()
	// A caller that sampled its trace is followed (parent-based).
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	_, span = p.Tracer().Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "sampled-child")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := r.Spans()
	if len(spans) != 1 || spans[0].Name != "sampled-child" || spans[0].TraceID != "01000000000000000000000000000000" {
		t.Fatalf("spans: %+v", spans)
	}
}

// grpcReceiver is an OTLP/gRPC trace service on 127.0.0.1.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	got chan string
}

func (g *grpcReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g.got <- s.Name
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func TestExportOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rec := &grpcReceiver{got: make(chan string, 10)}
	coltracepb.RegisterTraceServiceServer(srv, rec)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	p := newProvider(t, &tracing.Options{Endpoint: "http://" + ln.Addr().String(), Protocol: tracing.ProtocolGRPC})
	_, span := p.Tracer().Start(context.Background(), "over-grpc")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-rec.got:
		if name != "over-grpc" {
			t.Fatalf("got %q", name)
		}
	case <-time.After(wait):
		t.Fatal("no span received over gRPC")
	}
}
