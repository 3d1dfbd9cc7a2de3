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

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/agentbackplane/backplane/tool"
)

// Per-caller credentials (issue 28): the modes per_caller and exchange.
//
// Each tools/call carries its own caller's token, set on the HTTP request
// by callerTransport from the TokenStore entry {server, caller}; the
// requests that belong to no call (discovery, tools/list, the catalog's
// notifications) carry the gateway's own credential (the client
// credentials grant, when a client secret is configured) or none. A
// caller's token is therefore only ever sent with that caller's calls to
// that server.
//
// That needs an upstream whose requests are each self-contained: MCP
// 2026-07-28. At 2025-11-25 one session carries every caller's calls, and
// a server (the Go SDK's among them) binds the session to the user of its
// first token; so Connect refuses these modes on a server that does not
// speak 2026-07-28, saying why, rather than mixing accounts in a session.

// The modes of OAuth.Mode ("" is OAuthModeService).
const (
	OAuthModeService   = "service"
	OAuthModePerCaller = "per_caller"
	OAuthModeExchange  = "exchange"
)

// The credential modes the audit records for calls of the per-caller
// modes, beside credential_server and credential_caller.
const (
	CredentialModePerCaller = "oauth_per_caller"
	CredentialModeExchange  = "oauth_exchange"
)

// TokenTypeAccessToken is RFC 8693's token type of an OAuth access token,
// the default type of the caller's token in exchange mode.
const TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"

// grantTokenExchange is RFC 8693's grant type.
const grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"

// CallerOAuth is what the per_caller and exchange modes add to OAuth.
type CallerOAuth struct {
	// AuthURL is the authorization endpoint (per_caller); with TokenURL it
	// spares discovery.
	AuthURL string
	// Audience is the audience parameter of a token exchange (RFC 8693);
	// "" sends the server's URL. The resource parameter (RFC 8707) is
	// always the server's URL.
	Audience string
	// SubjectTokenType is the type of the caller's token in an exchange;
	// "" means TokenTypeAccessToken.
	SubjectTokenType string
}

func (o *OAuth) mode() string {
	if o.Mode == "" {
		return OAuthModeService
	}
	return o.Mode
}

func (o *OAuth) perCaller() bool {
	return o.Mode == OAuthModePerCaller || o.Mode == OAuthModeExchange
}

// checkCallerOAuth is Server.Check's part for the per-caller modes.
func checkCallerOAuth(s *Server) error {
	o := s.OAuth
	switch o.mode() {
	case OAuthModeService, OAuthModePerCaller, OAuthModeExchange:
	default:
		return fmt.Errorf("server %s: oauth mode %q: %s, %s or %s", s.Name, o.Mode, OAuthModeService, OAuthModePerCaller, OAuthModeExchange)
	}
	if o.ClientID == "" && o.ClientSecret != "" {
		return fmt.Errorf("server %s: oauth has a client secret but no client id", s.Name)
	}
	switch {
	case o.mode() == OAuthModeService && o.Grant == GrantAuthorizationCode:
		// An operator's consent: the client is registered at login
		// (metadata document, the configured id, or RFC 7591).
		if o.Tokens == nil {
			return fmt.Errorf("server %s: oauth grant authorization_code needs a token store (secrets: {key_file: ...})", s.Name)
		}
	case o.mode() == OAuthModeService && (o.Grant == "" || o.Grant == GrantClientCredentials):
		if o.ClientID == "" || o.ClientSecret == "" {
			return fmt.Errorf("server %s: oauth needs a client id and a client secret", s.Name)
		}
	case o.mode() == OAuthModeService:
		return fmt.Errorf("server %s: oauth grant %q: %s or %s", s.Name, o.Grant, GrantClientCredentials, GrantAuthorizationCode)
	case o.Grant != "":
		return fmt.Errorf("server %s: oauth grant applies to mode %s only", s.Name, OAuthModeService)
	case o.ClientID == "" && o.mode() == OAuthModeExchange:
		return fmt.Errorf("server %s: oauth needs a client id", s.Name) // per_caller: registered (RFC 7591)
	}
	for _, u := range []string{o.TokenURL, o.PerCaller.AuthURL} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("server %s: oauth endpoints must be http:// or https:// URLs with a host", s.Name)
		}
	}
	return nil
}

