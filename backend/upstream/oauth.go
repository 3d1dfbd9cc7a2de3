package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// OAuth is how a URL server is authenticated with OAuth: in service mode,
// the gateway's own credential, from the client credentials grant. The
// token endpoint is TokenURL, or, when it is empty, discovered when the
// server first answers 401: its protected resource metadata (RFC 9728:
// the challenge's resource_metadata, else the .well-known fallbacks), then
// its authorization server's metadata (RFC 8414, OIDC discovery), with the
// SDK's helpers. Every token request carries resource=Server.URL (RFC
// 8707). ClientSecret is a secret: never logged, never in an error.
//
// With Grant GrantAuthorizationCode the credential is an operator's
// one-time consent instead (Login, `backplane servers login`): the token
// and its refresh token are read from Tokens, refreshed before they
// expire and once on a 401, and written back (oauthcode.go).
type OAuth struct {
	// Mode is OAuthModeService ("" means it), OAuthModePerCaller or
	// OAuthModeExchange (percaller.go, with PerCaller's settings).
	Mode      string
	PerCaller CallerOAuth
	// Grant is GrantClientCredentials ("" means it) or GrantAuthorizationCode.
	Grant        string
	ClientID     string
	ClientSecret string
	// ClientIDMetadataURL is the gateway's client ID metadata document,
	// used at login where the authorization server supports them.
	ClientIDMetadataURL string
	Scopes              []string
	TokenURL            string
	// Tokens is where the tokens are kept (nil: this process's memory,
	// which an authorization code grant cannot use: its consent must
	// outlive the login command).
	Tokens TokenStore
}

// The grants of the service mode.
const (
	GrantClientCredentials = "client_credentials"
	GrantAuthorizationCode = "authorization_code"
)

// CredentialModeService is the credential mode the audit records for a
// call to a server with OAuth set (Upstream.CredentialMode).
const CredentialModeService = "oauth_service"

// tokenEarly is how long before its expiry a token is replaced, at most:
// never more than half the token's lifetime, so a short-lived token is
// still used for a while.
const tokenEarly = 30 * time.Second

// oauthTransport sets the Authorization header of every request to a URL
// server with OAuth set, from a token it caches and replaces before it
// expires, and once on a 401. It lives as long as the Upstream: the token
// survives reconnections. It sits under tapTransport, so a request it
// retries is followed once by the wire, and a final 401 makes the tap mark
// the request refused: nothing ran (exchange.markRefused).
type oauthTransport struct {
	base   http.RoundTripper // carries the upstream's, the metadata's and the token endpoint's requests
	server string
	cfg    OAuth
	url    string       // the upstream's URL: the resource
	log    *slog.Logger // the operational log (nil: none); never given a token

	mu       sync.Mutex
	tokenURL string // TokenURL or discovered; "" until then
	// style is how the client authenticates at the token endpoint: as its
	// metadata says, else x/oauth2's auto-detection (Basic, then the form:
	// two requests when the first is refused).
	style   oauth2.AuthStyle
	tok     *oauth2.Token
	replace time.Time // when tok is to be replaced
	// The last refusal of the token endpoint, given again for a while
	// instead of asking again: a wrong secret must not turn every call
	// and reconnection into a token request.
	failed   error
	failedAt time.Time
}

// failHold is how long a refusal of the token endpoint is given again.
const failHold = time.Second

func newOAuthTransport(base http.RoundTripper, server, resource string, cfg OAuth) *oauthTransport {
	return &oauthTransport{base: base, server: server, cfg: cfg, url: resource, tokenURL: cfg.TokenURL}
}

// OAuthError is a failure to obtain a token for an upstream: it names the
// server and never holds a secret or a token.
type OAuthError struct {
	Server string
	Msg    string
}

func (e *OAuthError) Error() string { return "upstream " + e.Server + ": oauth: " + e.Msg }

func (t *oauthTransport) fail(format string, args ...any) error {
	return &OAuthError{Server: t.server, Msg: fmt.Sprintf(format, args...)}
}

