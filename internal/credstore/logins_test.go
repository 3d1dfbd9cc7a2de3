package credstore

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/sqlite"
)

func pendingLogin(caller string) upstream.PendingLogin {
	now := time.Now().Round(time.Millisecond)
	return upstream.PendingLogin{
		Server: "tracker", Caller: caller, Scopes: []string{"tools", "admin"},
		Verifier: "VERIFIER-secret-1", URL: "http://127.0.0.1:1/authorize?state=STATE-secret-2&code_challenge=x",
		ElicitationID: "elicit-1", ClientID: "dcr-9", ClientSecret: "CS-secret-3", TokenURL: "http://127.0.0.1:1/token",
		Redirect: "http://127.0.0.1:2/oauth/upstream/callback", Issuer: "http://127.0.0.1:1", IssRequired: true,
		Created: now, Expires: now.Add(time.Minute),
	}
}

// TestLoginsSealed: a login in progress reads back whole by its state,
// once; the store's row holds neither the state nor any secret, and is
// found by a digest of the state only.
func TestLoginsSealed(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ls := NewLogins(st, sealer(t, key(t)))
	in := pendingLogin("alice")
	if err := ls.AddLogin(ctx, "STATE-secret-2", in, 2); err != nil {
		t.Fatal(err)
	}
	open, err := ls.Logins(ctx, "tracker", "alice")
	if err != nil || len(open) != 1 {
		t.Fatalf("Logins = %v, %v", open, err)
	}
	if g := open[0]; g.Verifier != in.Verifier || g.URL != in.URL || g.ClientSecret != in.ClientSecret || g.Redirect != in.Redirect ||
		!g.IssRequired || g.Issuer != in.Issuer || g.ElicitationID != "elicit-1" || len(g.Scopes) != 2 || !g.Expires.Equal(in.Expires) {
		t.Fatalf("Logins[0] = %+v, want %+v", g, in)
	}
	rows, err := st.ListPendingLogins(ctx, "tracker", "alice", time.Now())
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows: %v %v", rows, err)
	}
	for _, secret := range []string{"VERIFIER-secret-1", "STATE-secret-2", "CS-secret-3"} {
		if bytes.Contains(rows[0].Sealed, []byte(secret)) || rows[0].Key == secret {
			t.Errorf("the row holds %s", secret)
		}
	}
	// The cap, through the upstream error.
	if err := ls.AddLogin(ctx, "state-b", pendingLogin("alice"), 2); err != nil {
		t.Fatal(err)
	}
	if err := ls.AddLogin(ctx, "state-c", pendingLogin("alice"), 2); !errors.Is(err, upstream.ErrTooManyLogins) {
		t.Fatalf("a third login at a cap of 2: %v, want ErrTooManyLogins", err)
	}
	got, err := ls.TakeLogin(ctx, "STATE-secret-2")
	if err != nil || got.Verifier != in.Verifier || got.Caller != "alice" {
		t.Fatalf("TakeLogin = %+v, %v", got, err)
	}
	for _, s := range []string{"STATE-secret-2", "never-given", ""} {
		if _, err := ls.TakeLogin(ctx, s); !errors.Is(err, upstream.ErrNoLogin) {
			t.Fatalf("TakeLogin(%q) again: %v, want ErrNoLogin", s, err)
		}
	}
}

// TestLoginsBoundToTheirRow: a sealed login moved to another caller's row
// does not open, and one sealed with a key no longer configured is not
// offered; taking either still uses the state up.
func TestLoginsBoundToTheirRow(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	ls := NewLogins(st, sealer(t, key(t)))
	if err := ls.AddLogin(ctx, "s-alice", pendingLogin("alice"), 0); err != nil {
		t.Fatal(err)
	}
	row, err := st.TakePendingLogin(ctx, stateKey("s-alice"))
	if err != nil {
		t.Fatal(err)
	}
	row.Caller = "mallory"
	if err := st.AddPendingLogin(ctx, row, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.TakeLogin(ctx, "s-alice"); !errors.Is(err, upstream.ErrNoLogin) || !strings.Contains(err.Error(), "caller mallory") {
		t.Fatalf("a login moved to another caller: %v, want ErrNoLogin saying it does not open", err)
	}
	if _, err := ls.TakeLogin(ctx, "s-alice"); !errors.Is(err, upstream.ErrNoLogin) {
		t.Fatalf("the moved login was not used up: %v", err)
	}
	if err := ls.AddLogin(ctx, "s-old", pendingLogin("bob"), 0); err != nil {
		t.Fatal(err)
	}
	other := NewLogins(st, sealer(t, key(t)))
	if open, err := other.Logins(ctx, "tracker", "bob"); err != nil || len(open) != 0 {
		t.Fatalf("a login sealed with another key is offered: %v %v", open, err)
	}
}
