// Package otlptest is an OTLP/HTTP trace receiver for tests: an
// httptest server on 127.0.0.1 that decodes each protobuf
// ExportTraceServiceRequest and keeps its spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, flattened for assertions.
type Span struct {
	TraceID, SpanID, ParentID string // hex; ParentID "" for a root
	Name                      string
	Kind                      int32
	Attrs                     map[string]string
	Events                    []Event
	StatusCode                int32
	Resource                  map[string]string
	Start, End                time.Time
}

// Event is a span event.
type Event struct {
	Name  string
	Attrs map[string]string
}

// Receiver collects the spans exported to it.
type Receiver struct {
	// URL is the base URL (http://127.0.0.1:PORT), the endpoint to configure.
	URL string
	srv *httptest.Server

	mu       sync.Mutex
	spans    []Span
	headers  []http.Header
	changed  chan struct{}
	requests int
	arrived  int // requests of any kind, rejected ones included
}

// Start starts a receiver, closed when the test ends.
func Start(t testing.TB) *Receiver {
	r := &Receiver{changed: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	t.Cleanup(r.srv.Close)
	return r
}

// Close stops the receiver: exports fail from then on.
func (r *Receiver) Close() { r.srv.Close() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.arrived++
	r.mu.Unlock()
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not an OTLP traces export", http.StatusNotFound)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, 64<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{
					TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentID: hex.EncodeToString(s.ParentSpanId), Name: s.Name, Kind: int32(s.Kind),
					Attrs: attrs(s.Attributes), StatusCode: int32(s.GetStatus().GetCode()), Resource: res,
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
				}
				for _, e := range s.Events {
					sp.Events = append(sp.Events, Event{Name: e.Name, Attrs: attrs(e.Attributes)})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.headers = append(r.headers, req.Header.Clone())
	r.requests++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = value(kv.Value)
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return fmt.Sprint(v)
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Headers returns the HTTP headers of each export request received.
func (r *Receiver) Headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// WaitFor waits until ok holds for the spans received, or fails the test
// after timeout (a generous bound: only a broken exporter reaches it).
func (r *Receiver) WaitFor(t testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		requests, arrived := r.requests, r.arrived
		r.mu.Unlock()
		if ok(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("otlptest: the spans expected were not received within %s (%d requests arrived, %d exports taken); got %d: %+v",
				timeout, arrived, requests, len(spans), spans)
			return nil
		}
	}
}

// Named returns the spans named name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