// callerKey carries, inside this package, the caller a tools/call is
// made for down to callerTransport (the SDK passes the call's context to
// the HTTP request).
type callerKey struct{}

type callerCred struct {
	caller  string
	subject string // the caller's own token, for an exchange; a secret
	// need is where callerTransport records the scope a server demanded
	// of the call's token (insufficient_scope), for Invoke to step up.
	need *scopeNeed
}

// scopeNeed is a server's insufficient_scope answer to a caller's call.
type scopeNeed struct {
	mu     sync.Mutex
	scope  string   // the challenge's scope ("" when it names none)
	held   []string // the scopes the refused token was granted
	demand bool     // set once a 403 insufficient_scope came back
}

func (n *scopeNeed) set(scope string, held []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.scope, n.held, n.demand = scope, held, true
}

// take returns and clears what was recorded.
func (n *scopeNeed) take() (scope string, held []string, ok bool) {
	if n == nil {
		return "", nil, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	scope, held, ok = n.scope, n.held, n.demand
	n.scope, n.held, n.demand = "", nil, false
	return scope, held, ok
}

func withCaller(ctx context.Context, c callerCred) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerFrom(ctx context.Context) (callerCred, bool) {
	c, ok := ctx.Value(callerKey{}).(callerCred)
	return c, ok && c.caller != ""
}

// callerAuth is the per-caller credentials of one server: it lives as
// long as the Upstream.
type callerAuth struct {
	server   string
	resource string // the server's URL
	cfg      OAuth
	base     http.RoundTripper
	service  *oauthTransport // the catalog's credential; nil without a client secret
	tokens   TokenStore
	logins   *Logins
	log      *slog.Logger

	mu    sync.Mutex
	meta  *oauthex.AuthServerMeta // the endpoints; nil until first needed
	locks map[string]*sync.Mutex  // per caller: one refresh or exchange at a time
	// The client: cfg's, or registered (RFC 7591) when cfg has no id;
	// set before meta, and read only once endpoints has returned.
	clientID, clientSecret string
}

func newCallerAuth(base http.RoundTripper, srv Server, tokens TokenStore, logins *Logins, log *slog.Logger) *callerAuth {
	a := &callerAuth{
		server: srv.Name, resource: srv.URL, cfg: *srv.OAuth, base: base,
		tokens: tokens, logins: logins, log: log, locks: map[string]*sync.Mutex{},
		clientID: srv.OAuth.ClientID, clientSecret: srv.OAuth.ClientSecret,
	}
	if a.cfg.ClientSecret != "" {
		// The catalog (discovery, tools/list) is read with the gateway's
		// own client credentials: no caller's token is used for it.
		svc := a.cfg
		svc.Mode = OAuthModeService
		a.service = newOAuthTransport(base, srv.Name, srv.URL, svc)
	}
	return a
}

func (a *callerAuth) fail(format string, args ...any) error {
	return &OAuthError{Server: a.server, Msg: fmt.Sprintf(format, args...)}
}

func (a *callerAuth) credentialMode() string {
	if a.cfg.Mode == OAuthModeExchange {
		return CredentialModeExchange
	}
	return CredentialModePerCaller
}

func (a *callerAuth) lock(caller string) *sync.Mutex {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.locks[caller]
	if !ok {
		l = &sync.Mutex{}
		a.locks[caller] = l
	}
	return l
}

// callerTransport sets each request's Authorization header: the caller's
// token on a tools/call made for a caller, the catalog's credential (or
// none) on every other request. A 401 to a caller's request gets one new
// token (refreshed or exchanged again) and one retry, never more.
type callerTransport struct{ a *callerAuth }

func (t callerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	a := t.a
	cc, ok := callerFrom(req.Context())
	if !ok {
		if a.service != nil {
			return a.service.RoundTrip(req)
		}
		return a.base.RoundTrip(req)
	}
	tok, err := a.token(req.Context(), cc, nil)
	if errors.Is(err, errNeedsLogin) { // gone since ready looked
		err = a.fail("caller %s has no token any more: it has to connect the account again", cc.caller)
	}
	if err != nil {
		return nil, err
	}
	resp, err := a.base.RoundTrip(authorized(req, tok))
	if err == nil && resp.StatusCode == http.StatusForbidden {
		if err := a.insufficientScope(req.Context(), cc, resp); err != nil {
			drain(resp)
			return nil, err
		}
	}
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	if req.Body != nil && req.GetBody == nil {
		return resp, nil
	}
	drain(resp)
	tok2, err := a.token(req.Context(), cc, tok)
	if errors.Is(err, errNeedsLogin) {
		// An *OAuthError, so that the tap marks the request refused (the
		// call did not run); the caller's next call gets the URL.
		err = a.fail("the server refused caller %s's token and the authorization server its refresh: the caller has to connect the account again", cc.caller)
	}
	if err != nil {
		return nil, err
	}
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		if retry.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	return a.base.RoundTrip(authorized(retry, tok2))
}

// insufficientScope is the error for a 403 to a caller's request whose
// challenge says insufficient_scope (RFC 6750 3.1): an *OAuthError, so
// that the tap marks the request refused (the server refused it before
// running it). In per_caller mode it records the demand in cc.need, and
// Invoke asks the caller for a step-up login; an exchanged token's scopes
// are the configuration's, which only an operator widens. nil for any
// other 403, which passes through.
func (a *callerAuth) insufficientScope(ctx context.Context, cc callerCred, resp *http.Response) error {
	scope, what, ok := scopeDemand(resp)
	if !ok {
		return nil
	}
	if a.cfg.Mode == OAuthModeExchange || cc.need == nil {
		return a.fail("the server needs %s (insufficient_scope) for caller %s's call: add it to auth.oauth.scopes", what, cc.caller)
	}
	var held []string
	if st, err := a.tokens.Token(ctx, TokenKey{Server: a.server, Caller: cc.caller}); err == nil {
		held = st.Scopes
	}
	cc.need.set(scope, held)
	return a.fail("the server needs %s (insufficient_scope) for caller %s's call: the caller is asked to grant it", what, cc.caller)
}

// stepUpScopes are the scopes a step-up login asks for: the
// configuration's, those the refused token held, and those the server
// demanded, each once, in that order.
func (a *callerAuth) stepUpScopes(held []string, demanded string) []string {
	var out []string
	for _, s := range slices.Concat(a.cfg.Scopes, held, strings.Fields(demanded)) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// errNeedsLogin: the caller has no usable token (per_caller): it has to
// connect its account first.
var errNeedsLogin = errors.New("the caller has not connected an account")

// token is the caller's token: the stored one while it is fresh, else a
// refreshed (per_caller) or newly exchanged (exchange) one, saved. refused
// is a token the server just answered 401 to: it is replaced, unless the
// stored one is already another.
func (a *callerAuth) token(ctx context.Context, cc callerCred, refused *oauth2.Token) (*oauth2.Token, error) {
	l := a.lock(cc.caller)
	l.Lock()
	defer l.Unlock()
	key := TokenKey{Server: a.server, Caller: cc.caller}
	st, err := a.tokens.Token(ctx, key)
	if err != nil && !errors.Is(err, ErrNoToken) {
		return nil, a.fail("reading the token store: %v", err)
	}
	have := err == nil && st.Token != nil && st.Token.AccessToken != "" && st.Mode == a.cfg.Mode
	switch {
	case have && refused != nil && st.Token.AccessToken != refused.AccessToken:
		return st.Token, nil
	case have && refused == nil && fresh(st):
		return st.Token, nil
	}
	var tok *oauth2.Token
	var prev *StoredToken // the token a refresh replaces
	switch a.cfg.Mode {
	case OAuthModeExchange:
		if cc.subject == "" {
			return nil, a.fail("exchange mode needs the caller's own JWT (serve.oauth): caller %s authenticated with another kind of token", cc.caller)
		}
		tok, err = a.exchange(ctx, cc.subject)
		if err != nil {
			return nil, err
		}
	default:
		if !have || st.Token.RefreshToken == "" {
			if have {
				a.deleteToken(ctx, key)
			}
			return nil, errNeedsLogin
		}
		tok, err = a.refresh(ctx, st)
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "invalid_grant" {
			// The account's grant is gone (revoked, expired): it has to
			// be connected again.
			a.log.Info("upstream refresh token refused: the caller must connect again", "caller", cc.caller)
			a.deleteToken(ctx, key)
			return nil, errNeedsLogin
		}
		var oe *OAuthError
		if errors.As(err, &oe) {
			return nil, err
		}
		if err != nil {
			return nil, a.fail("refreshing caller %s's token at %s: %s", cc.caller, a.tokenURL(), describeTokenError(err))
		}
		if tok.RefreshToken == "" {
			tok.RefreshToken = st.Token.RefreshToken
		}
		prev = &st
	}
	if err := a.save(ctx, cc.caller, tok, prev); err != nil {
		return nil, err
	}
	return tok, nil
}

func (a *callerAuth) deleteToken(ctx context.Context, key TokenKey) {
	if err := a.tokens.DeleteToken(ctx, key); err != nil {
		a.log.Warn("upstream token not deleted from the token store", "caller", key.Caller, "error", err)
	}
}

// save keeps tok, refreshed or exchanged, as the caller's: with the
// granted scopes, and the client of the token it replaces (prev; nil for
// an exchange, whose client is the configuration's).
func (a *callerAuth) save(ctx context.Context, caller string, tok *oauth2.Token, prev *StoredToken) error {
	st := StoredToken{Token: tok, Mode: a.cfg.Mode, Scopes: grantedScopes(tok, a.cfg.Scopes), Updated: time.Now()}
	if prev != nil {
		st.ClientID, st.ClientSecret = prev.ClientID, prev.ClientSecret
		if _, ok := tok.Extra("scope").(string); !ok {
			st.Scopes = prev.Scopes // a refresh keeps the grant's scopes (RFC 6749 6)
		}
	}
	if err := a.tokens.SaveToken(ctx, TokenKey{Server: a.server, Caller: caller}, st); err != nil {
		return a.fail("saving caller %s's token: %v", caller, err)
	}
	return nil
}

// saveLogin keeps the token a login f obtained as its caller's, with the
// scopes granted (else those asked for) and f's client when it is not the
// configuration's: one registered (RFC 7591) by the process that began
// the login, which the refreshes need, whichever process makes them.
func (a *callerAuth) saveLogin(ctx context.Context, f PendingLogin, tok *oauth2.Token) error {
	st := StoredToken{Token: tok, Mode: a.cfg.Mode, Scopes: grantedScopes(tok, f.Scopes), Updated: time.Now()}
	if f.ClientID != a.cfg.ClientID {
		st.ClientID, st.ClientSecret = f.ClientID, f.ClientSecret
	}
	if err := a.tokens.SaveToken(ctx, TokenKey{Server: a.server, Caller: f.Caller}, st); err != nil {
		return a.fail("saving caller %s's token: %v", f.Caller, err)
	}
	return nil
}

// grantedScopes are the scopes the token endpoint says it granted, else
// those asked for (RFC 6749 5.1: scope is omitted when it is as asked).
func grantedScopes(tok *oauth2.Token, asked []string) []string {
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		return splitScopes(s)
	}
	return append([]string(nil), asked...)
}

func splitScopes(s string) []string { return strings.Fields(s) }

// fresh reports whether a stored token is still to be used: before its
// expiry, less 30s or half its life, whichever is shorter.
func fresh(st StoredToken) bool {
	if st.Token.Expiry.IsZero() {
		return true
	}
	life := st.Token.Expiry.Sub(st.Updated)
	return time.Now().Before(st.Token.Expiry.Add(-min(tokenEarly, life/2)))
}

// endpoints are the authorization server's endpoints: configured, else
// discovered once (a GET of the server's URL without a token for its
// challenge, then its protected resource metadata and its authorization
// server's metadata, as the service mode discovers them).
func (a *callerAuth) endpoints(ctx context.Context) (*oauthex.AuthServerMeta, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta != nil {
		return a.meta, nil
	}
	m := &oauthex.AuthServerMeta{AuthorizationEndpoint: a.cfg.PerCaller.AuthURL, TokenEndpoint: a.cfg.TokenURL}
	needAuth := a.cfg.Mode == OAuthModePerCaller
	if m.TokenEndpoint == "" || (needAuth && m.AuthorizationEndpoint == "") || a.clientID == "" {
		found, err := (&oauthTransport{base: a.base, server: a.server, url: a.resource}).discover(ctx, &authRefusal{challenge: a.challenge(ctx)})
		if err != nil {
			return nil, err
		}
		m.Issuer = found.Issuer
		m.AuthorizationResponseIssParameterSupported = found.AuthorizationResponseIssParameterSupported
		m.TokenEndpointAuthMethodsSupported = found.TokenEndpointAuthMethodsSupported
		m.RegistrationEndpoint = found.RegistrationEndpoint
		if m.TokenEndpoint == "" {
			m.TokenEndpoint = found.TokenEndpoint
		}
		if m.AuthorizationEndpoint == "" {
			m.AuthorizationEndpoint = found.AuthorizationEndpoint
		}
	}
	if needAuth && m.AuthorizationEndpoint == "" {
		return nil, a.fail("the authorization server's metadata names no authorization_endpoint; set auth_url")
	}
	if a.clientID == "" {
		if err := a.register(ctx, m); err != nil {
			return nil, err
		}
	}
	a.meta = m
	return m, nil
}

// register registers the gateway as a public client (PKCE, no secret)
// at the authorization server's registration endpoint (RFC 7591), once
// per process: its id is kept in memory, so a restart registers again
// (and the callers' refresh tokens, bound to the old id, are refused:
// they connect again). A pre-registered client_id avoids both.
func (a *callerAuth) register(ctx context.Context, m *oauthex.AuthServerMeta) error {
	if m.RegistrationEndpoint == "" {
		return a.fail("no client_id is configured and the authorization server offers no dynamic client registration: register a client and set client_id")
	}
	if a.logins == nil || a.logins.redirect == "" {
		return a.fail("%v", ErrNoCallback)
	}
	hc := &http.Client{Transport: a.base, Timeout: time.Minute}
	res, err := oauthex.RegisterClient(ctx, m.RegistrationEndpoint, &oauthex.ClientRegistrationMetadata{
		RedirectURIs: []string{a.logins.redirect}, TokenEndpointAuthMethod: "none",
		GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
		ClientName: "Backplane", Scope: strings.Join(a.cfg.Scopes, " "),
	}, hc)
	if err != nil {
		return a.fail("registering a client at %s: %v", m.RegistrationEndpoint, err)
	}
	if res.ClientID == "" {
		return a.fail("the registration at %s gave no client_id", m.RegistrationEndpoint)
	}
	a.clientID, a.clientSecret = res.ClientID, res.ClientSecret
	a.log.Info("upstream client registered (RFC 7591)", "client_id", res.ClientID)
	return nil
}

// tokenURL is the token endpoint, once known.
func (a *callerAuth) tokenURL() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta == nil {
		return a.cfg.TokenURL
	}
	return a.meta.TokenEndpoint
}