func (t *oauthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := t.token(req.Context(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := t.base.RoundTrip(authorized(req, tok))
	if err == nil && resp.StatusCode == http.StatusForbidden {
		if err := t.insufficientScope(resp); err != nil {
			drain(resp)
			return nil, err
		}
	}
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	// A 401 is the server's refusal before it ran anything: the token was
	// missing, expired or revoked. One new token and one retry, never more
	// (a server that refuses every token must not be hammered); a body the
	// request cannot give again is not retried.
	if req.Body != nil && req.GetBody == nil {
		return resp, nil
	}
	challenge := resp.Header.Values("WWW-Authenticate")
	drain(resp)
	tok2, err := t.token(req.Context(), &authRefusal{tok: tok, challenge: challenge})
	if err != nil {
		return nil, err
	}
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		if retry.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	return t.base.RoundTrip(authorized(retry, tok2))
}

func authorized(req *http.Request, tok *oauth2.Token) *http.Request {
	if tok == nil {
		return req
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	return req
}

func drain(resp *http.Response) {
	buf := make([]byte, 4096)
	for range 16 { // a little, so the connection can be reused; not a flood
		if _, err := resp.Body.Read(buf); err != nil {
			break
		}
	}
	resp.Body.Close()
}

// authRefusal is a 401 answered to a request that carried tok (nil: none).
type authRefusal struct {
	tok       *oauth2.Token
	challenge []string
}

// token returns the token to send: the cached one while it is fresh, else
// a new one. Before the token endpoint is known (no token_url, nothing
// discovered yet, nothing in the store) it returns nil, and the request
// goes without one: its 401 says where the metadata is. After a refusal
// the token that was refused is replaced, once: a request that carried an
// older token than the cached one just uses the cached one (concurrent
// 401s fetch one token, not one each).
//
// The lock is held across discovery and the token request on purpose:
// requests that need a token wait for the one being fetched rather than
// each asking the endpoint (each request bounded by its own context and
// the clients' one-minute timeout). With a TokenStore (oauthshared.go)
// the token is the store's, which replicas share, and is obtained in the
// store's turn, so replicas do the same among themselves.
func (t *oauthTransport) token(ctx context.Context, r *authRefusal) (*oauth2.Token, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r != nil && t.tok != nil && t.tok != r.tok {
		return t.tok, nil
	}
	if r == nil && t.tok != nil && time.Now().Before(t.replace) {
		return t.tok, nil
	}
	if t.failed != nil && time.Since(t.failedAt) < failHold {
		return nil, t.failed
	}
	if t.cfg.Tokens != nil {
		return t.shared(ctx, r)
	}
	// This process's own token (no store: the client credentials grant
	// only, as Connect refuses an authorization code grant without one).
	tok, err := t.clientCredentials(ctx, r)
	if tok == nil || err != nil {
		return nil, err
	}
	t.use(tok)
	return tok, nil
}

// clientCredentials asks the token endpoint for a token by the client
// credentials grant, discovering the endpoint first from r's challenge
// when it is not known; nil, nil when it is not known and there is no
// challenge to discover it from. t.mu is held.
func (t *oauthTransport) clientCredentials(ctx context.Context, r *authRefusal) (*oauth2.Token, error) {
	if t.tokenURL == "" {
		if r == nil {
			return nil, nil
		}
		asm, err := t.discover(ctx, r)
		if err != nil {
			return nil, err
		}
		t.tokenURL, t.style = asm.TokenEndpoint, authStyle(asm.TokenEndpointAuthMethodsSupported)
	}
	cc := clientcredentials.Config{
		ClientID: t.cfg.ClientID, ClientSecret: t.cfg.ClientSecret,
		TokenURL: t.tokenURL, Scopes: t.cfg.Scopes,
		EndpointParams: url.Values{"resource": {t.url}}, // RFC 8707
		AuthStyle:      t.style,
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: t.base, Timeout: time.Minute})
	tok, err := cc.Token(ctx)
	if err == nil && tok.AccessToken == "" {
		err = errors.New("an answer without an access token")
	}
	if err != nil {
		return nil, t.failNow("no token from the token endpoint %s: %s", t.tokenURL, describeTokenError(err))
	}
	return tok, nil
}

// describeTokenError says why the token endpoint refused, from the OAuth
// error's code and description only: the raw body it also carries is the
// endpoint's, and is not repeated.
func describeTokenError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := ""
		if re.Response != nil {
			msg = re.Response.Status
		}
		if re.ErrorCode != "" {
			msg += ": " + re.ErrorCode
		}
		if re.ErrorDescription != "" {
			msg += " (" + re.ErrorDescription + ")"
		}
		return strings.TrimPrefix(msg, ": ")
	}
	return err.Error()
}

