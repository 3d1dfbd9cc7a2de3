// Package tracing owns Backplane's OpenTelemetry set-up: a tracer provider
// whose spans are exported over OTLP (HTTP/protobuf or gRPC) through a
// batching processor with a bounded queue.
//
// What it promises:
//
//   - Ending a span never blocks and never fails: a span that finds the
//     queue full is dropped, and so is every span of a batch the collector
//     did not take (no retries: a down collector costs one bounded attempt
//     per batch). Both are counted, by reason, in
//     backplane_tracing_spans_dropped_total ([Provider.Collector]).
//   - What [Options] leaves empty comes from the standard OpenTelemetry
//     variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_*,
//     OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_PROTOCOL,
//     OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), then the OpenTelemetry
//     defaults (localhost:4318 over http/protobuf).
//   - Sampling is parent-based: a caller's sampled flag is followed, and new
//     traces are kept in the configured ratio.
//   - [Provider.Shutdown] exports what is queued, within its context's
//     deadline, and stops the exporter.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Protocols.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Defaults.
const (
	DefaultQueueSize     = 2048
	DefaultBatchSize     = 512
	DefaultInterval      = time.Second
	DefaultExportTimeout = 10 * time.Second
	// InstrumentationName names the tracer Backplane's spans come from.
	InstrumentationName = "github.com/agentbackplane/backplane"
)

// ErrConfig is wrapped by every error New returns for bad options.
var ErrConfig = errors.New("tracing: bad configuration")

// Options configure New. A nil *Options, and every zero field, means the
// default (or the environment's value, where one is named).
type Options struct {
	// Endpoint is the collector's base URL (http:// or https://); over
	// http/protobuf "/v1/traces" is appended when it has no path.
	Endpoint string
	// Protocol is ProtocolHTTP or ProtocolGRPC.
	Protocol string
	// Sample is the ratio of new traces sampled, 0 to 1; nil means 1.
	Sample *float64
	// Headers are sent with every export.
	Headers map[string]string
	// ServiceName is the service.name resource attribute ("backplane"),
	// unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
	ServiceName    string
	ServiceVersion string
	// QueueSize bounds the spans waiting for export. Default 2048.
	QueueSize int
	// BatchSize is the most spans sent in one export. Default 512.
	BatchSize int
	// Interval is how long a span waits for its batch to fill. Default 1s.
	Interval time.Duration
	// ExportTimeout bounds one export. Default 10s.
	ExportTimeout time.Duration
	// Exporter, when set, replaces the OTLP exporter (benchmarks, tests);
	// Endpoint, Protocol and Headers are then ignored.
	Exporter sdktrace.SpanExporter
	// Logger receives export failures (once per run of failures). Default:
	// discard.
	Logger *slog.Logger
}

// Provider is a running tracer provider. Its methods are safe for
// concurrent use.
type Provider struct {
	tp   *sdktrace.TracerProvider
	proc *processor
}

// New builds a provider and its exporter. It connects to nothing yet: the
// first export does.
func New(ctx context.Context, opts *Options) (*Provider, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	ratio := 1.0
	if o.Sample != nil {
		ratio = *o.Sample
		if !(ratio >= 0 && ratio <= 1) {
			return nil, fmt.Errorf("%w: sample %v is not from 0 to 1", ErrConfig, ratio)
		}
	}
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, &o); err != nil {
			return nil, err
		}
	}
	if o.ServiceName == "" {
		o.ServiceName = "backplane"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", o.ServiceName)}
	if o.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", o.ServiceVersion))
	}
	// Later detectors win: the environment's names over ours.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("%w: resource: %v", ErrConfig, err)
	}
	proc := newProcessor(exp, &o)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithSpanProcessor(proc),
	)
	return &Provider{tp: tp, proc: proc}, nil
}

// protocolOf is the protocol in force: the option, else the environment's.
func protocolOf(o *Options) (string, error) {
	p := o.Protocol
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p == "" {
			p = strings.TrimSpace(os.Getenv(name))
		}
	}
	switch p {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("%w: protocol %q: %s or %s", ErrConfig, p, ProtocolHTTP, ProtocolGRPC)
}

func newExporter(ctx context.Context, o *Options) (sdktrace.SpanExporter, error) {
	proto, err := protocolOf(o)
	if err != nil {
		return nil, err
	}
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: endpoint must be an http:// or https:// URL with a host", ErrConfig)
		}
		if proto == ProtocolHTTP && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
		}
		o.Endpoint = u.String()
	}
	timeout := o.ExportTimeout
	if timeout <= 0 {
		timeout = DefaultExportTimeout
	}
	// No retries: a failed batch is dropped and counted, never held.
	if proto == ProtocolGRPC {
		gopts := []otlptracegrpc.Option{otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}), otlptracegrpc.WithTimeout(timeout)}
		if o.Endpoint != "" {
			gopts = append(gopts, otlptracegrpc.WithEndpointURL(o.Endpoint))
		}
		if len(o.Headers) > 0 {
			gopts = append(gopts, otlptracegrpc.WithHeaders(o.Headers))
		}
		return otlptracegrpc.New(ctx, gopts...)
	}
	hopts := []otlptracehttp.Option{otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}), otlptracehttp.WithTimeout(timeout)}
	if o.Endpoint != "" {
		hopts = append(hopts, otlptracehttp.WithEndpointURL(o.Endpoint))
	}
	if len(o.Headers) > 0 {
		hopts = append(hopts, otlptracehttp.WithHeaders(o.Headers))
	}
	return otlptracehttp.New(ctx, hopts...)
}