// challenge is the WWW-Authenticate of the server's 401 to a GET without
// a token (none when it answers otherwise): where its metadata is.
func (a *callerAuth) challenge(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.resource, nil)
	if err != nil {
		return nil
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := a.base.RoundTrip(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return nil
	}
	return resp.Header.Values("WWW-Authenticate")
}

// style is how the client authenticates at the token endpoint: a public
// client (no secret) sends its id in the form.
func (a *callerAuth) style() oauth2.AuthStyle {
	if a.clientSecret == "" {
		return oauth2.AuthStyleInParams
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.meta != nil && len(a.meta.TokenEndpointAuthMethodsSupported) > 0 {
		return authStyle(a.meta.TokenEndpointAuthMethodsSupported)
	}
	return oauth2.AuthStyleAutoDetect
}

// grant asks the token endpoint for a token with another grant than the
// client credentials one (x/oauth2's clientcredentials lets grant_type be
// set: the client authentication and the answer's reading are its own).
//
// The client is the configuration's (or the one this process registered),
// unless client is set: the one a login saved with the token.
func (a *callerAuth) grant(ctx context.Context, params url.Values, scopes []string, client *StoredToken) (*oauth2.Token, error) {
	m, err := a.endpoints(ctx)
	if err != nil {
		return nil, err
	}
	params.Set("resource", a.resource) // RFC 8707
	cc := clientcredentials.Config{
		ClientID: a.clientID, ClientSecret: a.clientSecret,
		TokenURL: m.TokenEndpoint, Scopes: scopes, EndpointParams: params, AuthStyle: a.style(),
	}
	if client != nil && client.ClientID != "" {
		cc.ClientID, cc.ClientSecret = client.ClientID, client.ClientSecret
		if cc.ClientSecret == "" {
			cc.AuthStyle = oauth2.AuthStyleInParams
		}
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: a.base, Timeout: time.Minute})
	tok, err := cc.Token(ctx)
	if err == nil && tok.AccessToken == "" {
		err = errors.New("an answer without an access token")
	}
	return tok, err
}

