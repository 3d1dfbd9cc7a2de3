package config

import (
	"net/url"
	"testing"
)

// FuzzParseOAuth feeds the parser serve sections around oauth and
// anonymous_caller: it must never panic, and an accepted configuration keeps
// its promises (an issuer, an absolute audience without query or fragment,
// exactly one key source, an anonymous caller only on a loopback listener).
func FuzzParseOAuth(f *testing.F) {
	fuzzParse(f, []string{
		"serve:\n  oauth:\n    issuer: https://a.example\n    audience: http://127.0.0.1:8787/mcp\n    jwks_url: https://a.example/jwks\n",
		"serve:\n  oauth: {issuer: https://a.example, audience: https://gw.example/mcp, jwks_file: k.json, caller_claim: email}\n",
		"serve:\n  oauth: {issuer: https://a.example, audience: https://gw.example/mcp?x, jwks_file: k.json}\n",
		"serve:\n  oauth: {issuer: x, audience: y, jwks_url: http://10.0.0.1/k, authorization_servers: [https://b.example]}\n",
		"serve:\n  http: 127.0.0.1:1\n  anonymous_caller: guest\n",
		"serve:\n  http: \"[::1]:1\"\n  anonymous_caller: guest\n  allow_remote: true\n",
		"serve:\n  http: 0.0.0.0:1\n  allow_remote: true\n  anonymous_caller: guest\n",
	}, func(t *testing.T, c *Config) {
		if o := c.Serve.OAuth; o != nil {
			u, err := url.Parse(o.Audience)
			if o.Issuer == "" || err != nil || !u.IsAbs() || u.RawQuery != "" || u.Fragment != "" ||
				(o.JWKSFile == "") == (o.JWKSURL == "") || o.CallerClaim == "" {
				t.Fatalf("accepted oauth %+v", o)
			}
		}
		if c.Serve.AnonymousCaller != "" && CheckAnonymousAddr(c.Serve.HTTP) != nil {
			t.Fatalf("accepted anonymous caller on %s", c.Serve.HTTP)
		}
	})
}
