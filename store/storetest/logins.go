package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentbackplane/backplane/store"
)

func (f *fixture) pendingLogin(key, server, caller string, created time.Time, life time.Duration) *store.PendingLogin {
	return &store.PendingLogin{Key: key, Server: server, Caller: caller, Scopes: []string{"tools", "admin"},
		Created: created, Expires: created.Add(life), Sealed: []byte{0, 1, 2, 255, byte(len(key))}}
}

func loginKeys(ls []store.PendingLogin) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Key)
	}
	return out
}

// testPendingLogins: logins in progress are added up to a cap per caller,
// listed per caller and server, oldest first and not expired, and taken
// once each.
func testPendingLogins(f *fixture) {
	t, now := f.t, f.base
	a1 := f.pendingLogin("k-a1", "tracker", "alice", now, hour)
	a2 := f.pendingLogin("k-a2", "tracker", "alice", now.Add(ms), hour)
	a3 := f.pendingLogin("k-a3", "docs", "alice", now.Add(2*ms), hour)
	b1 := f.pendingLogin("k-b1", "tracker", "bob", now, hour)
	for _, l := range []*store.PendingLogin{a2, a1, a3, b1} {
		if err := f.s.AddPendingLogin(f.ctx, l, now, 3); err != nil {
			t.Fatalf("AddPendingLogin %s: %v", l.Key, err)
		}
	}
	// The cap counts the caller's logins on every server; bob is apart.
	a4 := f.pendingLogin("k-a4", "other", "alice", now.Add(3*ms), hour)
	if err := f.s.AddPendingLogin(f.ctx, a4, now, 3); !errors.Is(err, store.ErrTooManyLogins) {
		t.Fatalf("a fourth login for alice at a cap of 3: %v, want ErrTooManyLogins", err)
	}
	if err := f.s.AddPendingLogin(f.ctx, f.pendingLogin("k-b2", "tracker", "bob", now, hour), now, 3); err != nil {
		t.Fatalf("bob's second login: %v", err)
	}
	if err := f.s.AddPendingLogin(f.ctx, f.pendingLogin("k-a1", "tracker", "carol", now, hour), now, 0); err == nil {
		t.Fatal("a key added twice was accepted")
	}
	got, err := f.s.ListPendingLogins(f.ctx, "tracker", "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loginKeys(got), []string{"k-a1", "k-a2"}) {
		t.Fatalf("alice's logins on tracker: %v, want [k-a1 k-a2]", loginKeys(got))
	}
	g := got[0]
	if g.Server != "tracker" || g.Caller != "alice" || !slices.Equal(g.Scopes, a1.Scopes) || !g.Created.Equal(a1.Created) ||
		!g.Expires.Equal(a1.Expires) || !bytes.Equal(g.Sealed, a1.Sealed) {
		t.Fatalf("ListPendingLogins = %+v, want %+v", g, a1)
	}
	if none, err := f.s.ListPendingLogins(f.ctx, "tracker", "carol", now); err != nil || len(none) != 0 {
		t.Fatalf("carol's logins: %v %v", loginKeys(none), err)
	}
	// What the store returns is a copy.
	got[0].Sealed[0] = 'X'
	if again, _ := f.s.ListPendingLogins(f.ctx, "tracker", "alice", now); again[0].Sealed[0] == 'X' {
		t.Fatal("ListPendingLogins returns the store's own bytes")
	}

	// Taken once: the second take, like a take of a key never added, is
	// ErrNotFound.
	taken, err := f.s.TakePendingLogin(f.ctx, "k-a1")
	if err != nil || taken.Key != "k-a1" || taken.Caller != "alice" || !bytes.Equal(taken.Sealed, a1.Sealed) || !taken.Expires.Equal(a1.Expires) {
		t.Fatalf("TakePendingLogin = %+v, %v", taken, err)
	}
	for _, k := range []string{"k-a1", "k-never"} {
		if _, err := f.s.TakePendingLogin(f.ctx, k); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("TakePendingLogin(%s): %v, want ErrNotFound", k, err)
		}
	}
	// A taken login frees its place under the cap.
	if err := f.s.AddPendingLogin(f.ctx, a4, now, 3); err != nil {
		t.Fatalf("alice's login after one was taken: %v", err)
	}

	// Expiry is judged on the now given: an expired login is not listed,
	// not counted and deleted by the next add; taken before that, it is
	// returned for the caller to say it expired.
	later := now.Add(2 * hour)
	if got, _ := f.s.ListPendingLogins(f.ctx, "tracker", "alice", later); len(got) != 0 {
		t.Fatalf("expired logins listed: %v", loginKeys(got))
	}
	if l, err := f.s.TakePendingLogin(f.ctx, "k-b2"); err != nil || !l.Expires.Before(later) {
		t.Fatalf("taking an expired login: %+v %v, want it returned", l, err)
	}
	short := f.pendingLogin("k-short", "tracker", "alice", later, ms)
	for i, k := range []string{"k-c1", "k-c2", "k-c3"} {
		l := f.pendingLogin(k, "tracker", "alice", later.Add(time.Duration(i)*ms), hour)
		if i == 2 {
			l = short
			l.Key = k
		}
		if err := f.s.AddPendingLogin(f.ctx, l, later, 3); err != nil {
			t.Fatalf("adding %s once alice's older logins expired: %v", k, err)
		}
	}
	if _, err := f.s.TakePendingLogin(f.ctx, "k-a2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired login survived an add: %v", err)
	}
	if got, _ := f.s.ListPendingLogins(f.ctx, "tracker", "alice", later.Add(10*ms)); !slices.Equal(loginKeys(got), []string{"k-c1", "k-c2"}) {
		t.Fatalf("alice's logins after k-c3 expired: %v", loginKeys(got))
	}
}