// refresh is the refresh token grant (RFC 6749 6) for a caller's token,
// as the client it was issued to.
func (a *callerAuth) refresh(ctx context.Context, st StoredToken) (*oauth2.Token, error) {
	return a.grant(ctx, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {st.Token.RefreshToken}}, nil, &st)
}

// exchange is RFC 8693's token exchange of the caller's own token for one
// whose audience is the server.
func (a *callerAuth) exchange(ctx context.Context, subject string) (*oauth2.Token, error) {
	typ := a.cfg.PerCaller.SubjectTokenType
	if typ == "" {
		typ = TokenTypeAccessToken
	}
	aud := a.cfg.PerCaller.Audience
	if aud == "" {
		aud = a.resource
	}
	tok, err := a.grant(ctx, url.Values{
		"grant_type":           {grantTokenExchange},
		"subject_token":        {subject},
		"subject_token_type":   {typ},
		"requested_token_type": {TokenTypeAccessToken},
		"audience":             {aud},
	}, a.cfg.Scopes, nil)
	if err != nil {
		var oe *OAuthError
		if errors.As(err, &oe) {
			return nil, err
		}
		return nil, a.fail("no token from the token exchange at %s: %s", a.tokenURL(), describeTokenError(err))
	}
	return tok, nil
}

// ready makes sure the call's caller has a token before anything is sent
// (a call without one never reaches the server): the stored one, or a
// refreshed or exchanged one; a per_caller caller without one is asked to
// connect its account (login.go). It returns the call to send: a retry
// that answered the gateway's own login request is sent as a new call.
func (u *Upstream) ready(ctx context.Context, call *tool.Call) (context.Context, *tool.Call, error) {
	a := u.perCaller
	if a == nil {
		return ctx, call, nil
	}
	if p := u.Protocol(); p != "" && p != Protocol20260728 {
		return ctx, call, fmt.Errorf("%w: upstream %s: %s needs an upstream at MCP %s (it speaks %s)", tool.ErrNotStarted, u.srv.Name, a.cfg.Mode, Protocol20260728, p)
	}
	retry := call.Input != nil && isLoginState(call.Input.State)
	if retry {
		c := *call
		c.Input = nil
		call = &c
	}
	cc := callerCred{caller: call.Caller, subject: call.CallerToken, need: &scopeNeed{}}
	if cc.caller == "" {
		return ctx, call, fmt.Errorf("%w: upstream %s: %s needs a caller", tool.ErrNotStarted, u.srv.Name, a.cfg.Mode)
	}
	_, err := a.token(ctx, cc, nil)
	if errors.Is(err, errNeedsLogin) {
		err = u.login(ctx, call, a.cfg.Scopes, "")
	}
	if err != nil {
		if !errors.Is(err, tool.ErrNotStarted) {
			err = &notStartedError{err}
		}
		return ctx, call, err
	}
	return withCaller(ctx, cc), call, nil
}

