package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/store"
)

var _ store.CredentialLocker = (*Store)(nil)

// LockCredential implements store.CredentialLocker with a session-level
// advisory lock on one pooled connection, held while fn runs and released
// after (fn uses other connections for the row). A connection whose
// unlock fails is closed, which releases the lock with its session: a
// replica that dies holding it holds it no longer. With a pool of one
// connection fn could not read the row while the lock holds the only
// connection, so it runs without one.
func (s *Store) LockCredential(ctx context.Context, server, caller string, fn func(ctx context.Context) error) error {
	if s.maxConns < 2 {
		return fn(ctx)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	c, err := s.pool.acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres store: credential %s/%s lock: %w", server, caller, err)
	}
	key := credLockKey(s.schema, server, caller)
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		s.pool.release(c, err)
		return fmt.Errorf("postgres store: credential %s/%s lock: %w", server, caller, err)
	}
	ferr := fn(ctx)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	var unlocked bool
	uerr := c.QueryRow(uctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&unlocked)
	cancel()
	if uerr == nil && !unlocked {
		uerr = fmt.Errorf("the advisory lock was not held")
	}
	s.pool.release(c, uerr) // closed on error: the session, and its lock, end
	return ferr
}

// credLockKey is the advisory lock's key: the first 8 bytes of a SHA-256
// of the schema, server and caller, so that stores in other schemas of
// the database, and other credentials, do not wait on each other.
func credLockKey(schema, server, caller string) int64 {
	h := sha256.New()
	fmt.Fprintf(h, "backplane upstream credential v1\x00%d:%s\x00%d:%s\x00%d:%s", len(schema), schema, len(server), server, len(caller), caller)
	return int64(binary.BigEndian.Uint64(h.Sum(nil)[:8]))
}
