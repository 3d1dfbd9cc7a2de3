package config

import (
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

func TestTracing(t *testing.T) {
	dir := t.TempDir()
	parse := func(src string) (*Config, error) { return Parse([]byte(src), filepath.Join(dir, "backplane.yaml")) }

	c, err := parse("policy: []\n")
	if err != nil || c.Tracing != nil {
		t.Fatalf("no key: tracing %+v, err %v; want off", c.Tracing, err)
	}
	c, err = parse("tracing:\n")
	if err != nil || c.Tracing == nil || c.Tracing.Endpoint != "" || c.Tracing.Sample != nil || c.Tracing.Line != 1 {
		t.Fatalf("bare key: %+v, %v; want on, all from the environment", c.Tracing, err)
	}
	c, err = parse("store: x\ntracing:\n  endpoint: http://127.0.0.1:4318\n  protocol: grpc\n  sample: 0.25\n  headers: {X-Key: \"k v\"}\n")
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Tracing
	if tr.Endpoint != "http://127.0.0.1:4318" || tr.Protocol != TracingGRPC || tr.Sample == nil || *tr.Sample != 0.25 ||
		tr.Headers["X-Key"] != "k v" || tr.Line != 2 {
		t.Fatalf("parsed %+v", tr)
	}
	if c, err = parse("tracing: {sample: 1}\n"); err != nil || *c.Tracing.Sample != 1 {
		t.Fatalf("sample 1: %v", err)
	}

	for _, tc := range []struct{ src, want string }{
		{"tracing: {endpoint: 127.0.0.1:4318}\n", "1: tracing endpoint must be an http:// or https:// URL"},
		{"tracing: {endpoint: \"http://u:p@h:1\"}\n", "tracing endpoint must be"},
		{"tracing: {endpoint: 42}\n", "tracing endpoint must be a string"},
		{"tracing: {protocol: http/json}\n", `tracing protocol "http/json": http/protobuf or grpc`},
		{"tracing: {sample: 1.5}\n", "tracing sample 1.5: a number from 0 to 1"},
		{"tracing: {sample: -0.1}\n", "a number from 0 to 1"},
		{"tracing: {sample: .nan}\n", "a number from 0 to 1"},
		{"tracing: {sample: half}\n", "tracing sample must be a number"},
		{"tracing: {headers: {\"bad name\": x}}\n", "is not an HTTP header name"},
		{"tracing: {headers: {X-K: 3}}\n", "the value of X-K must be a string"},
		{"tracing: {headers: {X-K: \"a\\nb\"}}\n", "holds a control character"},
		{"tracing: {endpoint: http://h:1, exporter: zipkin}\n", "exporter"},
		{"tracing: [a]\n", "tracing"},
	} {
		_, err := parse(tc.src)
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want a *config.Error with %q", tc.src, err, tc.want)
		}
	}
	// Header values are secrets: an error about them never quotes them.
	if _, err := parse("tracing: {headers: {X-K: \"s3cret\\u0001\"}}\n"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("err %v quotes a header value", err)
	}
}

func FuzzParseTracing(f *testing.F) {
	fuzzParse(f, []string{
		"tracing:\n",
		"tracing: {endpoint: http://127.0.0.1:4318, protocol: http/protobuf, sample: 1.0, headers: {}}\n",
		"tracing: {endpoint: https://collector:4317/x, protocol: grpc, sample: 0}\n",
		"tracing: {sample: 1e-3, headers: {a: b}}\n",
		"tracing: {endpoint: &e http://h, headers: {x: *e}}\n",
	}, func(t *testing.T, c *Config) {
		if c.Tracing == nil {
			return
		}
		tr := c.Tracing
		if tr.Sample != nil && !(*tr.Sample >= 0 && *tr.Sample <= 1) {
			t.Fatalf("accepted sample %v", *tr.Sample)
		}
		if tr.Protocol != "" && tr.Protocol != TracingHTTP && tr.Protocol != TracingGRPC {
			t.Fatalf("accepted protocol %q", tr.Protocol)
		}
		if tr.Endpoint != "" {
			u, err := url.Parse(tr.Endpoint)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				t.Fatalf("accepted endpoint %q", tr.Endpoint)
			}
		}
	})
}