// stepUp answers a call the server refused with 403 insufficient_scope
// (per_caller): it asks the caller for a login with the scopes its token
// held, those demanded and the configuration's (login, as for a first
// login). It returns the error to answer the call with, or nil when the
// login completed during the call: the call is then sent again (it did
// not run), once. ok is false when the call's failure was no such
// refusal.
func (u *Upstream) stepUp(ctx context.Context, call *tool.Call) (err error, ok bool) {
	cc, found := callerFrom(ctx)
	if u.perCaller == nil || !found {
		return nil, false
	}
	scope, held, demanded := cc.need.take()
	if !demanded {
		return nil, false
	}
	a := u.perCaller
	if scope == "" {
		return &notStartedError{a.fail("the server refused caller %s's call for lack of a scope it does not name (insufficient_scope without scope)", call.Caller)}, true
	}
	missing := false
	for _, s := range strings.Fields(scope) {
		missing = missing || !slices.Contains(held, s)
	}
	if !missing {
		// A new login would ask for what the token was granted already.
		return &notStartedError{a.fail("the server refused caller %s's call for lack of scope %s, which the caller's token was granted: the server and its authorization server disagree", call.Caller, quoteScope(scope))}, true
	}
	want := a.stepUpScopes(held, scope)
	a.log.Info("upstream step-up: the server demands more scope", "caller", call.Caller, "scope", quoteScope(scope))
	if err := u.login(ctx, call, want, scope); err != nil {
		if !errors.Is(err, tool.ErrNotStarted) {
			err = &notStartedError{err}
		}
		return err, true
	}
	return nil, true
}

