package server

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// Trace context keys of a tools/call's _meta (and HTTP headers), as W3C
// Trace Context names them.
const (
	MetaTraceParent = "traceparent"
	MetaTraceState  = "tracestate"
)

// maxTraceHeader bounds what is read of a traceparent or tracestate (W3C:
// 55 bytes and at most 32 members of 256 bytes; longer is not valid).
const maxTraceHeader = 8192

// withTraceContext puts the caller's trace context in ctx, for the
// gateway's span of the call to be its child: the request's _meta
// traceparent and tracestate when it carries one, else the HTTP request's
// headers (streamable HTTP). Anything invalid is ignored, as W3C Trace
// Context says: the call is then the root of a trace.
func withTraceContext(ctx context.Context, meta map[string]any, h http.Header) context.Context {
	// The carrier is made only for a call that carries a trace context:
	// most do not, and this runs for every call.
	var carrier propagation.MapCarrier
	if tp, ok := meta[MetaTraceParent].(string); ok && len(tp) <= maxTraceHeader {
		carrier = propagation.MapCarrier{MetaTraceParent: tp}
		if ts, ok := meta[MetaTraceState].(string); ok && len(ts) <= maxTraceHeader {
			carrier[MetaTraceState] = ts
		}
	} else if tp := h.Get(MetaTraceParent); tp != "" && len(tp) <= maxTraceHeader {
		carrier = propagation.MapCarrier{MetaTraceParent: tp}
		// Several tracestate headers are one list (RFC 9110 field lines).
		if ts := strings.Join(h.Values(MetaTraceState), ","); ts != "" && len(ts) <= maxTraceHeader {
			carrier[MetaTraceState] = ts
		}
	}
	if carrier == nil {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}
