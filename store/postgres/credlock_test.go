package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/store/postgres"
)

// TestLockCredential: two stores on one schema (two replicas) take turns
// on one credential: the second's fn starts only after the first's ends;
// another credential does not wait; fn's error is returned; a caller that
// gives up waiting gets its context's error and its fn never runs.
func TestLockCredential(t *testing.T) {
	schema := newSchema(t)
	a, b := openStore(t, schema, nil), openStore(t, schema, nil)
	ctx := context.Background()

	inA, release := make(chan struct{}), make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		doneA <- a.LockCredential(ctx, "remote", "", func(ctx context.Context) error {
			close(inA)
			<-release
			return errors.New("from fn")
		})
	}()
	<-inA

	// Another credential: no wait.
	other := make(chan error, 1)
	go func() { other <- b.LockCredential(ctx, "remote", "alice", func(context.Context) error { return nil }) }()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("another credential: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("another credential waited on remote's lock")
	}

	// The same credential: b waits for a.
	var ran atomic.Bool
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := b.LockCredential(cctx, "remote", "", func(context.Context) error { ran.Store(true); return nil })
	cancel()
	if err == nil || ran.Load() {
		t.Fatalf("b took remote's turn while a held it (err %v, ran %t)", err, ran.Load())
	}
	waited := make(chan error, 1)
	go func() {
		waited <- b.LockCredential(ctx, "remote", "", func(context.Context) error { ran.Store(true); return nil })
	}()
	time.Sleep(200 * time.Millisecond)
	if ran.Load() {
		t.Fatal("b's fn ran before a's ended")
	}
	close(release)
	if err := <-doneA; err == nil || err.Error() != "from fn" {
		t.Errorf("a's LockCredential: %v, want fn's error", err)
	}
	if err := <-waited; err != nil || !ran.Load() {
		t.Fatalf("b after a: %v (ran %t)", err, ran.Load())
	}
}

// TestLockCredentialOneConn: with a pool of one connection fn runs
// without the lock (it could not read the row otherwise).
func TestLockCredentialOneConn(t *testing.T) {
	s := openStore(t, newSchema(t), &postgres.Options{MaxConns: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.LockCredential(ctx, "remote", "", func(ctx context.Context) error {
		_, err := s.ListCredentials(ctx, "remote")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
