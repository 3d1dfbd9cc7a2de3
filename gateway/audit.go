package gateway

// The audit event of a call: one per call, written when the call returns
// to its caller, with the steps it went through inside (see docs/audit.md).

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/agentbackplane/backplane/internal/jsonstring"
	"github.com/agentbackplane/backplane/tool"
	"go.opentelemetry.io/otel/trace"
)

// auditStep is one step of a call as its audit event lists it.
type auditStep struct {
	step, outcome string
	attrs         []any // key, value pairs, as slog takes them
	dur           time.Duration
}

// audit records a step of the call: the event's steps list, and the span's
// events when traced. It is safe for concurrent use (an interactive
// approver answers on its own goroutine).
func (c *call) audit(step, outcome string, attrs ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = step
	now := time.Now()
	if c.auditOn {
		if step == "settle" && c.tool != nil {
			// What the backend says about how it ran (its sandbox, say).
			if a, ok := c.tool.Backend.(tool.Auditor); ok {
				attrs = append(attrs, a.AuditAttrs()...)
			}
			if a, ok := c.tool.Backend.(tool.CallAuditor); ok {
				attrs = append(attrs, a.CallAuditAttrs(c.req.Caller)...)
			}
		}
		c.steps = append(c.steps, auditStep{step: step, outcome: outcome, attrs: attrs, dur: now.Sub(c.mark)})
	}
	c.traceStep(now, step, outcome)
	c.mark = now
}

// startAudit notes what the call's event needs before the pipeline runs.
func (c *call) startAudit(ctx context.Context) {
	c.start = time.Now()
	c.mark = c.start
	// Calls are logged at info or warn: a logger that takes neither (the
	// default, discard) costs no event and no list of steps.
	c.auditOn = c.g.log.Enabled(ctx, slog.LevelWarn)
}

// emitAudit writes the call's one audit event; exactly one of res and ge is
// set. The event names the call (id, caller, tool, session, trace), where
// it ended (step) and how (outcome: succeeded, tool_error or the error's
// class), and lists its steps in order.
func (c *call) emitAudit(ctx context.Context, res *CallResult, ge *Error) {
	if !c.auditOn {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	level, outcome := slog.LevelInfo, traceSucceeded
	switch {
	case ge != nil:
		level, outcome = slog.LevelWarn, string(ge.Class)
	case res.IsError:
		outcome = traceToolError
	}
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("call_id", c.id), slog.String("caller", c.req.Caller), slog.String("tool", c.req.Tool))
	if c.req.Session != "" {
		attrs = append(attrs, slog.String("session", c.req.Session))
	}
	if c.req.ClientInfo != "" {
		attrs = append(attrs, slog.String("client", c.req.ClientInfo))
	}
	if c.req.ProtocolVersion != "" {
		attrs = append(attrs, slog.String("protocol_version", c.req.ProtocolVersion))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	if c.digest != "" {
		attrs = append(attrs, slog.String("args_digest", c.digest))
	}
	attrs = append(attrs, slog.String("step", c.step), slog.String("outcome", outcome))
	if ge != nil {
		attrs = append(attrs, slog.String("error_class", string(ge.Class)))
	}
	if res != nil && res.Replayed {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	if c.decideOnly {
		attrs = append(attrs, slog.Bool(DecisionOnly, true)) // Backplane decided, the agent runs it
	}
	if c.preview {
		attrs = append(attrs, slog.Bool("preview", true)) // nothing was journaled
	}
	if c.invoked > 0 {
		attrs = append(attrs, slog.Float64("invoke_ms", millis(c.invoked)))
	}
	attrs = append(attrs, slog.Float64("duration_ms", millis(time.Since(c.start))), slog.Any("steps", auditSteps(c.steps)))
	c.g.log.LogAttrs(context.WithoutCancel(ctx), level, "call", attrs...)
}

// Record writes e into the audit log, the one the calls' events go to
// (Options.Logger): the server's refusals by a limit and its content
// reads, an upstream's relayed requests (the gateway is the Registry it
// registers through, a tool.Recorder). No event is written when the log
// takes neither info nor warn.
func (g *Gateway) Record(ctx context.Context, e tool.Event) {
	level := slog.LevelInfo
	if e.Warn {
		level = slog.LevelWarn
	}
	g.log.Log(context.WithoutCancel(ctx), level, e.Msg, e.Attrs...)
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// auditSteps is the steps list of a call's event, written as a JSON array
// of objects: {"step", "outcome", the step's attributes, "duration_ms"}.
type auditSteps []auditStep

// MarshalJSON writes the array without reflection: it is on every call's
// path.
func (s auditSteps) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 96*len(s))
	b = append(b, '[')
	for i, st := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"step":`...)
		b = jsonstring.Slog.Append(b, st.step)
		b = append(b, `,"outcome":`...)
		b = jsonstring.Slog.Append(b, st.outcome)
		for j := 0; j+1 < len(st.attrs); j += 2 {
			k, ok := st.attrs[j].(string)
			if !ok {
				continue // not a key: slog would say !BADKEY; the gateway never passes one
			}
			b = append(b, ',')
			b = jsonstring.Slog.Append(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSONValue(b, st.attrs[j+1]); err != nil {
				return nil, err
			}
		}
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendFloat(b, millis(st.dur), 'f', -1, 64)
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// MarshalText makes a text handler print the steps as JSON too.
func (s auditSteps) MarshalText() ([]byte, error) { return s.MarshalJSON() }

func appendJSONValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return jsonstring.Slog.Append(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case slog.Value:
		return appendJSONValue(b, x.Resolve().Any())
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}
