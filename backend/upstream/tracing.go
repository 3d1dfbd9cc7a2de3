package upstream

import (
	"context"
	"net/http"

	"github.com/agentbackplane/backplane/tool"
)

type traceKey struct{}

// withTrace carries a call's trace context to the HTTP requests that make
// it (an HTTP upstream gets it in headers as well as in _meta).
func withTrace(ctx context.Context, tc tool.TraceContext) context.Context {
	if tc.Parent == "" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, tc)
}

// setTraceHeaders sets traceparent and tracestate on a request of a traced
// call.
func setTraceHeaders(req *http.Request) {
	tc, ok := req.Context().Value(traceKey{}).(tool.TraceContext)
	if !ok {
		return
	}
	req.Header.Set("traceparent", tc.Parent)
	if tc.State != "" {
		req.Header.Set("tracestate", tc.State)
	}
}
