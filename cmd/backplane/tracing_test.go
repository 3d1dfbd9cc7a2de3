package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/otlptest"
)

// Traces through real processes: `backplane serve` exporting to an
// OTLP/HTTP receiver in the test, the Go SDK's MCP client sending trace
// context, and a Go SDK MCP server upstream receiving it.

const tracingConfig = `operators:
  - {name: ops, token: ops-token}
policy:
  - caller: alice
    allow: ["*"]
  - caller: alice
    allow: [bash]
    approve: [bash]
    self_approve: true
serve:
  tokens: {"alice-token": alice}
  approval_wait: 30s
%s
tracing:
  endpoint: %s
  protocol: http/protobuf
  sample: 1.0
`

// headerTransport sends the bearer token and a traceparent header with
// every request, as an instrumented HTTP client would.
type headerTransport struct{ token, traceparent string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	if h.traceparent != "" {
		r.Header.Set("traceparent", h.traceparent)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// tracedPeer is a Go SDK MCP server over streamable HTTP on 127.0.0.1 whose
// tool echo keeps the _meta of each call.
type tracedPeer struct {
	url     string
	mu      sync.Mutex
	meta    []map[string]any
	headers []string // traceparent headers received
}

func startUpstream(t *testing.T) *tracedPeer {
	u := &tracedPeer{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "trace-upstream", Version: "v0"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", Description: "Answers ok.", InputSchema: map[string]any{"type": "object"},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u.mu.Lock()
			u.meta = append(u.meta, req.Params.Meta)
			u.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("traceparent"); tp != "" {
			u.mu.Lock()
			u.headers = append(u.headers, tp)
			u.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	u.url = hs.URL
	return u
}

func (u *tracedPeer) metas() []map[string]any {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]map[string]any(nil), u.meta...)
}

const (
	metaTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	metaSpan   = "00f067aa0ba902b7"
	headerTrac = "0af7651916cd43dd8448eb211c80319c"
	headerSpan = "b7ad6b7169203331"
)

var traceparentRe = regexp.MustCompile(`00-([0-9a-f]{32})-([0-9a-f]{16})-01`)

func TestServeTraces(t *testing.T) {
	rec := otlptest.Start(t)
	up := startUpstream(t)
	g := newGWDir(t, fmt.Sprintf(tracingConfig, "servers:\n  - name: up\n    url: "+up.url, rec.URL))
	p := startServe(t, g)
	// It failed twice in full runs of this package (no spans in 60 s) and
	// never alone: keep serve's log when it does.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's log:\n%s", p.log())
		}
	})

	e := &elicitCounter{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	client := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "v0"}, &mcp.ClientOptions{ElicitationHandler: e.handle})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.base + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{"alice-token", "00-" + headerTrac + "-" + headerSpan + "-01"}}}, sessionEra)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.log())
	}
	defer cs.Close()

	// 1. The upstream's tool, with the client's trace in _meta (it wins
	// over the HTTP header).
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up.echo", Arguments: map[string]any{},
		Meta: mcp.Meta{"traceparent": "00-" + metaTrace + "-" + metaSpan + "-01", "tracestate": "vendor=x"}})
	if err != nil || res.IsError {
		t.Fatalf("up.echo: %v %+v\n%s", err, res, p.log())
	}
	// 2. bash (approved by alice through her client), whose trace is the
	// HTTP header's.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": `echo "tp=$TRACEPARENT ts=$TRACESTATE"`}})
	if err != nil || res.IsError {
		t.Fatalf("bash: %v %+v\n%s", err, res, p.log())
	}
	bashOut := fmt.Sprint(res.StructuredContent)

	spans := rec.WaitFor(t, 60*time.Second, func(s []otlptest.Span) bool {
		return len(otlptest.Named(s, "tools/call up.echo")) == 1 && len(otlptest.Named(s, "tools/call bash")) == 1 &&
			len(otlptest.Named(s, "backend up.echo")) == 1 && len(otlptest.Named(s, "backend bash")) == 1
	})

	// One trace per call, each a child of the caller's.
	call := otlptest.Named(spans, "tools/call up.echo")[0]
	be := otlptest.Named(spans, "backend up.echo")[0]
	if call.TraceID != metaTrace || call.ParentID != metaSpan {
		t.Errorf("up.echo span: trace %s parent %s, want the _meta's %s %s", call.TraceID, call.ParentID, metaTrace, metaSpan)
	}
	if be.TraceID != metaTrace || be.ParentID != call.SpanID {
		t.Errorf("backend span is not the call span's child: %+v", be)
	}
	for k, v := range map[string]string{"backplane.caller": "alice", "backplane.tool": "up.echo", "backplane.outcome": "succeeded", "mcp.method.name": "tools/call"} {
		if call.Attrs[k] != v {
			t.Errorf("up.echo attribute %s = %q, want %q", k, call.Attrs[k], v)
		}
	}
	if !strings.HasPrefix(call.Attrs["backplane.call.id"], "call_") || call.Resource["service.name"] != "backplane" {
		t.Errorf("call id %q, resource %v", call.Attrs["backplane.call.id"], call.Resource)
	}
	var events []string
	for _, ev := range call.Events {
		if _, err := strconv.ParseFloat(ev.Attrs["backplane.step.duration_ms"], 64); err != nil {
			t.Errorf("event %s: no duration (%v)", ev.Name, ev.Attrs)
		}
		events = append(events, ev.Name)
	}
	if got := strings.Join(events, " "); got != "validate authorize approve commit settle" {
		t.Errorf("up.echo events %q", got)
	}

	// The upstream received the backend span's context in _meta.
	metas := up.metas()
	if len(metas) != 1 {
		t.Fatalf("upstream calls: %v", metas)
	}
	tp, _ := metas[0]["traceparent"].(string)
	if m := traceparentRe.FindStringSubmatch(tp); m == nil || m[1] != metaTrace || m[2] != be.SpanID {
		t.Errorf("upstream _meta traceparent %q, want trace %s span %s", tp, metaTrace, be.SpanID)
	}
	// An HTTP upstream also gets it in the request's headers.
	up.mu.Lock()
	headers := append([]string(nil), up.headers...)
	up.mu.Unlock()
	if len(headers) != 1 || headers[0] != tp {
		t.Errorf("upstream traceparent headers %q, want only the call's %q", headers, tp)
	}
	if ts, _ := metas[0]["tracestate"].(string); ts != "vendor=x" {
		t.Errorf("upstream _meta tracestate %q", ts)
	}

	// bash saw TRACEPARENT: the header's trace, the backend span.
	bcall := otlptest.Named(spans, "tools/call bash")[0]
	bbe := otlptest.Named(spans, "backend bash")[0]
	if bcall.TraceID != headerTrac || bcall.ParentID != headerSpan {
		t.Errorf("bash span: trace %s parent %s, want the header's", bcall.TraceID, bcall.ParentID)
	}
	if want := "tp=00-" + headerTrac + "-" + bbe.SpanID + "-01 ts="; !strings.Contains(bashOut, want) {
		t.Errorf("bash output %q does not hold %q", bashOut, want)
	}
	events = events[:0]
	for _, ev := range bcall.Events {
		events = append(events, ev.Name+":"+ev.Attrs["backplane.outcome"])
	}
	if got := strings.Join(events, " "); !strings.Contains(got, "approve:waiting") || !strings.Contains(got, "approve:approved") {
		t.Errorf("bash events %q: want the approval wait", got)
	}

	// /metrics has the exporter's counters.
	code, body := httpGet(t, p.base+"/metrics", "ops-token")
	if code != 200 || !strings.Contains(body, `backplane_tracing_spans_dropped_total{reason="queue_full"} 0`) {
		t.Errorf("/metrics %d: no tracing counters\n%s", code, body)
	}
}

var exportFailed = regexp.MustCompile(`backplane_tracing_spans_dropped_total\{reason="export_failed"\} (\d+)`)

// A collector that is down fails no call; its spans are counted as dropped.
func TestServeTracesReceiverDown(t *testing.T) {
	rec := otlptest.Start(t)
	url := rec.URL
	rec.Close() // nothing listens there now (127.0.0.1)
	g := newGWDir(t, fmt.Sprintf(tracingConfig, "", url))
	if err := os.WriteFile(filepath.Join(g.dir, "notes.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, g)
	cs := connectAlice(t, p, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for range 3 {
		res, _ := callTool(t, ctx, cs, "read", map[string]any{"path": "notes.txt"})
		if res.IsError {
			t.Fatalf("read failed with the collector down: %+v", res)
		}
	}
	// The exporter tries once a second; wait for it to count the calls'
	// spans (each call: its span and its backend's).
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, body := httpGet(t, p.base+"/metrics", "ops-token")
		if m := exportFailed.FindStringSubmatch(body); m != nil {
			if n, _ := strconv.Atoi(m[1]); n >= 6 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("export failures not counted:\n%s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("serve exited with %v\n%s", err, p.log())
	}
}
