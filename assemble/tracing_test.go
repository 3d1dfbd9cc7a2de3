package assemble

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/otlptest"
)

// A tracing key gives the runtime a provider whose tracer the gateway uses;
// Close exports what is queued.
func TestTracingKeyWiresTheGateway(t *testing.T) {
	r := otlptest.Start(t)
	c := writeConfig(t, "policy:\n  - {caller: alice, allow: [ls]}\nbuiltin: {enable: [ls]}\ntracing: {endpoint: "+r.URL+"}\n")
	rt, err := Open(context.Background(), c, &Options{Version: "v1.2.3", Stderr: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Tracing == nil {
		t.Fatal("no tracer provider")
	}
	if _, err := rt.Gateway.Call(context.Background(), gateway.CallRequest{Caller: "alice", Tool: "ls", Arguments: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	spans := otlptest.Named(r.Spans(), "tools/call ls")
	if len(spans) != 1 || spans[0].Resource["service.version"] != "v1.2.3" {
		t.Fatalf("spans after Close: %+v", r.Spans())
	}
}

func TestNoTracingKeyNoProvider(t *testing.T) {
	rt, err := Open(context.Background(), writeConfig(t, "policy: []\n"), &Options{Stderr: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if rt.Tracing != nil {
		t.Fatal("a tracer provider without a tracing key")
	}
}

// A protocol from the environment that is not supported is a configuration
// error naming the key's line.
func TestTracingBadEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := Open(context.Background(), writeConfig(t, "policy: []\ntracing:\n"), &Options{Stderr: &strings.Builder{}})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(err.Error(), `protocol "http/json"`) {
		t.Fatalf("err %v", err)
	}
}
