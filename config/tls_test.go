package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestTLSValues(t *testing.T) {
	c, err := Parse([]byte(`serve:
  tls:
    cert_file: tls/server.crt
    key_file: /secrets/server.key
    client_ca_file: tls/ca.crt
    caller_from: san_uri
`), "/etc/bp/backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &TLSConfig{
		CertFile: filepath.Join("/etc/bp", "tls/server.crt"), KeyFile: "/secrets/server.key",
		ClientCAFile: filepath.Join("/etc/bp", "tls/ca.crt"), CallerFrom: "san_uri", Line: 3,
	}
	if !reflect.DeepEqual(c.Serve.TLS, want) {
		t.Errorf("TLS = %+v, want %+v", c.Serve.TLS, want)
	}
	c, _ = Parse([]byte("serve: {}\n"), "backplane.yaml")
	if c.Serve.TLS != nil {
		t.Errorf("off by default: %+v", c.Serve.TLS)
	}
}

func TestTLSErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"tls: {cert_file: a.crt}", "needs cert_file and key_file"},
		{"tls: {key_file: a.key}", "needs cert_file and key_file"},
		{"tls: {cert_file: '', key_file: a.key}", "must not be empty"},
		{"tls: {cert_file: a.crt, key_file: a.key, caller_from: cn}", "caller_from needs client_ca_file"},
		{"tls: {cert_file: a.crt, key_file: a.key, client_ca_file: ca.crt, caller_from: email}", `caller_from "email"`},
		{"tls: {cert_file: a.crt, key_file: a.key, min_version: '1.0'}", "min_version"},
		{"tls: yes", ""},
	} {
		_, err := Parse([]byte("serve:\n  "+tc.body+"\n"), "backplane.yaml")
		var ce *Error
		if !errors.As(err, &ce) || ce.Line != 2 && ce.Line != 3 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a line-numbered error with %q", tc.body, err, tc.want)
		}
	}
}

func TestCallerTokens(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.token"), []byte("agent-secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BP_TEST_CI_TOKEN", "ci-secret-2")
	c, err := Parse([]byte(`serve:
  caller_tokens:
    - {caller: agent, token_file: agent.token}
    - {caller: ci, token_env: BP_TEST_CI_TOKEN}
  tokens: {"inline-3": dev}
`), filepath.Join(dir, "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"agent-secret-1": "agent", "ci-secret-2": "ci", "inline-3": "dev"}
	if !reflect.DeepEqual(c.Serve.Tokens, want) {
		t.Errorf("tokens %v, want %v", c.Serve.Tokens, want)
	}
	t.Setenv("BP_TEST_EMPTY", "")
	for _, tc := range []struct{ body, want string }{
		{"caller_tokens: [{caller: a, token_env: BP_TEST_EMPTY}]", "not set or empty"},
		{"caller_tokens: [{caller: a, token_file: missing.token}]", "token_file"},
		{"caller_tokens: [{caller: a}]", "one of token_env and token_file"},
		{"caller_tokens: [{caller: a, token_env: BP_TEST_CI_TOKEN, token_file: agent.token}]", "one of token_env and token_file"},
		{"caller_tokens: [{token_env: BP_TEST_CI_TOKEN}]", "needs a caller"},
		{"caller_tokens: [{caller: a, token_env: BP_TEST_CI_TOKEN}, {caller: b, token_env: BP_TEST_CI_TOKEN}]", "listed twice"},
		{"tokens: {ci-secret-2: x}\n  caller_tokens: [{caller: a, token_env: BP_TEST_CI_TOKEN}]", "also in serve.tokens"},
	} {
		_, err := Parse([]byte("serve:\n  "+tc.body+"\n"), filepath.Join(dir, "backplane.yaml"))
		var ce *Error
		if !errors.As(err, &ce) || ce.Line == 0 || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "ci-secret-2") && !strings.Contains(tc.body, "tokens: {ci") {
			t.Errorf("%s: %v, want a line-numbered error with %q (and never the token)", tc.body, err, tc.want)
		}
	}
}
