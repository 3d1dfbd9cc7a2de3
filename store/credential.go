package store

import (
	"context"
	"errors"
	"time"
)

// Credential is an upstream OAuth credential as a store keeps it: plain
// metadata an operator may see (who is connected to which server, how,
// with which scopes, until when) beside the token sealed by the gateway
// (package internal/secrets). The store never holds a key: Sealed alone
// yields no usable token.
type Credential struct {
	Server string `json:"server"`
	// Caller is the caller whose account this is; "" is the server's own
	// credential (service mode).
	Caller  string    `json:"caller,omitempty"`
	Mode    string    `json:"mode"` // service, per_caller or exchange
	Scopes  []string  `json:"scopes,omitempty"`
	Subject string    `json:"subject,omitempty"` // the upstream account, when known
	Expiry  time.Time `json:"expiry,omitzero"`   // of the access token; zero: none given
	Updated time.Time `json:"updated"`
	// Sealed is the sealed token (never shown, never logged).
	Sealed []byte `json:"-"`
}

// Credentials keeps upstream credentials, one per (server, caller): shared
// by every replica of a store, so a token one obtains or refreshes is the
// others' too.
type Credentials interface {
	// PutCredential inserts c, or replaces the row of (c.Server, c.Caller).
	// With prev not nil the row is replaced only while its Sealed is prev
	// (ErrCredentialChanged otherwise, and ErrNotFound when it is gone): a
	// re-seal or a refresh does not overwrite a token another replica
	// wrote meanwhile.
	PutCredential(ctx context.Context, c *Credential, prev []byte) error
	// GetCredential returns the row of (server, caller), or ErrNotFound.
	GetCredential(ctx context.Context, server, caller string) (*Credential, error)
	// ListCredentials lists the rows of server ("" for every server), by
	// server then caller.
	ListCredentials(ctx context.Context, server string) ([]Credential, error)
	// DeleteCredential deletes the row of (server, caller); ErrNotFound
	// when there is none.
	DeleteCredential(ctx context.Context, server, caller string) error
}

// ErrCredentialChanged is PutCredential's refusal to replace a row that
// changed since it was read.
var ErrCredentialChanged = errors.New("credential changed since it was read")

// CredentialLocker is implemented by stores whose replicas can take turns
// on one credential (PostgreSQL: an advisory lock). LockCredential runs fn
// while no other replica of the store runs fn for (server, caller), and
// returns fn's error; it waits for its turn as long as ctx allows. The
// gateway reads the row again inside fn before it asks an authorization
// server for a token, so replicas whose token expired together ask once:
// the others find the one the first wrote. A store without it leaves each
// process to take turns only with itself.
type CredentialLocker interface {
	LockCredential(ctx context.Context, server, caller string, fn func(ctx context.Context) error) error
}
