package config

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretsKeys: the sealing key from a file or a variable, the
// previous keys after it, in order.
func TestSecretsKeys(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	if err := os.WriteFile(filepath.Join(dir, "k1"), []byte(hex.EncodeToString(k1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BP_TEST_OLD_KEY", hex.EncodeToString(k2))
	c, err := Parse([]byte("secrets:\n  key_file: k1\n  previous_keys:\n    - key_env: BP_TEST_OLD_KEY\n"), filepath.Join(dir, "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Secrets == nil || len(c.Secrets.Keys) != 2 || !bytes.Equal(c.Secrets.Keys[0], k1) || !bytes.Equal(c.Secrets.Keys[1], k2) {
		t.Fatalf("Secrets = %+v", c.Secrets)
	}
}

// TestSecretsErrors: each mistake at its line, no key quoted.
func TestSecretsErrors(t *testing.T) {
	dir := t.TempDir()
	key := hex.EncodeToString(bytes.Repeat([]byte{7}, 32))
	if err := os.WriteFile(filepath.Join(dir, "open"), []byte(key), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "short"), []byte("abcd"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BP_TEST_KEY", key)
	for _, tc := range []struct{ yaml, want string }{
		{"secrets: {}\n", "yaml:1: secrets needs key_file or key_env"},
		{"secrets:\n  key_file: open\n", "yaml:2: secrets key_file open is readable or writable by group or others"},
		{"secrets:\n  key_file: short\n", "yaml:2: secrets key_file short: not a 32-byte key"},
		{"secrets:\n  key_file: absent\n", "yaml:2: secrets key_file:"},
		{"secrets:\n  key_env: BP_TEST_NOT_SET\n", "yaml:2: secrets key_env BP_TEST_NOT_SET is not set"},
		{"secrets:\n  key_file: k\n  key_env: BP_TEST_KEY\n", "yaml:3: secrets: give one of key_file and key_env"},
		{"secrets:\n  key_file: k\n  previous_keys:\n    - key_env: BP_TEST_KEY\n", "key 2 is given twice"},
		{"secrets:\n  key: k\n", "yaml:2: unknown key \"key\""},
		{"servers:\n  - name: a\n    url: http://127.0.0.1/mcp\n    auth: {oauth: {mode: service, grant: authorization_code}}\n", "yaml:4: server a: auth oauth grant authorization_code keeps its tokens in the store, sealed: set secrets"},
		{"servers:\n  - name: a\n    url: http://127.0.0.1/mcp\n    auth: {oauth: {mode: service, grant: password}}\n", "yaml:4: auth oauth grant \"password\""},
		{"secrets: {key_file: k}\nservers:\n  - name: a\n    url: http://127.0.0.1/mcp\n    auth: {oauth: {mode: service, grant: authorization_code, token_url: http://127.0.0.1/t}}\n", "token_url applies to the client credentials grant"},
		{"secrets: {key_file: k}\nservers:\n  - name: a\n    url: http://127.0.0.1/mcp\n    auth: {oauth: {mode: service, client_id: x, client_secret_env: BP_TEST_KEY, client_id_metadata_url: https://gw.example/c.json}}\n", "client_id_metadata_url applies to grant: authorization_code"},
	} {
		_, err := Parse([]byte(tc.yaml), filepath.Join(dir, "backplane.yaml"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("%q: the error quotes the key: %v", tc.yaml, err)
		}
	}
	// Authorization code with a public client, and one with a metadata document.
	c, err := Parse([]byte("secrets: {key_file: k}\nservers:\n  - name: a\n    url: http://127.0.0.1/mcp\n    auth: {oauth: {mode: service, grant: authorization_code, client_id_metadata_url: https://gw.example/c.json}}\n"), filepath.Join(dir, "backplane.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Servers[0].OAuth; o.Grant != GrantAuthorizationCode || o.ClientID != "" || o.ClientIDMetadataURL != "https://gw.example/c.json" {
		t.Fatalf("OAuth = %+v", o)
	}
}
