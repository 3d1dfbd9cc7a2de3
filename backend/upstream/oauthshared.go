package upstream

import (
	"context"
	"errors"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// The service mode's token with a TokenStore (OAuth.Tokens): one
// credential per server, TokenKey{Server: name}, for every replica that
// shares the store (sealed in the gateway's store where secrets: is set).
//
//   - A replica without a fresh token of its own reads the store first:
//     a token another replica obtained (or a login saved) that is fresh,
//     and is not the one just refused, is used as is.
//   - Otherwise it takes the store's turn for the key (TokenLocker: on
//     PostgreSQL an advisory lock every replica waits on), reads the
//     store again inside it, and only when the token there is still not
//     usable asks the token endpoint: the client credentials grant, or a
//     refresh of the consent's refresh token. It saves the result before
//     the turn ends. The replicas that waited then find that token. So N
//     replicas whose token expired together, or were all refused it on a
//     401, make one token request, not N.
//   - A store that does not take the new token does not fail the call:
//     it is used from this process's memory (and logged).
//
// Of the client credentials grant, a stored token is used only when it
// was issued to the configured client_id: a changed client gets its own.

// shared is token with a TokenStore; t.mu is held.
func (t *oauthTransport) shared(ctx context.Context, r *authRefusal) (*oauth2.Token, error) {
	key := TokenKey{Server: t.server}
	consent := t.cfg.Grant == GrantAuthorizationCode
	st, found, err := t.stored(ctx, key)
	if err != nil {
		return nil, err
	}
	if found && t.usable(st, r) {
		t.use(st.Token)
		return st.Token, nil
	}
	if !found && consent {
		return nil, t.failNow("no token yet: an operator runs `backplane servers login %s` once", t.server)
	}
	if !consent && r == nil && t.tokenURL == "" && st.TokenURL == "" {
		return nil, nil // nothing to ask yet: the request's 401 says where
	}
	var tok *oauth2.Token
	obtain := func(ctx context.Context) error {
		st, found, err := t.stored(ctx, key)
		if err != nil {
			return err
		}
		if found && t.usable(st, r) {
			tok = st.Token // another replica's, obtained while this one waited
			return nil
		}
		if consent {
			if !found {
				return t.failNow("no token yet: an operator runs `backplane servers login %s` once", t.server)
			}
			tok, err = t.refreshStored(ctx, key, st)
			return err
		}
		if t.tokenURL == "" && st.TokenURL != "" {
			t.tokenURL = st.TokenURL // another replica's discovery; the auth style is detected
		}
		if tok, err = t.clientCredentials(ctx, r); tok == nil || err != nil {
			return err
		}
		saved := StoredToken{Token: tok, Mode: "service", Scopes: t.cfg.Scopes, ClientID: t.cfg.ClientID, TokenURL: t.tokenURL, Updated: time.Now()}
		if s, ok := tok.Extra("scope").(string); ok && s != "" {
			saved.Scopes = strings.Fields(s)
		}
		t.save(ctx, key, saved)
		return nil
	}
	if l, ok := t.cfg.Tokens.(TokenLocker); ok {
		err = l.WithTokenLock(ctx, key, obtain)
	} else {
		err = obtain(ctx)
	}
	if err != nil {
		var oe *OAuthError
		if !errors.As(err, &oe) {
			// The turn itself failed (the store, or the caller gave up):
			// not held against the next request.
			return nil, t.fail("waiting for the token's turn in the store: %v", err)
		}
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	t.use(tok)
	return tok, nil
}

// stored reads the server's token; found is false when there is none.
func (t *oauthTransport) stored(ctx context.Context, key TokenKey) (st StoredToken, found bool, err error) {
	st, err = t.cfg.Tokens.Token(ctx, key)
	if errors.Is(err, ErrNoToken) {
		return StoredToken{}, false, nil
	}
	if err != nil {
		return StoredToken{}, false, t.failNow("reading the token: %v", err)
	}
	return st, st.Token != nil && st.Token.AccessToken != "", nil
}

// usable reports whether a stored token may be sent: not the one r says
// was refused, not due to be replaced, and, of the client credentials
// grant, the configured client's.
func (t *oauthTransport) usable(st StoredToken, r *authRefusal) bool {
	if st.Token == nil || st.Token.AccessToken == "" {
		return false
	}
	if r != nil && r.tok != nil && st.Token.AccessToken == r.tok.AccessToken {
		return false
	}
	if t.cfg.Grant != GrantAuthorizationCode && st.ClientID != t.cfg.ClientID {
		return false
	}
	return time.Now().Before(replaceAt(st.Token))
}

// refreshStored refreshes the consent's token and saves the result.
func (t *oauthTransport) refreshStored(ctx context.Context, key TokenKey, st StoredToken) (*oauth2.Token, error) {
	tok, err := t.refresh(ctx, st)
	if err != nil {
		// The refresh token may have been used by a replica that does not
		// take turns with this one (a store without TokenLocker), which
		// wrote its result: one more read.
		if again, gerr := t.cfg.Tokens.Token(ctx, key); gerr == nil && again.Token != nil && st.Token != nil &&
			again.Token.AccessToken != st.Token.AccessToken {
			return again.Token, nil
		}
		return nil, err
	}
	st.Token, st.Updated = tok, time.Now()
	t.save(ctx, key, st)
	return tok, nil
}

// save writes a new token; a store that refuses it leaves it in memory.
// Another replica then obtains its own; of a consent whose refresh token
// the server rotated, that refresh is refused and names the login.
func (t *oauthTransport) save(ctx context.Context, key TokenKey, st StoredToken) {
	if err := t.cfg.Tokens.SaveToken(ctx, key, st); err != nil && t.log != nil {
		t.log.Warn("upstream oauth: the new token was not saved; it is used from memory", "server", t.server, "error", err.Error())
	}
}
