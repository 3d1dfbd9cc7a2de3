package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

const (
	tpMeta   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tpHeader = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

func TestWithTraceContext(t *testing.T) {
	hdr := http.Header{}
	hdr.Set("traceparent", tpHeader)
	hdr.Add("tracestate", "a=1")
	hdr.Add("tracestate", "b=2")
	for _, tc := range []struct {
		name        string
		meta        map[string]any
		h           http.Header
		trace, span string // "" : no trace context
		state       string
	}{
		{"none", nil, nil, "", "", ""},
		{"meta", map[string]any{"traceparent": tpMeta, "tracestate": "v=x"}, nil, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "v=x"},
		{"header, several tracestate lines", nil, hdr, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "a=1,b=2"},
		{"meta wins over header", map[string]any{"traceparent": tpMeta}, hdr, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", ""},
		{"invalid meta is ignored", map[string]any{"traceparent": "00-zz"}, nil, "", "", ""},
		{"all-zero trace id is invalid", map[string]any{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, nil, "", "", ""},
		{"not a string", map[string]any{"traceparent": 42}, nil, "", "", ""},
		{"too long", map[string]any{"traceparent": tpMeta + strings.Repeat("x", maxTraceHeader)}, nil, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := trace.SpanContextFromContext(withTraceContext(context.Background(), tc.meta, tc.h))
			if tc.trace == "" {
				if sc.IsValid() {
					t.Fatalf("got trace context %v, want none", sc)
				}
				return
			}
			if sc.TraceID().String() != tc.trace || sc.SpanID().String() != tc.span || !sc.IsRemote() || !sc.IsSampled() {
				t.Fatalf("got %v", sc)
			}
			if sc.TraceState().String() != tc.state {
				t.Errorf("tracestate %q, want %q", sc.TraceState().String(), tc.state)
			}
		})
	}
}

func FuzzWithTraceContext(f *testing.F) {
	f.Add(tpMeta, "v=x,w=y", tpHeader, "a=1")
	f.Add("00-zz", "", "", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "=,=", "00-0-0-0", "x")
	f.Fuzz(func(t *testing.T, tp, ts, htp, hts string) {
		h := http.Header{}
		h.Set("traceparent", htp)
		h.Set("tracestate", hts)
		sc := trace.SpanContextFromContext(withTraceContext(context.Background(), map[string]any{"traceparent": tp, "tracestate": ts}, h))
		if sc.IsValid() && !strings.Contains(tp+htp, sc.TraceID().String()) {
			t.Fatalf("trace id %s from nowhere", sc.TraceID())
		}
	})
}
