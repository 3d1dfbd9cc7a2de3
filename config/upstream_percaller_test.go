package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testServeOAuth = `serve:
  oauth: {issuer: "http://127.0.0.1:9/", audience: "http://127.0.0.1:8787/mcp", jwks_url: "http://127.0.0.1:9/keys"}
`

// TestUpstreamCallerOAuthAccepted: per_caller (a public client, and a
// confidential one with auth_url) and exchange with its audience and
// subject token type.
func TestUpstreamCallerOAuthAccepted(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("BP_TEST_UPSTREAM_SECRET", "env-secret-2")
	c, err := Parse([]byte(testServeOAuth+`servers:
  - name: tracker
    url: https://tracker.example.com/mcp
    auth: {oauth: {mode: per_caller, scopes: [issues]}}
  - name: code
    url: https://code.example.com/mcp
    auth:
      oauth:
        mode: per_caller
        client_id: bp
        client_secret_env: BP_TEST_UPSTREAM_SECRET
        auth_url: https://auth.example.com/authorize
        token_url: https://auth.example.com/token
  - name: docs
    url: https://docs.example.com/mcp
    auth:
      oauth:
        mode: exchange
        client_id: bp
        client_secret_env: BP_TEST_UPSTREAM_SECRET
        audience: docs
        subject_token_type: jwt
`), filepath.Join(dir, "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []*UpstreamOAuth{
		{Mode: "per_caller", Scopes: []string{"issues"}, Line: 6}, // registered dynamically
		{Mode: "per_caller", ClientID: "bp", ClientSecret: "env-secret-2", TokenURL: "https://auth.example.com/token",
			PerCaller: UpstreamCallerOAuth{AuthURL: "https://auth.example.com/authorize"}, Line: 11},
		{Mode: "exchange", ClientID: "bp", ClientSecret: "env-secret-2",
			PerCaller: UpstreamCallerOAuth{Audience: "docs", SubjectTokenType: "urn:ietf:params:oauth:token-type:jwt"}, Line: 20},
	}
	for i, w := range want {
		if got := c.Servers[i].OAuth; !reflect.DeepEqual(got, w) {
			t.Errorf("server %d: OAuth %+v, want %+v", i, got, w)
		}
	}
}

// TestUpstreamCallerOAuthErrors: the combinations that make no sense are
// refused at their line.
func TestUpstreamCallerOAuthErrors(t *testing.T) {
	dir := t.TempDir()
	const head = "servers:\n  - name: a\n    url: http://h/mcp\n"
	for _, tc := range []struct {
		name, yaml string
		line       int
		msg        string
	}{
		{"exchange without client id", testServeOAuth + head + "    auth:\n      oauth:\n        mode: exchange\n", 8, "needs a client_id"},
		{"a secret without client id", head + "    auth:\n      oauth:\n        mode: per_caller\n        client_secret_env: BP_TEST_UPSTREAM_SECRET\n", 6, "needs its client_id"},
		{"exchange without serve.oauth", head + "    auth:\n      oauth: {mode: exchange, client_id: x}\n", 5, "serve.oauth is not set"},
		{"per_caller on a command", "servers:\n  - name: a\n    command: [x]\n    auth: {oauth: {mode: per_caller, client_id: x}}\n", 4, "auth applies to a url"},
		{"auth_url in service mode", head + "    auth:\n      oauth:\n        mode: service\n        client_id: x\n        client_secret_env: BP_TEST_UPSTREAM_SECRET\n        auth_url: https://a/authorize\n", 9, "auth_url applies to mode per_caller, not service"},
		{"audience in per_caller", head + "    auth:\n      oauth:\n        mode: per_caller\n        client_id: x\n        audience: y\n", 8, "audience applies to mode exchange, not per_caller"},
		{"bad subject token type", testServeOAuth + head + "    auth:\n      oauth:\n        mode: exchange\n        client_id: x\n        subject_token_type: saml\n", 10, `subject_token_type "saml"`},
		{"bad auth url", head + "    auth: {oauth: {mode: per_caller, client_id: x, auth_url: \"ftp://h\"}}\n", 4, "auth_url must be"},
		{"empty audience", testServeOAuth + head + "    auth: {oauth: {mode: exchange, client_id: x, audience: \"\"}}\n", 6, "audience may not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("BP_TEST_UPSTREAM_SECRET", "s3")
			_, err := Parse([]byte(tc.yaml), filepath.Join(dir, "backplane.yaml"))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want a *config.Error", err, err)
			}
			if ce.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v, want line %d saying %q", err, tc.line, tc.msg)
			}
		})
	}
}
