package store

import (
	"context"
	"errors"
	"time"
)

// PendingLogin is a caller's login to an upstream server in progress (an
// OAuth authorization code flow the gateway started and its callback has
// not completed), kept in the store so that the callback may reach any
// replica. Its secrets (the PKCE verifier, the state inside the
// authorization URL, the client) are in Sealed, sealed by the gateway;
// the row is found by Key, a digest of the state, so the store alone
// neither completes a login nor yields the state.
type PendingLogin struct {
	Key    string `json:"-"` // a digest of the flow's state: unique
	Server string `json:"server"`
	Caller string `json:"caller"`
	// Scopes are the scopes the login asks for (plain: an operator may see
	// them).
	Scopes  []string  `json:"scopes,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	Sealed  []byte    `json:"-"`
}

// PendingLogins keeps the logins in progress, shared by every replica of
// a store.
type PendingLogins interface {
	// AddPendingLogin inserts l, after deleting every login expired at
	// now (of every caller). With max > 0 it refuses, with
	// ErrTooManyLogins and writing nothing, a login whose caller already
	// has max logins not expired at now (on every server): the check and
	// the insert are one atomic step, whatever the replicas do meanwhile.
	// A Key already present is an error, and changes nothing.
	AddPendingLogin(ctx context.Context, l *PendingLogin, now time.Time, max int) error
	// ListPendingLogins lists the caller's logins on server not expired at
	// now, oldest first.
	ListPendingLogins(ctx context.Context, server, caller string, now time.Time) ([]PendingLogin, error)
	// TakePendingLogin deletes the login of key and returns it, expired or
	// not (the caller says which): of concurrent takers of one key, one
	// gets it and the others ErrNotFound, as does a taker of a key used
	// already or never added.
	TakePendingLogin(ctx context.Context, key string) (*PendingLogin, error)
}

// ErrTooManyLogins is AddPendingLogin's refusal of a caller with too many
// logins in progress.
var ErrTooManyLogins = errors.New("too many logins in progress")