// checkPerCallerProtocol refuses a connection at a revision that shares
// one session among callers (see the top of this file).
func (u *Upstream) checkPerCallerProtocol(l *link) error {
	if u.perCaller == nil || l.modern() {
		return nil
	}
	l.close()
	return fmt.Errorf("oauth mode %s needs MCP %s, where each request is self-contained, and the server speaks %s: one session would carry every caller's calls (use mode service, or upgrade the server)",
		u.perCaller.cfg.Mode, Protocol20260728, l.protocol)
}

// notStartedError is a failure before anything was sent: it keeps err's
// type (an *OAuthError) and wraps tool.ErrNotStarted.
type notStartedError struct{ err error }

func (e *notStartedError) Error() string   { return e.err.Error() }
func (e *notStartedError) Unwrap() []error { return []error{tool.ErrNotStarted, e.err} }

// CallAuditAttrs implements tool.CallAuditor: the audit event that
// settles a call to a server with a per-caller mode says which
// credential it used: its mode, its server and the caller it belongs to
// (always the call's own), never the token.
func (b *toolBackend) CallAuditAttrs(caller string) []any {
	a := b.u.perCaller
	if a == nil {
		return nil
	}
	return []any{"credential", a.credentialMode(), "credential_server", b.u.srv.Name, "credential_caller", caller}
}
