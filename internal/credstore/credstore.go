// Package credstore keeps upstream OAuth tokens in the gateway's store,
// sealed: an upstream.TokenStore over store.Credentials, the token and
// refresh token (and a client registered at login) sealed by a
// secrets.Sealer with the row's server and caller as associated data, so
// a sealed token copied to another row does not open, and the store alone
// (a dump, a backup, a replica's database) never yields a usable token.
// What an operator may see (mode, scopes, subject, expiry, when it
// changed) stays plain beside it. Every replica on one store shares the
// tokens: one replica's refresh is the others' next read.
//
// Logins (logins.go) is the same for the per_caller logins in progress,
// an upstream.LoginStore over store.PendingLogins: a login begun at one
// replica completes at any replica's callback, once.
package credstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/internal/secrets"
	"github.com/agentbackplane/backplane/store"
)

// Tokens is the sealed upstream.TokenStore. It is safe for concurrent use.
type Tokens struct {
	creds  store.Credentials
	sealer *secrets.Sealer
	now    func() time.Time

	mu    sync.Mutex
	turns map[upstream.TokenKey]chan struct{} // this process's turns, by key
}

var (
	_ upstream.TokenStore  = (*Tokens)(nil)
	_ upstream.TokenLocker = (*Tokens)(nil)
)

// New makes the TokenStore over creds, sealing with sealer.
func New(creds store.Credentials, sealer *secrets.Sealer) *Tokens {
	return &Tokens{creds: creds, sealer: sealer, now: time.Now}
}

// sealed is what is sealed: the secrets of a StoredToken.
type sealed struct {
	AccessToken   string    `json:"access_token"`
	TokenType     string    `json:"token_type,omitempty"`
	RefreshToken  string    `json:"refresh_token,omitempty"`
	Expiry        time.Time `json:"expiry,omitzero"`
	ClientID      string    `json:"client_id,omitempty"`
	ClientSecret  string    `json:"client_secret,omitempty"`
	TokenURL      string    `json:"token_url,omitempty"`
	RevocationURL string    `json:"revocation_url,omitempty"`
}

// ad binds a sealed token to its row.
func ad(server, caller string) []byte {
	b := []byte("backplane upstream token v1\x00")
	b = fmt.Appendf(b, "%d:%s\x00%d:%s", len(server), server, len(caller), caller)
	return b
}

// Token implements upstream.TokenStore: upstream.ErrNoToken when the row
// is absent; an error naming the row (never the token) when it does not
// open (changed, moved, or sealed with a key no longer configured).
func (t *Tokens) Token(ctx context.Context, key upstream.TokenKey) (upstream.StoredToken, error) {
	c, err := t.creds.GetCredential(ctx, key.Server, key.Caller)
	if errors.Is(err, store.ErrNotFound) {
		return upstream.StoredToken{}, fmt.Errorf("%w for %s", upstream.ErrNoToken, describe(key))
	}
	if err != nil {
		return upstream.StoredToken{}, err
	}
	return t.open(c)
}

func (t *Tokens) open(c *store.Credential) (upstream.StoredToken, error) {
	pt, err := t.sealer.Open(c.Sealed, ad(c.Server, c.Caller))
	if err != nil {
		return upstream.StoredToken{}, fmt.Errorf("upstream token for %s: %w", describe(upstream.TokenKey{Server: c.Server, Caller: c.Caller}), err)
	}
	var s sealed
	if err := json.Unmarshal(pt, &s); err != nil {
		return upstream.StoredToken{}, fmt.Errorf("upstream token for %s: %w", describe(upstream.TokenKey{Server: c.Server, Caller: c.Caller}), secrets.ErrCorrupt)
	}
	return upstream.StoredToken{
		Token: &oauth2.Token{AccessToken: s.AccessToken, TokenType: s.TokenType, RefreshToken: s.RefreshToken, Expiry: s.Expiry},
		Mode:  c.Mode, Scopes: c.Scopes, Subject: c.Subject, Updated: c.Updated,
		ClientID: s.ClientID, ClientSecret: s.ClientSecret, TokenURL: s.TokenURL, RevocationURL: s.RevocationURL,
	}, nil
}

