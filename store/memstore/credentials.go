package memstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/agentbackplane/backplane/store"
)

func cloneCred(c store.Credential) store.Credential {
	c.Scopes = slices.Clone(c.Scopes)
	c.Sealed = bytes.Clone(c.Sealed)
	return c
}

// PutCredential inserts or replaces c (with prev, only while it is the row's).
func (s *Store) PutCredential(ctx context.Context, c *store.Credential, prev []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{c.Server, c.Caller}
	if prev != nil {
		cur, ok := s.creds[k]
		if !ok {
			return fmt.Errorf("credential %s/%s: %w", c.Server, c.Caller, store.ErrNotFound)
		}
		if !bytes.Equal(cur.Sealed, prev) {
			return fmt.Errorf("credential %s/%s: %w", c.Server, c.Caller, store.ErrCredentialChanged)
		}
	}
	s.creds[k] = cloneCred(*c)
	return nil
}

// GetCredential returns the row of (server, caller), or ErrNotFound.
func (s *Store) GetCredential(ctx context.Context, server, caller string) (*store.Credential, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.creds[[2]string{server, caller}]
	if !ok {
		return nil, fmt.Errorf("credential %s/%s: %w", server, caller, store.ErrNotFound)
	}
	c = cloneCred(c)
	return &c, nil
}

// ListCredentials lists server's rows ("" for all), by server then caller.
func (s *Store) ListCredentials(ctx context.Context, server string) ([]store.Credential, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Credential
	for _, c := range s.creds {
		if server == "" || c.Server == server {
			out = append(out, cloneCred(c))
		}
	}
	slices.SortFunc(out, func(a, b store.Credential) int {
		return cmp.Or(cmp.Compare(a.Server, b.Server), cmp.Compare(a.Caller, b.Caller))
	})
	return out, nil
}

// DeleteCredential deletes the row of (server, caller).
func (s *Store) DeleteCredential(ctx context.Context, server, caller string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{server, caller}
	if _, ok := s.creds[k]; !ok {
		return fmt.Errorf("credential %s/%s: %w", server, caller, store.ErrNotFound)
	}
	delete(s.creds, k)
	return nil
}
