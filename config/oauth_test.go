package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestOAuthValues(t *testing.T) {
	c, err := Parse([]byte(`serve:
  oauth:
    issuer: https://auth.example
    audience: http://127.0.0.1:8787/mcp
    jwks_file: keys/jwks.json
    caller_claim: email
    authorization_servers: [https://auth.example, https://backup.example]
  anonymous_caller: guest
`), "/etc/bp/backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &OAuthConfig{
		Issuer: "https://auth.example", Audience: "http://127.0.0.1:8787/mcp",
		JWKSFile: filepath.Join("/etc/bp", "keys/jwks.json"), CallerClaim: "email",
		AuthorizationServers: []string{"https://auth.example", "https://backup.example"}, Line: 3,
	}
	if !reflect.DeepEqual(c.Serve.OAuth, want) {
		t.Errorf("OAuth = %+v, want %+v", c.Serve.OAuth, want)
	}
	if c.Serve.AnonymousCaller != "guest" {
		t.Errorf("anonymous caller %q", c.Serve.AnonymousCaller)
	}

	c, err = Parse([]byte("serve:\n  oauth: {issuer: https://a.example, audience: https://gw.example/mcp, jwks_url: https://a.example/jwks}\n"), "backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Serve.OAuth; o.CallerClaim != "sub" || o.JWKSURL != "https://a.example/jwks" || o.JWKSFile != "" {
		t.Errorf("defaults: %+v", o)
	}
	c, _ = Parse([]byte("serve: {}\n"), "backplane.yaml")
	if c.Serve.OAuth != nil || c.Serve.AnonymousCaller != "" {
		t.Errorf("off by default: %+v", c.Serve)
	}
}

func TestOAuthErrors(t *testing.T) {
	const base = "serve:\n  oauth:\n"
	for _, tc := range []struct {
		src  string
		line int
		want string
	}{
		{base + "    audience: https://gw.example/mcp\n    jwks_url: https://a.example/k\n", 3, "needs an issuer"},
		{base + "    issuer: https://a.example\n    jwks_url: https://a.example/k\n", 3, "needs an audience"},
		{base + "    issuer: https://a.example\n    audience: https://gw.example/mcp\n", 3, "exactly one of jwks_file and jwks_url"},
		{base + "    issuer: https://a.example\n    audience: https://gw.example/mcp\n    jwks_file: k.json\n    jwks_url: https://a.example/k\n", 3, "exactly one"},
		{base + "    issuer: a.example\n", 3, "not an absolute http(s) URL"},
		{base + "    issuer: https://a.example\n    audience: https://gw.example/mcp#frag\n", 4, "no query and no fragment"},
		{base + "    issuer: https://a.example\n    audience: https://gw.example/mcp\n    jwks_url: http://keys.example/k\n", 5, "over https"},
		{base + "    issuer: https://a.example\n    caller_claim: \"a b\"\n", 4, "not a claim name"},
		{base + "    issuer: https://a.example\n    authorization_servers: [nope]\n", 4, "not an absolute"},
		{base + "    issuer: https://a.example\n    client_secret: x\n", 4, "client_secret"},
		{"serve:\n  http: 0.0.0.0:8787\n  allow_remote: true\n  anonymous_caller: guest\n", 4, "not loopback"},
		{"serve:\n  anonymous_caller: guest\n  http: 10.0.0.1:80\n  allow_remote: true\n", 2, "not loopback"},
		{"serve:\n  anonymous_caller: \"\"\n", 2, "must name a caller"},
	} {
		_, err := Parse([]byte(tc.src), "backplane.yaml")
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: %v, want a config error", tc.src, err)
			continue
		}
		if ce.Line != tc.line || !strings.Contains(ce.Msg, tc.want) {
			t.Errorf("%q: line %d %q; want line %d saying %q", tc.src, ce.Line, ce.Msg, tc.line, tc.want)
		}
	}
	// http on loopback is fine for the keys.
	if _, err := Parse([]byte(base+"    issuer: https://a.example\n    audience: https://gw.example/mcp\n    jwks_url: http://127.0.0.1:9/k\n"), "backplane.yaml"); err != nil {
		t.Errorf("loopback jwks_url: %v", err)
	}
}