// testConcLoginTakenOnce: concurrent takers of one login: exactly one gets
// it; concurrent adds past a cap: exactly the cap are added.
func testConcLoginTakenOnce(f *fixture) {
	t := f.t
	const n = 16
	if err := f.s.AddPendingLogin(f.ctx, f.pendingLogin("k-once", "tracker", "alice", f.base, hour), f.base, 0); err != nil {
		t.Fatal(err)
	}
	errs := parallel(n, func(int) error {
		_, err := f.s.TakePendingLogin(f.ctx, "k-once")
		return err
	})
	took := 0
	for i, err := range errs {
		switch {
		case err == nil:
			took++
		case !errors.Is(err, store.ErrNotFound):
			t.Fatalf("take %d: %v", i, err)
		}
	}
	if took != 1 {
		t.Fatalf("%d of %d takers got the login, want exactly 1", took, n)
	}
	errs = parallel(n, func(i int) error {
		return f.s.AddPendingLogin(f.ctx, f.pendingLogin(fmt.Sprintf("k-cap-%02d", i), "tracker", "bob", f.base, hour), f.base, 3)
	})
	added := 0
	for i, err := range errs {
		switch {
		case err == nil:
			added++
		case !errors.Is(err, store.ErrTooManyLogins):
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if added != 3 {
		t.Fatalf("%d of %d concurrent logins added past a cap of 3, want 3", added, n)
	}
}

// testLoginPrune: Prune deletes the logins in progress that expired before
// its cut (a login is otherwise deleted only when a later one is added),
// and only those.
func testLoginPrune(f *fixture) {
	now := f.base
	for _, l := range []*store.PendingLogin{
		f.pendingLogin("k-old", "tracker", "alice", now, hour),
		f.pendingLogin("k-new", "tracker", "alice", now, 3*hour),
	} {
		if err := f.s.AddPendingLogin(f.ctx, l, now, 0); err != nil {
			f.t.Fatalf("AddPendingLogin %s: %v", l.Key, err)
		}
	}
	r, err := f.s.Prune(f.ctx, now.Add(2*hour))
	if err != nil || r.Logins != 1 {
		f.t.Fatalf("Prune = %+v, %v: want one login pruned", r, err)
	}
	if _, err := f.s.TakePendingLogin(f.ctx, "k-old"); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("the expired login is still there: %v", err)
	}
	if l, err := f.s.TakePendingLogin(f.ctx, "k-new"); err != nil || l.Key != "k-new" {
		f.t.Errorf("the login not yet expired: %+v, %v", l, err)
	}
}
