package upstream

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// ErrNoToken is what a TokenStore answers when it holds no token for a key.
var ErrNoToken = errors.New("no upstream token")

// TokenKey names one upstream credential: a server's own (Caller "", the
// service mode) or one caller's account on it (per_caller and exchange).
type TokenKey struct {
	Server string
	Caller string
}

// StoredToken is a token as a TokenStore keeps it, with what an operator
// may see of it (everything but the token text).
type StoredToken struct {
	Token   *oauth2.Token
	Mode    string   // "service", "per_caller" or "exchange"
	Scopes  []string // the scopes granted
	Subject string   // the upstream account, when the server says (never a secret)
	Updated time.Time
	// ClientID and ClientSecret are the OAuth client the token was issued
	// to when it is not the configuration's (registered at login, RFC
	// 7591): a refresh needs them. Secret: kept with the token.
	ClientID, ClientSecret string
	// TokenURL is where the token is refreshed, and RevocationURL, when
	// the authorization server has one (RFC 7009), where it is revoked:
	// found at login, so serve needs no discovery to refresh.
	TokenURL, RevocationURL string
}

// TokenStore keeps upstream OAuth tokens. The connector reads and writes
// it; an implementation shared through the gateway's store lets replicas
// share credentials, and one that seals what it writes keeps the store
// alone from yielding a usable token. Implementations are safe for
// concurrent use; Token answers ErrNoToken (wrapped or not) for a key it
// does not hold.
type TokenStore interface {
	Token(ctx context.Context, key TokenKey) (StoredToken, error)
	SaveToken(ctx context.Context, key TokenKey, tok StoredToken) error
	DeleteToken(ctx context.Context, key TokenKey) error
}

// MemoryTokens is a TokenStore in this process's memory: the default, and
// the reference the persistent implementations are tested against.
type MemoryTokens struct {
	mu sync.Mutex
	m  map[TokenKey]StoredToken
}

// Token implements TokenStore.
func (s *MemoryTokens) Token(_ context.Context, key TokenKey) (StoredToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[key]
	if !ok {
		return StoredToken{}, ErrNoToken
	}
	return t, nil
}

// SaveToken implements TokenStore.
func (s *MemoryTokens) SaveToken(_ context.Context, key TokenKey, tok StoredToken) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[TokenKey]StoredToken)
	}
	s.m[key] = tok
	return nil
}

// DeleteToken implements TokenStore.
func (s *MemoryTokens) DeleteToken(_ context.Context, key TokenKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

// TokenLocker is implemented by a TokenStore that replicas share and that
// can make them take turns on one key: WithTokenLock runs fn while no
// other replica (and no other caller in this process) runs fn for key,
// and returns fn's error. The service mode obtains or refreshes its token
// inside it, after reading the store again: replicas whose token expired
// together, or that were refused it together, ask the token endpoint once,
// and the others use what the first saved.
type TokenLocker interface {
	WithTokenLock(ctx context.Context, key TokenKey, fn func(ctx context.Context) error) error
}
