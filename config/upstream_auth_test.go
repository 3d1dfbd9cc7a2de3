package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestUpstreamOAuthAccepted: auth.oauth in service mode, the secret read
// from a file (relative to the configuration) or the environment.
func TestUpstreamOAuthAccepted(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tracker.secret"), []byte("file-secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BP_TEST_UPSTREAM_SECRET", "env-secret-2")
	c, err := Parse([]byte(`servers:
  - name: tracker
    url: https://tracker.example.com/mcp
    auth:
      oauth:
        mode: service
        client_id: backplane
        client_secret_file: tracker.secret
        scopes: [tools.read, tools.write]
        token_url: https://auth.example.com/token
  - name: docs
    url: http://127.0.0.1:9000/mcp
    auth: {oauth: {mode: service, client_id: bp, client_secret_env: BP_TEST_UPSTREAM_SECRET}}
`), filepath.Join(dir, "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []*UpstreamOAuth{
		{Mode: "service", ClientID: "backplane", ClientSecret: "file-secret-1", Scopes: []string{"tools.read", "tools.write"}, TokenURL: "https://auth.example.com/token", Line: 6},
		{Mode: "service", ClientID: "bp", ClientSecret: "env-secret-2", Line: 13},
	}
	for i, w := range want {
		if got := c.Servers[i].OAuth; !reflect.DeepEqual(got, w) {
			t.Errorf("server %d: OAuth %+v, want %+v", i, got, w)
		}
	}
}

// TestUpstreamOAuthErrorsNameTheLine: every mistake is refused at its
// line, and no message quotes the secret.
func TestUpstreamOAuthErrorsNameTheLine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s"), []byte("the-secret-9"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BP_TEST_UPSTREAM_SECRET", "the-secret-9")
	t.Setenv("BP_TEST_UPSTREAM_EMPTY", "")
	const head = "servers:\n  - name: a\n    url: http://h/mcp\n"
	for _, tc := range []struct {
		name, yaml string
		line       int
		msg        string
	}{
		{"auth not a mapping", head + "    auth: yes\n", 4, "auth must be a mapping"},
		{"auth empty", head + "    auth: {}\n", 4, "give oauth"},
		{"auth unknown", head + "    auth: {basic: {}}\n", 4, `unknown key "basic" in auth`},
		{"oauth unknown key", head + "    auth: {oauth: {mode: service, client_id: x, client_secret_file: s, realm: y}}\n", 4, `unknown key "realm"`},
		{"no mode", head + "    auth: {oauth: {client_id: x, client_secret_file: s}}\n", 4, "needs a mode"},
		{"bad mode", head + "    auth: {oauth: {mode: user, client_id: x, client_secret_file: s}}\n", 4, `mode "user"`},
		{"no client id", head + "    auth: {oauth: {mode: service, client_secret_file: s}}\n", 4, "needs a client_id"},
		{"no secret", head + "    auth: {oauth: {mode: service, client_id: x}}\n", 4, "client_secret_file or client_secret_env"},
		{"inline secret", head + "    auth:\n      oauth:\n        mode: service\n        client_secret: the-secret-9\n", 7, "never written in the file"},
		{"both secrets", head + "    auth:\n      oauth: {mode: service, client_id: x, client_secret_file: s,\n        client_secret_env: BP_TEST_UPSTREAM_SECRET}\n", 6, "not both"},
		{"missing file", head + "    auth:\n      oauth:\n        mode: service\n        client_id: x\n        client_secret_file: missing\n", 8, "client_secret_file"},
		{"empty file", head + "    auth:\n      oauth:\n        mode: service\n        client_id: x\n        client_secret_file: empty\n", 8, "is empty"},
		{"empty env", head + "    auth:\n      oauth:\n        mode: service\n        client_id: x\n        client_secret_env: BP_TEST_UPSTREAM_EMPTY\n", 8, "not set or empty"},
		{"bad env name", head + "    auth: {oauth: {mode: service, client_id: x, client_secret_env: A-B}}\n", 4, "not an environment variable name"},
		{"bad token url", head + "    auth: {oauth: {mode: service, client_id: x, client_secret_file: s, token_url: ftp://h}}\n", 4, "token_url must be"},
		{"bad scope", head + "    auth: {oauth: {mode: service, client_id: x, client_secret_file: s, scopes: [\"a b\"]}}\n", 4, "is not a scope"},
		{"with a command", "servers:\n  - name: a\n    command: [x]\n    auth: {oauth: {mode: service, client_id: x, client_secret_file: s}}\n", 4, "auth applies to a url"},
		{"with an Authorization header", head + "    headers: {authorization: \"Bearer t\"}\n    auth: {oauth: {mode: service, client_id: x, client_secret_file: s}}\n", 4, "leave it out of headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), filepath.Join(dir, "backplane.yaml"))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want a *config.Error", err, err)
			}
			if ce.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v, want line %d saying %q", err, tc.line, tc.msg)
			}
			if strings.Contains(err.Error(), "the-secret-9") {
				t.Errorf("the message quotes the secret: %v", err)
			}
		})
	}
}