// SaveToken implements upstream.TokenStore.
func (t *Tokens) SaveToken(ctx context.Context, key upstream.TokenKey, tok upstream.StoredToken) error {
	if tok.Token == nil || tok.Token.AccessToken == "" {
		return fmt.Errorf("upstream token for %s: no access token to save", describe(key))
	}
	pt, err := json.Marshal(sealed{
		AccessToken: tok.Token.AccessToken, TokenType: tok.Token.TokenType, RefreshToken: tok.Token.RefreshToken, Expiry: tok.Token.Expiry,
		ClientID: tok.ClientID, ClientSecret: tok.ClientSecret, TokenURL: tok.TokenURL, RevocationURL: tok.RevocationURL,
	})
	if err != nil {
		return err
	}
	sl, err := t.sealer.Seal(pt, ad(key.Server, key.Caller))
	if err != nil {
		return err
	}
	updated := tok.Updated
	if updated.IsZero() {
		updated = t.now()
	}
	return t.creds.PutCredential(ctx, &store.Credential{
		Server: key.Server, Caller: key.Caller, Mode: tok.Mode, Scopes: tok.Scopes, Subject: tok.Subject,
		Expiry: tok.Token.Expiry, Updated: updated.UTC(), Sealed: sl,
	}, nil)
}

// DeleteToken implements upstream.TokenStore; deleting what is absent is
// not an error.
func (t *Tokens) DeleteToken(ctx context.Context, key upstream.TokenKey) error {
	err := t.creds.DeleteCredential(ctx, key.Server, key.Caller)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// Reseal seals again with the first key every row sealed with another,
// each replaced only while it is the row read (a token a replica refreshed
// meanwhile is already sealed with the key that replica seals with). It
// returns how many rows it re-sealed and the first row that did not open.
func (t *Tokens) Reseal(ctx context.Context) (n int, err error) {
	rows, err := t.creds.ListCredentials(ctx, "")
	if err != nil {
		return 0, err
	}
	for _, c := range rows {
		if t.sealer.Current(c.Sealed) {
			continue
		}
		a := ad(c.Server, c.Caller)
		pt, oerr := t.sealer.Open(c.Sealed, a)
		if oerr != nil {
			if err == nil {
				err = fmt.Errorf("upstream token for %s: %w", describe(upstream.TokenKey{Server: c.Server, Caller: c.Caller}), oerr)
			}
			continue
		}
		sl, serr := t.sealer.Seal(pt, a)
		if serr != nil {
			return n, serr
		}
		prev := c.Sealed
		c.Sealed = sl
		switch perr := t.creds.PutCredential(ctx, &c, prev); {
		case perr == nil:
			n++
		case errors.Is(perr, store.ErrCredentialChanged), errors.Is(perr, store.ErrNotFound):
			// Rewritten or revoked meanwhile: nothing left to re-seal.
		default:
			return n, perr
		}
	}
	return n, err
}

// WithTokenLock implements upstream.TokenLocker: fn runs in this
// process's turn for key, and, when the store can make its replicas take
// turns (store.CredentialLocker: PostgreSQL's advisory lock), in the
// replicas' turn too. Without that (SQLite, memory) each process takes
// turns only with itself. The process's turn is taken first, so a process
// holds at most one of the store's turns (and one connection) per key.
func (t *Tokens) WithTokenLock(ctx context.Context, key upstream.TokenKey, fn func(ctx context.Context) error) error {
	t.mu.Lock()
	if t.turns == nil {
		t.turns = map[upstream.TokenKey]chan struct{}{}
	}
	turn, ok := t.turns[key]
	if !ok {
		turn = make(chan struct{}, 1)
		t.turns[key] = turn
	}
	t.mu.Unlock()
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-turn }()
	if l, ok := t.creds.(store.CredentialLocker); ok {
		return l.LockCredential(ctx, key.Server, key.Caller, fn)
	}
	return fn(ctx)
}

func describe(k upstream.TokenKey) string {
	if k.Caller == "" {
		return "server " + k.Server
	}
	return "server " + k.Server + ", caller " + k.Caller
}
