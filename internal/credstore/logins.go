package credstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/internal/secrets"
	"github.com/agentbackplane/backplane/store"
)

// Logins is the sealed upstream.LoginStore over store.PendingLogins: the
// per_caller logins in progress, shared by every replica on the store, so
// that the authorization server's redirect may reach any of them. A row
// is found by the SHA-256 of its state, and its secrets (the PKCE
// verifier, the authorization URL, which holds the state, and the client)
// are sealed with the row's key, server and caller as associated data:
// the store alone neither completes a login nor yields a state to replay.
// Safe for concurrent use.
type Logins struct {
	rows   store.PendingLogins
	sealer *secrets.Sealer
	now    func() time.Time
}

var _ upstream.LoginStore = (*Logins)(nil)

// NewLogins makes the LoginStore over rows, sealing with sealer.
func NewLogins(rows store.PendingLogins, sealer *secrets.Sealer) *Logins {
	return &Logins{rows: rows, sealer: sealer, now: time.Now}
}

// sealedLogin is what is sealed of a PendingLogin.
type sealedLogin struct {
	Verifier      string `json:"verifier"`
	URL           string `json:"url"`
	ElicitationID string `json:"elicitation_id"`
	ClientID      string `json:"client_id,omitempty"`
	ClientSecret  string `json:"client_secret,omitempty"`
	TokenURL      string `json:"token_url"`
	Redirect      string `json:"redirect"`
	Issuer        string `json:"issuer,omitempty"`
	IssRequired   bool   `json:"iss_required,omitempty"`
}

// stateKey is the row's key: a digest of the state, never the state.
func stateKey(state string) string {
	h := sha256.Sum256([]byte("backplane pending login v1\x00" + state))
	return hex.EncodeToString(h[:])
}

func loginAD(key, server, caller string) []byte {
	b := []byte("backplane pending login v1\x00")
	return fmt.Appendf(b, "%d:%s\x00%d:%s\x00%d:%s", len(key), key, len(server), server, len(caller), caller)
}

// AddLogin implements upstream.LoginStore.
func (l *Logins) AddLogin(ctx context.Context, state string, p upstream.PendingLogin, max int) error {
	if state == "" {
		return errors.New("pending login: no state")
	}
	pt, err := json.Marshal(sealedLogin{
		Verifier: p.Verifier, URL: p.URL, ElicitationID: p.ElicitationID, ClientID: p.ClientID, ClientSecret: p.ClientSecret,
		TokenURL: p.TokenURL, Redirect: p.Redirect, Issuer: p.Issuer, IssRequired: p.IssRequired,
	})
	if err != nil {
		return err
	}
	k := stateKey(state)
	sl, err := l.sealer.Seal(pt, loginAD(k, p.Server, p.Caller))
	if err != nil {
		return err
	}
	created := p.Created
	if created.IsZero() {
		created = l.now()
	}
	err = l.rows.AddPendingLogin(ctx, &store.PendingLogin{
		Key: k, Server: p.Server, Caller: p.Caller, Scopes: p.Scopes, Created: created.UTC(), Expires: p.Expires.UTC(), Sealed: sl,
	}, l.now(), max)
	if errors.Is(err, store.ErrTooManyLogins) {
		return fmt.Errorf("%w: %w", upstream.ErrTooManyLogins, err)
	}
	return err
}

// Logins implements upstream.LoginStore. A row that does not open (sealed
// with a key no longer configured, or altered) is left out: it cannot be
// completed, and it expires.
func (l *Logins) Logins(ctx context.Context, server, caller string) ([]upstream.PendingLogin, error) {
	rows, err := l.rows.ListPendingLogins(ctx, server, caller, l.now())
	if err != nil {
		return nil, err
	}
	var out []upstream.PendingLogin
	for _, r := range rows {
		if p, err := l.open(&r); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// TakeLogin implements upstream.LoginStore: the row is deleted before it
// is opened, so a state is used once even when its row does not open.
func (l *Logins) TakeLogin(ctx context.Context, state string) (upstream.PendingLogin, error) {
	if state == "" {
		return upstream.PendingLogin{}, upstream.ErrNoLogin
	}
	r, err := l.rows.TakePendingLogin(ctx, stateKey(state))
	if errors.Is(err, store.ErrNotFound) {
		return upstream.PendingLogin{}, upstream.ErrNoLogin
	}
	if err != nil {
		return upstream.PendingLogin{}, err
	}
	p, err := l.open(r)
	if err != nil {
		// Taken, and unusable (sealed with a key no longer configured, or
		// altered): for the callback, as good as gone.
		return upstream.PendingLogin{}, fmt.Errorf("%w: %w", upstream.ErrNoLogin, err)
	}
	return p, nil
}

func (l *Logins) open(r *store.PendingLogin) (upstream.PendingLogin, error) {
	pt, err := l.sealer.Open(r.Sealed, loginAD(r.Key, r.Server, r.Caller))
	if err != nil {
		return upstream.PendingLogin{}, fmt.Errorf("pending login of server %s, caller %s: %w", r.Server, r.Caller, err)
	}
	var s sealedLogin
	if err := json.Unmarshal(pt, &s); err != nil {
		return upstream.PendingLogin{}, fmt.Errorf("pending login of server %s, caller %s: %w", r.Server, r.Caller, secrets.ErrCorrupt)
	}
	return upstream.PendingLogin{
		Server: r.Server, Caller: r.Caller, Scopes: r.Scopes, Verifier: s.Verifier, URL: s.URL, ElicitationID: s.ElicitationID,
		ClientID: s.ClientID, ClientSecret: s.ClientSecret, TokenURL: s.TokenURL, Redirect: s.Redirect,
		Issuer: s.Issuer, IssRequired: s.IssRequired, Created: r.Created, Expires: r.Expires,
	}, nil
}