// Tracer is the tracer Backplane's spans come from.
func (p *Provider) Tracer() trace.Tracer { return p.tp.Tracer(InstrumentationName) }

// TracerProvider is the underlying provider.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// ForceFlush exports every span ended so far, within ctx.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.tp.ForceFlush(ctx) }

// Shutdown exports what is queued and stops the exporter, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

// Close is Shutdown bounded by 5 seconds: a closing process does not wait
// longer for a collector.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Shutdown(ctx)
}

// Dropped is the number of spans dropped so far: queue full, or export
// failed.
func (p *Provider) Dropped() (queueFull, exportFailed uint64) {
	return p.proc.droppedFull.Load(), p.proc.droppedFailed.Load()
}

// Exported is the number of spans the exporter took.
func (p *Provider) Exported() uint64 { return p.proc.exported.Load() }

var (
	droppedDesc = prometheus.NewDesc("backplane_tracing_spans_dropped_total",
		"Spans not exported, by reason: queue_full (the export queue was full when the span ended) or export_failed (the collector did not take its batch).",
		[]string{"reason"}, nil)
	exportedDesc = prometheus.NewDesc("backplane_tracing_spans_exported_total",
		"Spans the collector took.", nil, nil)
)

type collector struct{ p *Provider }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- droppedDesc; ch <- exportedDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	full, failed := c.p.Dropped()
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(full), "queue_full")
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(failed), "export_failed")
	ch <- prometheus.MustNewConstMetric(exportedDesc, prometheus.CounterValue, float64(c.p.Exported()))
}

// Collector exposes the export counters to Prometheus.
func (p *Provider) Collector() prometheus.Collector { return collector{p} }

// processor batches ended spans for export through a bounded queue. Unlike
// the SDK's batch processor it counts what it drops.
type processor struct {
	exp      sdktrace.SpanExporter
	queue    chan sdktrace.ReadOnlySpan
	batch    int
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger

	flush    chan chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	closed   atomic.Bool

	droppedFull, droppedFailed, exported atomic.Uint64
	failing                              bool // loop goroutine only
}

func newProcessor(exp sdktrace.SpanExporter, o *Options) *processor {
	p := &processor{
		exp: exp, batch: o.BatchSize, interval: o.Interval, timeout: o.ExportTimeout, log: o.Logger,
		flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	size := o.QueueSize
	if size <= 0 {
		size = DefaultQueueSize
	}
	if p.batch <= 0 {
		p.batch = DefaultBatchSize
	}
	p.batch = min(p.batch, size)
	if p.interval <= 0 {
		p.interval = DefaultInterval
	}
	if p.timeout <= 0 {
		p.timeout = DefaultExportTimeout
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.queue = make(chan sdktrace.ReadOnlySpan, size)
	go p.loop()
	return p
}

func (p *processor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues the span, or drops it when the queue is full: never blocks.
func (p *processor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if p.closed.Load() {
		p.droppedFull.Add(1)
		return
	}
	select {
	case p.queue <- s:
	default:
		p.droppedFull.Add(1)
	}
}

func (p *processor) loop() {
	defer close(p.done)
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	buf := make([]sdktrace.ReadOnlySpan, 0, p.batch)
	send := func() {
		if len(buf) > 0 {
			p.export(buf)
			clear(buf)
			buf = buf[:0]
		}
	}
	drain := func() {
		for {
			select {
			case s := <-p.queue:
				if buf = append(buf, s); len(buf) >= p.batch {
					send()
				}
			default:
				send()
				return
			}
		}
	}
	for {
		select {
		case s := <-p.queue:
			if buf = append(buf, s); len(buf) >= p.batch {
				send()
			}
		case <-tick.C:
			send()
		case ack := <-p.flush:
			drain()
			close(ack)
		case <-p.stop:
			drain()
			return
		}
	}
}

func (p *processor) export(spans []sdktrace.ReadOnlySpan) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if err := p.exp.ExportSpans(ctx, spans); err != nil {
		p.droppedFailed.Add(uint64(len(spans)))
		if !p.failing {
			p.failing = true
			p.log.Warn("trace export failed; spans are dropped until it succeeds", "spans", len(spans), "error", err)
		}
		return
	}
	p.exported.Add(uint64(len(spans)))
	if p.failing {
		p.failing = false
		p.log.Info("trace export works again")
	}
}

func (p *processor) ForceFlush(ctx context.Context) error {
	if p.closed.Load() {
		return nil
	}
	ack := make(chan struct{})
	select {
	case p.flush <- ack:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *processor) Shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.closed.Store(true)
		close(p.stop)
	})
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.exp.Shutdown(ctx)
}
