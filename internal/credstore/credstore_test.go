package credstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/internal/secrets"
	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/sqlite"
)

func key(t *testing.T) []byte {
	k := make([]byte, secrets.KeySize)
	rand.Read(k)
	return k
}

func sealer(t *testing.T, keys ...[]byte) *secrets.Sealer {
	s, err := secrets.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSealedInTheStore: a token saved through Tokens reads back whole,
// and neither the store's rows nor the SQLite files hold its text.
func TestSealedInTheStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tk := New(st, sealer(t, key(t)))
	k := upstream.TokenKey{Server: "tracker"}
	exp := time.Now().Add(time.Hour).Round(time.Second)
	in := upstream.StoredToken{
		Token: &oauth2.Token{AccessToken: "AT-secret-1", RefreshToken: "RT-secret-2", TokenType: "Bearer", Expiry: exp},
		Mode:  "service", Scopes: []string{"tools.read"}, Subject: "bot",
		ClientID: "dcr-client", ClientSecret: "CS-secret-3", TokenURL: "http://127.0.0.1:1/token",
	}
	if _, err := tk.Token(ctx, k); !errors.Is(err, upstream.ErrNoToken) {
		t.Fatalf("Token before any: %v, want ErrNoToken", err)
	}
	if err := tk.SaveToken(ctx, k, in); err != nil {
		t.Fatal(err)
	}
	got, err := tk.Token(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if got.Token.AccessToken != "AT-secret-1" || got.Token.RefreshToken != "RT-secret-2" || !got.Token.Expiry.Equal(exp) ||
		got.ClientSecret != "CS-secret-3" || got.ClientID != "dcr-client" || got.TokenURL != in.TokenURL || got.Mode != "service" ||
		got.Subject != "bot" || len(got.Scopes) != 1 || got.Updated.IsZero() {
		t.Fatalf("Token = %+v", got)
	}
	row, err := st.GetCredential(ctx, "tracker", "")
	if err != nil {
		t.Fatal(err)
	}
	if !row.Expiry.Equal(exp) || row.Mode != "service" {
		t.Fatalf("the plain metadata: %+v", row)
	}
	st.Close()
	for _, secret := range []string{"AT-secret-1", "RT-secret-2", "CS-secret-3"} {
		if bytes.Contains(row.Sealed, []byte(secret)) {
			t.Errorf("the sealed column holds %s", secret)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "state", "*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds %s", f, secret)
			}
		}
	}
}

// TestMovedRowDoesNotOpen: a sealed token copied to another caller's row
// does not open there; another key does not open it either.
func TestMovedRowDoesNotOpen(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	tk := New(st, sealer(t, key(t)))
	if err := tk.SaveToken(ctx, upstream.TokenKey{Server: "s", Caller: "alice"}, upstream.StoredToken{Token: &oauth2.Token{AccessToken: "A"}, Mode: "per_caller"}); err != nil {
		t.Fatal(err)
	}
	row, _ := st.GetCredential(ctx, "s", "alice")
	row.Caller = "bob"
	if err := st.PutCredential(ctx, row, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Token(ctx, upstream.TokenKey{Server: "s", Caller: "bob"}); !errors.Is(err, secrets.ErrCorrupt) {
		t.Fatalf("moved row: %v, want ErrCorrupt", err)
	}
	other := New(st, sealer(t, key(t)))
	if _, err := other.Token(ctx, upstream.TokenKey{Server: "s", Caller: "alice"}); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Fatalf("another key: %v, want ErrUnknownKey", err)
	}
	if err := tk.DeleteToken(ctx, upstream.TokenKey{Server: "s", Caller: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := tk.DeleteToken(ctx, upstream.TokenKey{Server: "s", Caller: "alice"}); err != nil {
		t.Fatalf("deleting what is gone: %v", err)
	}
}

// TestReseal: rows sealed with the old key are re-sealed with the new one,
// after which the old key can go.
func TestReseal(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	oldK, newK := key(t), key(t)
	old := New(st, sealer(t, oldK))
	for _, c := range []string{"", "alice", "bob"} {
		if err := old.SaveToken(ctx, upstream.TokenKey{Server: "s", Caller: c}, upstream.StoredToken{Token: &oauth2.Token{AccessToken: "tok-" + c}, Mode: "service"}); err != nil {
			t.Fatal(err)
		}
	}
	both := New(st, sealer(t, newK, oldK))
	// One row already written with the new key (a refresh during rotation).
	if err := both.SaveToken(ctx, upstream.TokenKey{Server: "s", Caller: "bob"}, upstream.StoredToken{Token: &oauth2.Token{AccessToken: "tok-bob2"}, Mode: "service"}); err != nil {
		t.Fatal(err)
	}
	n, err := both.Reseal(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Reseal = %d, %v; want 2 rows", n, err)
	}
	if n, err := both.Reseal(ctx); err != nil || n != 0 {
		t.Fatalf("second Reseal = %d, %v; want 0", n, err)
	}
	onlyNew := New(st, sealer(t, newK))
	for c, want := range map[string]string{"": "tok-", "alice": "tok-alice", "bob": "tok-bob2"} {
		got, err := onlyNew.Token(ctx, upstream.TokenKey{Server: "s", Caller: c})
		if err != nil || got.Token.AccessToken != want {
			t.Fatalf("%q after the rotation: %+v, %v", c, got.Token, err)
		}
	}
	// A row no configured key opens is reported, the others re-sealed.
	stranger := New(st, sealer(t, key(t)))
	if err := stranger.SaveToken(ctx, upstream.TokenKey{Server: "z"}, upstream.StoredToken{Token: &oauth2.Token{AccessToken: "z"}, Mode: "service"}); err != nil {
		t.Fatal(err)
	}
	if _, err := onlyNew.Reseal(ctx); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Fatalf("Reseal with a row of an unknown key: %v", err)
	}
	var _ store.Credentials = st
}
