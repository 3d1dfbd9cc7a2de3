package config

import (
	"net/url"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Tracing turns on OpenTelemetry traces of every call, exported over OTLP
// (package tracing builds the exporter; this package only parses, and
// imports nothing of OpenTelemetry). Off unless the key is present; what it
// leaves out comes from the standard OTEL_EXPORTER_OTLP_* variables, then
// the OpenTelemetry defaults (localhost:4318, http/protobuf).
//
//	tracing:
//	  endpoint: http://127.0.0.1:4318   # the collector's base URL (grpc: http://127.0.0.1:4317)
//	  protocol: http/protobuf           # or grpc
//	  sample: 1.0                       # the share of new traces kept; a caller's sampled flag is followed
//	  headers: {x-api-key: secret}      # sent with every export
type Tracing struct {
	// Endpoint is the collector's base URL, http:// (plain) or https://;
	// over http/protobuf "/v1/traces" is appended when it has no path, as
	// for OTEL_EXPORTER_OTLP_ENDPOINT. Empty: the environment's.
	Endpoint string
	// Protocol is "http/protobuf" or "grpc"; empty: the environment's
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf.
	Protocol string
	// Sample is the ratio of root traces sampled, 0 to 1; nil means 1.
	Sample *float64
	// Headers are sent with every export (with OTEL_EXPORTER_OTLP_HEADERS
	// when empty). Their values are secrets: errors never quote them.
	Headers map[string]string
	// Line is where the key is, for errors found later.
	Line int
}

// Tracing protocols.
const (
	TracingHTTP = "http/protobuf"
	TracingGRPC = "grpc"
)

func (p *parser) tracing(c *Config, k, v *yaml.Node) error {
	t := &Tracing{Line: k.Line}
	c.Tracing = t
	if isNull(v) {
		return nil // "tracing:" alone: on, everything from the environment
	}
	return p.mapping(v, "tracing", func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "endpoint":
			if t.Endpoint, err = p.str(v, "tracing endpoint"); err != nil {
				return err
			}
			u, perr := url.Parse(t.Endpoint)
			if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				return p.errAt(v, "tracing endpoint must be an http:// or https:// URL with a host (and no credentials, query or fragment)")
			}
		case "protocol":
			if t.Protocol, err = p.str(v, "tracing protocol"); err != nil {
				return err
			}
			if t.Protocol != TracingHTTP && t.Protocol != TracingGRPC {
				return p.errAt(v, "tracing protocol %q: %s or %s", t.Protocol, TracingHTTP, TracingGRPC)
			}
		case "sample":
			n := deref(v)
			if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!float" && n.ShortTag() != "!!int") {
				return p.errAt(v, "tracing sample must be a number from 0 to 1, not %s", describe(v))
			}
			f, perr := strconv.ParseFloat(n.Value, 64)
			if perr != nil || !(f >= 0 && f <= 1) {
				return p.errAt(v, "tracing sample %s: a number from 0 to 1", n.Value)
			}
			t.Sample = &f
		case "headers":
			t.Headers = map[string]string{}
			return p.mapping(v, "tracing headers", func(name string, k, v *yaml.Node) error {
				if !headerName.MatchString(name) {
					return p.errAt(k, "tracing headers: %q is not an HTTP header name", name)
				}
				n := deref(v)
				if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
					return p.errAt(v, "tracing headers: the value of %s must be a string (quote it)", name)
				}
				if !headerValueRe.MatchString(n.Value) {
					return p.errAt(v, "tracing headers: the value of %s holds a control character", name)
				}
				t.Headers[name] = n.Value
				return nil
			})
		}
		return nil
	}, "endpoint", "protocol", "sample", "headers")
}
