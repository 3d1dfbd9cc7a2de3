package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/internal/credstore"
	"github.com/agentbackplane/backplane/internal/secrets"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// sealedTokensAt opens the store folder with keys, as serve would.
func sealedTokensAt(t *testing.T, dir string, keys ...string) (*credstore.Tokens, func()) {
	t.Helper()
	var raw [][]byte
	for _, k := range keys {
		b, err := os.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		key, err := secrets.ParseKey(b)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, key)
	}
	sl, err := secrets.New(raw...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return credstore.New(st, sl), func() { st.Close() }
}

// TestConnectionsAndSecrets: connections list shows the kept credentials
// without their tokens; revoke sends the refresh token to the revocation
// endpoint and forgets the row (or only forgets it, saying so, when there
// is none); a key rotation (new-key, previous_keys, reseal) leaves every
// token readable with the new key alone. No token is printed or audited.
func TestConnectionsAndSecrets(t *testing.T) {
	var mu sync.Mutex
	var revoked []string
	rev := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		mu.Lock()
		revoked = append(revoked, r.PostForm.Get("token")+"|"+r.PostForm.Get("token_type_hint"))
		mu.Unlock()
	}))
	defer rev.Close()

	g := newGWDir(t, "store: state\npolicy: []\nsecrets: {key_file: k1}\n")
	g.run(t, "", "secrets", "new-key", filepath.Join(g.dir, "k1")).wantCode(t, exitOK)
	if fi, err := os.Stat(filepath.Join(g.dir, "k1")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the new key's file: %v %v", fi.Mode(), err)
	}
	if r := g.run(t, "", "secrets", "new-key", filepath.Join(g.dir, "k1")); r.code == exitOK {
		t.Fatal("new-key overwrote an existing key")
	}
	g.run(t, "", "connections", "list").wantCode(t, exitOK) // creates the store

	tokens, done := sealedTokensAt(t, filepath.Join(g.dir, "state"), filepath.Join(g.dir, "k1"))
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	secretTexts := []string{"AT-tracker-1", "RT-tracker-1", "AT-alice-2", "AT-bob-3"}
	for _, s := range []struct {
		key upstream.TokenKey
		tok upstream.StoredToken
	}{
		{upstream.TokenKey{Server: "tracker"}, upstream.StoredToken{Mode: "service", Scopes: []string{"tools.read"}, RevocationURL: rev.URL, ClientID: "bp",
			Token: &oauth2.Token{AccessToken: "AT-tracker-1", RefreshToken: "RT-tracker-1", Expiry: exp}}},
		{upstream.TokenKey{Server: "docs", Caller: "alice"}, upstream.StoredToken{Mode: "per_caller", Token: &oauth2.Token{AccessToken: "AT-alice-2"}}},
		{upstream.TokenKey{Server: "docs", Caller: "bob"}, upstream.StoredToken{Mode: "per_caller", Token: &oauth2.Token{AccessToken: "AT-bob-3"}}},
	} {
		if err := tokens.SaveToken(ctx, s.key, s.tok); err != nil {
			t.Fatal(err)
		}
	}
	done()

	m := g.runJSON(t, exitOK, "", "connections", "list")
	list, _ := m["connections"].([]any)
	if len(list) != 3 {
		t.Fatalf("connections list: %v", m)
	}
	first := list[0].(map[string]any)
	if first["server"] != "docs" || first["caller"] != "alice" || first["mode"] != "per_caller" {
		t.Errorf("the first connection: %v", first)
	}
	text := g.run(t, "", "connections", "list")
	text.wantCode(t, exitOK)
	found := false
	for line := range strings.Lines(text.stdout) {
		f := strings.Fields(line)
		found = found || len(f) == 6 && f[0] == "tracker" && f[1] == "(gateway)" && f[2] == "service" && f[3] == "tools.read"
	}
	if !found {
		t.Errorf("connections list:\n%s", text.stdout)
	}

	r := g.runJSON(t, exitOK, "", "connections", "revoke", "tracker", "--as", "ops")
	if r["at_server"] != true || r["revoked_by"] != "ops" {
		t.Errorf("revoke tracker: %v", r)
	}
	mu.Lock()
	if len(revoked) != 1 || revoked[0] != "RT-tracker-1|refresh_token" {
		t.Errorf("the revocation endpoint got %q", revoked)
	}
	mu.Unlock()
	r = g.runJSON(t, exitOK, "", "connections", "revoke", "docs", "--caller", "alice", "--as", "ops")
	if r["at_server"] != false || !strings.Contains(r["note"].(string), "no revocation endpoint") {
		t.Errorf("revoke docs/alice: %v", r)
	}
	neg := g.runJSON(t, exitNegative, "", "connections", "revoke", "docs", "--caller", "alice", "--as", "ops")
	if e, _ := neg["error"].(map[string]any); e["class"] != "not_found" {
		t.Errorf("a second revoke: %v", neg)
	}

	// Rotation: k2 seals, k1 still opens; reseal; then k2 alone.
	g.run(t, "", "secrets", "new-key", filepath.Join(g.dir, "k2")).wantCode(t, exitOK)
	if err := os.WriteFile(filepath.Join(g.dir, "backplane.yaml"),
		[]byte("store: state\npolicy: []\nsecrets:\n  key_file: k2\n  previous_keys: [{key_file: k1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := g.run(t, "", "secrets", "reseal")
	rs.wantCode(t, exitOK)
	if !strings.Contains(rs.stdout, "ok: 1 tokens re-sealed") {
		t.Errorf("secrets reseal: %s %s", rs.stdout, rs.stderr)
	}
	tokens, done = sealedTokensAt(t, filepath.Join(g.dir, "state"), filepath.Join(g.dir, "k2"))
	got, err := tokens.Token(ctx, upstream.TokenKey{Server: "docs", Caller: "bob"})
	done()
	if err != nil || got.Token.AccessToken != "AT-bob-3" {
		t.Fatalf("bob's token with the new key alone: %v", err)
	}

	var everything strings.Builder
	everything.WriteString(text.stdout + rs.stdout)
	filepath.WalkDir(g.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasSuffix(p, ".jsonl") || strings.HasSuffix(p, ".log")) {
			b, _ := os.ReadFile(p)
			everything.Write(b)
		}
		return nil
	})
	all := everything.String()
	if !strings.Contains(all, `"msg":"connection","step":"revoke","outcome":"revoked","server":"tracker"`) {
		t.Errorf("the audit lacks the revocation:\n%s", all)
	}
	for _, s := range secretTexts {
		if strings.Contains(all, s) {
			t.Errorf("%s is printed, audited or logged", s)
		}
	}
}
