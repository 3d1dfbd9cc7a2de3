package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/tool"
)

// traceBackend keeps the trace context each call carried and answers with
// the secret, which no span may carry.
type traceBackend struct{ got []tool.TraceContext }

func (b *traceBackend) Invoke(ctx context.Context, c *tool.Call) (*tool.Result, error) {
	b.got = append(b.got, c.Trace)
	return &tool.Result{Content: json.RawMessage(`{"echo":"` + secret + `"}`)}, nil
}

func tracedGateway(t *testing.T, tp trace.TracerProvider) (*gateway.Gateway, *traceBackend) {
	t.Helper()
	rules, err := policy.NewRules([]policy.Rule{{Caller: "alice", Allow: []string{"echo", "held"}, Approve: []string{"held"}}})
	if err != nil {
		t.Fatal(err)
	}
	o := &gateway.Options{Store: memstore.New(), Policy: rules}
	if tp != nil {
		o.Tracer = tp.Tracer("test")
	}
	g := gateway.New(o)
	b := &traceBackend{}
	for _, name := range []string{"echo", "held"} {
		if err := g.Register(context.Background(), tool.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`), Backend: b}); err != nil {
			t.Fatal(err)
		}
	}
	return g, b
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func TestCallSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	g, b := tracedGateway(t, tp)

	// The caller's trace (the server reads it from _meta or HTTP headers).
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1}, SpanID: trace.SpanID{0xcd, 2},
		TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	res, err := g.Call(ctx, gateway.CallRequest{Caller: "alice", Tool: "echo", Arguments: json.RawMessage(`{"text":"` + secret + `"}`)})
	if err != nil {
		t.Fatal(err)
	}

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the call's and the backend's", len(spans))
	}
	be, call := spans[0], spans[1] // the backend's ends first
	if call.Name() != "tools/call echo" || be.Name() != "backend echo" {
		t.Fatalf("names %q, %q", call.Name(), be.Name())
	}
	if call.Parent().SpanID() != parent.SpanID() || call.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("the call span's parent is %v, want the caller's %v", call.Parent(), parent)
	}
	if be.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Error("the backend span is not the call span's child")
	}
	a := attrMap(call.Attributes())
	want := map[string]string{gateway.AttrCallID: res.CallID, gateway.AttrCaller: "alice", gateway.AttrTool: "echo", gateway.AttrOutcome: "succeeded"}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, a[k], v)
		}
	}
	var steps []string
	for _, e := range call.Events() {
		ea := attrMap(e.Attributes)
		if _, ok := ea[gateway.AttrStepMillis]; !ok {
			t.Errorf("event %s has no duration", e.Name)
		}
		steps = append(steps, e.Name+":"+ea[gateway.AttrOutcome])
	}
	if got := strings.Join(steps, " "); got != "validate:ok authorize:allow approve:not_required commit:ok settle:ok" {
		t.Errorf("events %q", got)
	}
	// The backend got the backend span's own context, in W3C form.
	tc := b.got[0]
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tc.Parent}))
	if sc.SpanID() != be.SpanContext().SpanID() || sc.TraceID() != parent.TraceID() || !sc.IsSampled() {
		t.Errorf("backend trace context %q is not the backend span's", tc.Parent)
	}
	if env := tc.Env(); len(env) != 1 || env[0] != "TRACEPARENT="+tc.Parent {
		t.Errorf("Env %v", env)
	}
	// Never argument values nor results.
	for _, s := range spans {
		all := attrMap(s.Attributes())
		for _, e := range s.Events() {
			for k, v := range attrMap(e.Attributes) {
				all[e.Name+"."+k] = v
			}
		}
		for k, v := range all {
			if strings.Contains(v, secret) {
				t.Errorf("span %s attribute %s carries an argument or result value", s.Name(), k)
			}
		}
	}
}

func TestRefusedCallSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	g, b := tracedGateway(t, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	// held needs an approval, and the call does not wait: approval_required.
	_, err := g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "held", Arguments: json.RawMessage(`{}`)})
	gwErr(t, err, tool.ClassApprovalRequired)
	// An unknown name never becomes a span name.
	_, err = g.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "made-up-" + secret, Arguments: json.RawMessage(`{}`)})
	gwErr(t, err, tool.ClassNotFound)
	spans := rec.Ended()
	if len(spans) != 2 || len(b.got) != 0 {
		t.Fatalf("%d spans, %d backend calls", len(spans), len(b.got))
	}
	held, unknown := spans[0], spans[1]
	a := attrMap(held.Attributes())
	if held.Name() != "tools/call held" || a[gateway.AttrErrorClass] != "approval_required" || a[gateway.AttrOutcome] != "approval_required" || held.Status().Code != codes.Error {
		t.Errorf("held: %q %v %v", held.Name(), a, held.Status())
	}
	if !held.Parent().Equal(trace.SpanContext{}) {
		t.Error("a call without a caller's trace is not a root")
	}
	if unknown.Name() != "tools/call" || attrMap(unknown.Attributes())[gateway.AttrErrorClass] != "not_found" {
		t.Errorf("unknown: %q %v", unknown.Name(), unknown.Attributes())
	}
}

// No tracer: no trace context reaches the backend, even when the caller
// sent one.
func TestUntracedCall(t *testing.T) {
	g, b := tracedGateway(t, nil)
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	if _, err := g.Call(trace.ContextWithRemoteSpanContext(context.Background(), parent),
		gateway.CallRequest{Caller: "alice", Tool: "echo", Arguments: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if b.got[0] != (tool.TraceContext{}) {
		t.Errorf("trace context %+v without a tracer", b.got[0])
	}
}
