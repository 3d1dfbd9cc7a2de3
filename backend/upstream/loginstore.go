package upstream

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// PendingLogin is a caller's login to a per_caller server in progress, as
// a LoginStore keeps it: what the callback needs to complete it, in
// whichever process it lands. Verifier, the state inside URL and
// ClientSecret are secrets.
type PendingLogin struct {
	Server, Caller string
	// Scopes are the scopes asked for: the configuration's, and on a step-up
	// those the caller's token held and those the server demanded.
	Scopes        []string
	Verifier      string // the PKCE verifier (S256)
	URL           string // the authorization URL, given again on every retry
	ElicitationID string // the id of the URL-mode elicitation that carries URL
	// The client and the endpoint the code is redeemed with: a client
	// registered (RFC 7591) by the process that began the login is known
	// to that process only.
	ClientID, ClientSecret string
	TokenURL               string
	// Redirect is the redirect URI the authorization URL names, which the
	// code's redemption must repeat.
	Redirect string
	// Issuer is the authorization server's, and IssRequired says its
	// metadata promises iss on the redirect (RFC 9207).
	Issuer      string
	IssRequired bool
	Created     time.Time
	Expires     time.Time
}

// LoginStore keeps the logins in progress. An implementation shared
// through the gateway's store lets the callback reach any replica (package
// internal/credstore seals the secrets there). Implementations are safe
// for concurrent use.
type LoginStore interface {
	// AddLogin keeps p under state. With max > 0 it refuses, with
	// ErrTooManyLogins, a login whose caller already has max not expired
	// (on every server).
	AddLogin(ctx context.Context, state string, p PendingLogin, max int) error
	// Logins are the caller's logins on server not expired, oldest first.
	Logins(ctx context.Context, server, caller string) ([]PendingLogin, error)
	// TakeLogin removes the login of state and returns it, expired or not:
	// once. ErrNoLogin (wrapped or not) when there is none: already taken,
	// expired and swept, or never made.
	TakeLogin(ctx context.Context, state string) (PendingLogin, error)
}

// ErrNoLogin is TakeLogin's answer for a state it does not hold.
var ErrNoLogin = errors.New("no login in progress for this state")

// ErrTooManyLogins is AddLogin's refusal of a caller at the cap.
var ErrTooManyLogins = errors.New("too many logins in progress")

// MemoryLogins is a LoginStore in this process's memory: the default (a
// callback then has to reach the process that began the login).
type MemoryLogins struct {
	mu sync.Mutex
	m  map[string]PendingLogin
}

// AddLogin implements LoginStore.
func (s *MemoryLogins) AddLogin(_ context.Context, state string, p PendingLogin, max int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]PendingLogin{}
	}
	if _, ok := s.m[state]; ok {
		return errors.New("a login with this state is in progress")
	}
	now, n := time.Now(), 0
	for k, l := range s.m {
		switch {
		case !now.Before(l.Expires):
			delete(s.m, k)
		case l.Caller == p.Caller:
			n++
		}
	}
	if max > 0 && n >= max {
		return ErrTooManyLogins
	}
	p.Scopes = slices.Clone(p.Scopes)
	s.m[state] = p
	return nil
}

// Logins implements LoginStore.
func (s *MemoryLogins) Logins(_ context.Context, server, caller string) ([]PendingLogin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []PendingLogin
	for _, l := range s.m {
		if l.Server == server && l.Caller == caller && now.Before(l.Expires) {
			l.Scopes = slices.Clone(l.Scopes)
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b PendingLogin) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// TakeLogin implements LoginStore.
func (s *MemoryLogins) TakeLogin(_ context.Context, state string) (PendingLogin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.m[state]
	if !ok {
		return PendingLogin{}, ErrNoLogin
	}
	delete(s.m, state)
	return l, nil
}
