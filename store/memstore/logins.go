package memstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentbackplane/backplane/store"
)

func cloneLogin(l store.PendingLogin) store.PendingLogin {
	l.Scopes = slices.Clone(l.Scopes)
	l.Sealed = bytes.Clone(l.Sealed)
	return l
}

// AddPendingLogin inserts l after deleting the expired logins; with max,
// only while the caller has fewer than max.
func (s *Store) AddPendingLogin(ctx context.Context, l *store.PendingLogin, now time.Time, max int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.logins[l.Key]; ok {
		return errors.New("memstore: pending login: key already present")
	}
	n := 0
	for k, p := range s.logins {
		switch {
		case !now.Before(p.Expires):
			delete(s.logins, k)
		case p.Caller == l.Caller:
			n++
		}
	}
	if max > 0 && n >= max {
		return fmt.Errorf("caller %s has %d: %w", l.Caller, n, store.ErrTooManyLogins)
	}
	s.logins[l.Key] = cloneLogin(*l)
	return nil
}

// ListPendingLogins lists the caller's logins on server not expired at
// now, oldest first.
func (s *Store) ListPendingLogins(ctx context.Context, server, caller string, now time.Time) ([]store.PendingLogin, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.PendingLogin
	for _, p := range s.logins {
		if p.Server == server && p.Caller == caller && now.Before(p.Expires) {
			out = append(out, cloneLogin(p))
		}
	}
	slices.SortFunc(out, func(a, b store.PendingLogin) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

// TakePendingLogin deletes the login of key and returns it.
func (s *Store) TakePendingLogin(ctx context.Context, key string) (*store.PendingLogin, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.logins[key]
	if !ok {
		return nil, fmt.Errorf("pending login: %w", store.ErrNotFound)
	}
	delete(s.logins, key)
	p = cloneLogin(p)
	return &p, nil
}
