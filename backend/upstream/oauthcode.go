package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// The service mode by an operator's consent (Grant GrantAuthorizationCode):
// `backplane servers login` (Login) saved a token and its refresh token in
// the TokenStore under TokenKey{Server: name}; serve reads it there.
//
//   - A token is used until shortly before it expires (tokenEarly), then
//     refreshed with its refresh token at the endpoint Login found; the
//     new token is written back, so every replica sharing the store uses
//     it. The refresh is made in the store's turn (oauthshared.go), after
//     reading the store again: a token another replica (or a new login)
//     wrote meanwhile is used instead, so replicas refresh once.
//   - A 401 refreshes once (RoundTrip's one retry); a refresh the
//     authorization server refuses (the refresh token revoked or already
//     used by a replica that raced this one) reads the store once more,
//     then fails naming the login command.
//   - There is no other retry: the next call tries again, after failHold.

func (t *oauthTransport) failNow(format string, args ...any) error {
	t.tok = nil
	t.failed, t.failedAt = t.fail(format, args...), time.Now()
	return t.failed
}

// use caches tok until it is to be replaced.
func (t *oauthTransport) use(tok *oauth2.Token) {
	t.failed = nil
	t.tok = tok
	t.replace = replaceAt(tok)
}

// replaceAt is when tok is to be replaced: tokenEarly before it expires,
// or halfway through a shorter life; never, without an expiry (until a 401).
func replaceAt(tok *oauth2.Token) time.Time {
	if tok.Expiry.IsZero() {
		return time.Now().Add(100 * 365 * 24 * time.Hour)
	}
	life := time.Until(tok.Expiry)
	return tok.Expiry.Add(-min(tokenEarly, life/2))
}

// refresh uses st's refresh token at its token endpoint, with resource set
// (RFC 8707: x/oauth2's refresh request carries no extra parameters, so a
// transport adds it).
func (t *oauthTransport) refresh(ctx context.Context, st StoredToken) (*oauth2.Token, error) {
	if st.Token == nil || st.Token.RefreshToken == "" {
		return nil, t.failNow("the token expired or was refused and there is no refresh token: run `backplane servers login %s` again", t.server)
	}
	if st.TokenURL == "" {
		return nil, t.failNow("the saved token names no token endpoint: run `backplane servers login %s` again", t.server)
	}
	cfg := t.clientConfig(st)
	hc := &http.Client{Transport: &resourceParam{base: t.base, tokenURL: st.TokenURL, resource: t.url}, Timeout: time.Minute}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	old := &oauth2.Token{RefreshToken: st.Token.RefreshToken, Expiry: time.Unix(1, 0)} // expired: refresh now
	tok, err := cfg.TokenSource(ctx, old).Token()
	if err == nil && tok.AccessToken == "" {
		err = errors.New("an answer without an access token")
	}
	if err != nil {
		return nil, t.failNow("refreshing the token at %s: %s; run `backplane servers login %s` if the consent was revoked", st.TokenURL, describeTokenError(err), t.server)
	}
	if tok.RefreshToken == "" { // not rotated: the old one stays valid
		tok.RefreshToken = st.Token.RefreshToken
	}
	return tok, nil
}

// clientConfig is the OAuth client a saved token belongs to: the one
// registered at login, else the configuration's.
func (t *oauthTransport) clientConfig(st StoredToken) *oauth2.Config {
	id, secret := st.ClientID, st.ClientSecret
	if id == "" {
		id, secret = t.cfg.ClientID, t.cfg.ClientSecret
	}
	style := oauth2.AuthStyleAutoDetect
	if secret == "" {
		style = oauth2.AuthStyleInParams // a public client sends its id in the form
	}
	return &oauth2.Config{ClientID: id, ClientSecret: secret, Endpoint: oauth2.Endpoint{TokenURL: st.TokenURL, AuthStyle: style}}
}

// resourceParam adds resource to the form of the refresh requests sent to
// tokenURL that do not carry one.
type resourceParam struct {
	base     http.RoundTripper
	tokenURL string
	resource string
}

func (p *resourceParam) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.URL.String() != p.tokenURL || req.Body == nil {
		return p.base.RoundTrip(req)
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(b))
	if err == nil && form.Get("resource") == "" && form.Get("grant_type") == "refresh_token" {
		form.Set("resource", p.resource)
		b = []byte(form.Encode())
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.ContentLength = int64(len(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return p.base.RoundTrip(req)
}

// insufficientScope is the error for a 403 whose challenge says
// insufficient_scope (RFC 6750 section 3.1, the MCP step-up): the gateway's
// own credential lacks a scope, which only an operator can grant. It is
// nil for any other 403, which passes through.
func (t *oauthTransport) insufficientScope(resp *http.Response) error {
	_, what, ok := scopeDemand(resp)
	if !ok {
		return nil
	}
	if t.cfg.Grant == GrantAuthorizationCode {
		return t.fail("the server needs %s (insufficient_scope): add it to auth.oauth.scopes and run `backplane servers login %s` again", what, t.server)
	}
	return t.fail("the server needs %s (insufficient_scope): add it to auth.oauth.scopes (and grant it to client %s)", what, t.cfg.ClientID)
}

// scopeDemand reads a 403's insufficient_scope challenge (RFC 6750
// section 3.1): the scope it demands, space-separated ("" when it names
// none), and the same said for an error message. ok is false for a 403
// without one.
func scopeDemand(resp *http.Response) (scope, what string, ok bool) {
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return "", "", false
	}
	for _, c := range cs {
		if c.Scheme != "bearer" || c.Params["error"] != "insufficient_scope" {
			continue
		}
		scope = strings.Join(strings.Fields(c.Params["scope"]), " ")
		what = "more scope"
		if scope != "" {
			what = "scope " + quoteScope(scope)
		}
		return scope, what, true
	}
	return "", "", false
}

// quoteScope keeps a server's scope text printable and short.
func quoteScope(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
