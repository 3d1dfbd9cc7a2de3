package gateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbackplane/backplane/tool"
)

// Span attributes of a call. Like the audit log, a span carries the
// argument digest at most, never argument values or results.
const (
	attrCallID     = "backplane.call.id"
	attrCaller     = "backplane.caller"
	attrTool       = "backplane.tool"
	attrSession    = "backplane.session"
	attrOutcome    = "backplane.outcome"
	attrErrorClass = "backplane.error.class"
	attrStep       = "backplane.step"
	attrStepMillis = "backplane.step.duration_ms"
)

// Outcomes of a traced call (attrOutcome), besides an error class.
const (
	traceSucceeded = "succeeded"
	traceToolError = "tool_error"
)

// startSpan opens the call's span, a child of whatever trace ctx carries
// (the client's traceparent, read by the server). The tool's name joins the
// span's name only once lookup found it: a made-up name must not become a
// span name.
func (c *call) startSpan(ctx context.Context) context.Context {
	attrs := []attribute.KeyValue{
		attribute.String(attrCallID, c.id),
		attribute.String(attrCaller, c.req.Caller),
		attribute.String(attrTool, c.req.Tool),
		attribute.String("mcp.method.name", "tools/call"),
	}
	if c.req.Session != "" {
		attrs = append(attrs, attribute.String(attrSession, c.req.Session))
	}
	ctx, c.span = c.g.tracer.Start(ctx, "tools/call", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return ctx
}

// traceStep records one audited step as an event of the call's span, with
// the time since the previous step ended (an approval wait is the time
// between "approve waiting" and its decision).
func (c *call) traceStep(now time.Time, step, outcome string) {
	if c.span == nil || !c.span.IsRecording() { // not sampled: nothing to add to
		return
	}
	c.span.AddEvent(step, trace.WithTimestamp(now), trace.WithAttributes(
		attribute.String(attrOutcome, outcome),
		attribute.Float64(attrStepMillis, float64(now.Sub(c.mark).Microseconds())/1000),
	))
}

// endSpan closes the call's span with its outcome.
func (c *call) endSpan(res *CallResult, ge *Error) {
	if c.span == nil {
		return
	}
	if c.tool != nil {
		c.span.SetName("tools/call " + c.tool.Name)
	}
	switch {
	case ge != nil:
		c.span.SetAttributes(attribute.String(attrOutcome, string(ge.Class)), attribute.String(attrErrorClass, string(ge.Class)))
		c.span.SetStatus(codes.Error, string(ge.Class))
	case res.IsError:
		c.span.SetAttributes(attribute.String(attrOutcome, traceToolError))
	default:
		c.span.SetAttributes(attribute.String(attrOutcome, traceSucceeded))
	}
	c.span.End()
}

// startBackend opens the child span of the backend's invocation and puts
// its trace context in the backend's call, for the backend to pass on
// (an MCP upstream's _meta, a program's TRACEPARENT).
func (c *call) startBackend(ctx context.Context, bc *tool.Call) (context.Context, trace.Span) {
	if c.span == nil {
		return ctx, nil
	}
	ctx, span := c.g.tracer.Start(ctx, "backend "+c.tool.Name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String(attrTool, c.tool.Name), attribute.String(attrCallID, c.id)))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	bc.Trace = tool.TraceContext{Parent: carrier["traceparent"], State: carrier["tracestate"]}
	return ctx, span
}

// endBackend closes the backend's span; err is the backend's own error.
func (c *call) endBackend(span trace.Span, res *tool.Result, err error) {
	if span == nil {
		return
	}
	defer span.End()
	switch {
	case err != nil:
		span.SetStatus(codes.Error, "the backend failed")
	case res != nil && res.IsError:
		span.SetAttributes(attribute.String(attrOutcome, traceToolError))
	}
}