// discover finds the token endpoint: the protected resource metadata (the
// challenge's resource_metadata first, then the .well-known locations at
// the endpoint's path and at the root, RFC 9728 section 3.1), then its
// first authorization server's metadata (RFC 8414, OIDC discovery). The
// SDK's helpers refuse plain http to anything but loopback and addresses
// that are not public; token_url is the way around discovery there.
func (t *oauthTransport) discover(ctx context.Context, r *authRefusal) (*oauthex.AuthServerMeta, error) {
	hc := &http.Client{Transport: t.base, Timeout: time.Minute}
	var tried []string
	var prm *oauthex.ProtectedResourceMetadata
	for _, c := range prmURLs(r.challenge, t.url) {
		m, err := oauthex.GetProtectedResourceMetadata(ctx, c.url, c.resource, hc)
		if err == nil && m != nil {
			prm = m
			break
		}
		tried = append(tried, c.url)
	}
	if prm == nil {
		return nil, t.fail("no protected resource metadata for %s (tried %s); set token_url", t.url, strings.Join(tried, ", "))
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, t.fail("the protected resource metadata names no authorization server; set token_url")
	}
	issuer := prm.AuthorizationServers[0]
	asm, err := auth.GetAuthServerMetadata(ctx, issuer, hc)
	if err != nil {
		return nil, t.fail("the authorization server metadata of %s: %v", issuer, err)
	}
	if asm == nil || asm.TokenEndpoint == "" {
		return nil, t.fail("no authorization server metadata at %s (RFC 8414 or OIDC discovery); set token_url", issuer)
	}
	return asm, nil
}

// authStyle is how to authenticate at a token endpoint that supports
// methods: client_secret_basic first (every server must support it, RFC
// 6749 section 2.3.1), else client_secret_post, else auto-detection.
func authStyle(methods []string) oauth2.AuthStyle {
	switch {
	case slices.Contains(methods, "client_secret_basic"):
		return oauth2.AuthStyleInHeader
	case slices.Contains(methods, "client_secret_post"):
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleAutoDetect
}

// prmURL is a place the protected resource metadata may be, and the
// resource it must then name.
type prmURL struct{ url, resource string }

// prmURLs is where the protected resource metadata may be, in order: the
// challenge's, at the endpoint's path (naming the endpoint), at the root
// (naming the endpoint, or the origin, which is what the root's metadata
// describes).
func prmURLs(challenge []string, resource string) []prmURL {
	var out []prmURL
	if cs, err := oauthex.ParseWWWAuthenticate(challenge); err == nil {
		for _, c := range cs {
			if u := c.Params["resource_metadata"]; c.Scheme == "bearer" && u != "" {
				out = append(out, prmURL{u, resource})
				break
			}
		}
	}
	ru, err := url.Parse(resource)
	if err != nil {
		return out
	}
	mu := *ru
	mu.RawQuery, mu.Fragment = "", ""
	if p := strings.Trim(ru.Path, "/"); p != "" {
		mu.Path = "/.well-known/oauth-protected-resource/" + p
		out = append(out, prmURL{mu.String(), resource})
	}
	mu.Path = "/.well-known/oauth-protected-resource"
	root := mu.String()
	out = append(out, prmURL{root, resource})
	origin := url.URL{Scheme: ru.Scheme, Host: ru.Host}
	if o := origin.String(); o != resource {
		out = append(out, prmURL{root, o})
	}
	return out
}

// httpBase is what carries the upstream's HTTP requests under the tap: the
// OAuth transport when the server has OAuth set.
func (u *Upstream) httpBase() http.RoundTripper {
	if u.perCaller != nil {
		return callerTransport{u.perCaller} // percaller.go
	}
	if u.oauth != nil {
		return u.oauth
	}
	return u.httpRT
}

// AuditAttrs implements tool.Auditor: the audit event that settles a
// call to a server with OAuth says which credential it used (its mode and
// server, never the token).
func (b *toolBackend) AuditAttrs() []any {
	if b.u.oauth == nil {
		return nil
	}
	return []any{"credential", CredentialModeService, "credential_server", b.u.srv.Name}
}
