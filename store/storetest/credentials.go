package storetest

import (
	"bytes"
	"errors"
	"slices"

	"github.com/agentbackplane/backplane/store"
)

func testCredentials(f *fixture) {
	if _, err := f.s.GetCredential(f.ctx, "tracker", ""); !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("GetCredential of nothing: %v, want ErrNotFound", err)
	}
	svc := &store.Credential{Server: "tracker", Mode: "service", Scopes: []string{"a", "b"}, Subject: "bot",
		Expiry: f.base.Add(hour), Updated: f.base, Sealed: []byte{1, 2, 3, 0, 255}}
	alice := &store.Credential{Server: "tracker", Caller: "alice", Mode: "per_caller", Updated: f.base.Add(ms), Sealed: []byte("s-alice")}
	docs := &store.Credential{Server: "docs", Caller: "bob", Mode: "exchange", Updated: f.base, Sealed: []byte("s-bob")}
	for _, c := range []*store.Credential{svc, alice, docs} {
		if err := f.s.PutCredential(f.ctx, c, nil); err != nil {
			f.t.Fatal(err)
		}
	}
	got, err := f.s.GetCredential(f.ctx, "tracker", "")
	if err != nil {
		f.t.Fatal(err)
	}
	if got.Mode != "service" || !slices.Equal(got.Scopes, svc.Scopes) || got.Subject != "bot" || !got.Expiry.Equal(svc.Expiry) ||
		!got.Updated.Equal(svc.Updated) || !bytes.Equal(got.Sealed, svc.Sealed) || got.Caller != "" {
		f.t.Fatalf("GetCredential = %+v, want %+v", got, svc)
	}
	if got, err := f.s.GetCredential(f.ctx, "tracker", "alice"); err != nil || !got.Expiry.IsZero() || len(got.Scopes) != 0 {
		f.t.Fatalf("no expiry, no scopes: %+v, %v", got, err)
	}
	// Another caller's row is another row.
	if _, err := f.s.GetCredential(f.ctx, "tracker", "bob"); !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("bob on tracker: %v, want ErrNotFound", err)
	}
	all, err := f.s.ListCredentials(f.ctx, "")
	if err != nil {
		f.t.Fatal(err)
	}
	var keys []string
	for _, c := range all {
		keys = append(keys, c.Server+"/"+c.Caller)
	}
	if !slices.Equal(keys, []string{"docs/bob", "tracker/", "tracker/alice"}) {
		f.t.Fatalf("ListCredentials = %v", keys)
	}
	if one, err := f.s.ListCredentials(f.ctx, "docs"); err != nil || len(one) != 1 || one[0].Caller != "bob" {
		f.t.Fatalf("ListCredentials(docs) = %+v, %v", one, err)
	}

	// A replacement without prev overwrites; with prev, only while it holds.
	svc2 := *svc
	svc2.Sealed, svc2.Updated, svc2.Scopes = []byte("s2"), f.base.Add(2*hour), []string{"c"}
	if err := f.s.PutCredential(f.ctx, &svc2, nil); err != nil {
		f.t.Fatal(err)
	}
	svc3 := svc2
	svc3.Sealed = []byte("s3")
	if err := f.s.PutCredential(f.ctx, &svc3, svc.Sealed); !errors.Is(err, store.ErrCredentialChanged) {
		f.t.Fatalf("PutCredential with an outdated prev: %v, want ErrCredentialChanged", err)
	}
	if err := f.s.PutCredential(f.ctx, &svc3, svc2.Sealed); err != nil {
		f.t.Fatalf("PutCredential with the current prev: %v", err)
	}
	if got, _ := f.s.GetCredential(f.ctx, "tracker", ""); got == nil || !bytes.Equal(got.Sealed, []byte("s3")) || !slices.Equal(got.Scopes, []string{"c"}) {
		f.t.Fatalf("after the replacements: %+v", got)
	}
	gone := &store.Credential{Server: "gone", Mode: "service", Updated: f.base, Sealed: []byte("x")}
	if err := f.s.PutCredential(f.ctx, gone, []byte("y")); !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("PutCredential with prev on no row: %v, want ErrNotFound", err)
	}

	if err := f.s.DeleteCredential(f.ctx, "tracker", "alice"); err != nil {
		f.t.Fatal(err)
	}
	if err := f.s.DeleteCredential(f.ctx, "tracker", "alice"); !errors.Is(err, store.ErrNotFound) {
		f.t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := f.s.GetCredential(f.ctx, "tracker", ""); err != nil {
		f.t.Fatalf("the service row went with alice's: %v", err)
	}
	// What the store returns is a copy.
	got, _ = f.s.GetCredential(f.ctx, "tracker", "")
	got.Sealed[0] = 'X'
	if again, _ := f.s.GetCredential(f.ctx, "tracker", ""); again.Sealed[0] == 'X' {
		f.t.Fatal("GetCredential returns the store's own bytes")
	}
}
