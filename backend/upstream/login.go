package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// LoginOptions configure Login; nil means the defaults.
type LoginOptions struct {
	// Show is handed the authorization URL, for the operator to open in a
	// browser. Required.
	Show func(authURL string)
	// Transport carries every request (the server's, the metadata's, the
	// authorization server's). Default: a clone of http.DefaultTransport.
	Transport http.RoundTripper
	// Listen is the loopback address the redirect comes back to. Default
	// 127.0.0.1:0 (a random port; RFC 8252 section 7.3 lets a native
	// client's loopback redirect use any port).
	Listen string

	// redirect and cb, set by ServiceLogins: the redirect comes back to
	// the gateway's callback, which hands it to cb; no listener of
	// Login's own.
	redirect string
	cb       *callback
}

// ErrLogin wraps every failure of Login.
var ErrLogin = errors.New("login failed")

// Login is the authorization code flow of the service mode, run once by
// an operator (`backplane servers login NAME`): it sends the server one
// request without a token, and from its 401 the Go SDK's
// auth.AuthorizationCodeHandler finds the protected resource metadata
// (RFC 9728) and the authorization server's (RFC 8414, OIDC), picks the
// client (a client ID metadata document where the server supports them
// and ClientIDMetadataURL is set, else the configured client_id, else
// dynamic registration, RFC 7591), and builds the authorization URL with
// PKCE S256, a random state and resource=srv.URL (RFC 8707). Login hands
// that URL to Show and waits for the redirect on a loopback listener: a
// redirect with another state is answered 400 and ignored; the code is
// exchanged (with the verifier and resource) only after the SDK checked
// the state and the RFC 9207 iss (required when the server advertises
// it, compared when present). It returns the token to save under
// TokenKey{Server: srv.Name}: the refresh token, the client used (a
// registered one is needed for refreshes) and the token and revocation
// endpoints. Nothing is saved here; nothing secret is in an error.
func Login(ctx context.Context, srv Server, opts *LoginOptions) (StoredToken, error) {
	var o LoginOptions
	if opts != nil {
		o = *opts
	}
	fail := func(format string, args ...any) (StoredToken, error) {
		return StoredToken{}, fmt.Errorf("upstream %s: %w: %s", srv.Name, ErrLogin, fmt.Sprintf(format, args...))
	}
	if srv.OAuth == nil || srv.URL == "" {
		return fail("the server has no auth.oauth")
	}
	if o.Show == nil {
		return fail("nowhere to show the authorization URL")
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	hc := &http.Client{Transport: o.Transport, Timeout: time.Minute}
	cfg := srv.OAuth

	redirect, cb := o.redirect, o.cb
	if cb == nil {
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return fail("the redirect listener: %v", err)
		}
		if ip := net.ParseIP(ln.Addr().(*net.TCPAddr).IP.String()); ip == nil || !ip.IsLoopback() {
			ln.Close()
			return fail("the redirect listener %s is not on a loopback address", ln.Addr())
		}
		redirect = "http://" + ln.Addr().String() + "/callback"
		cb = newCallback()
		hs := &http.Server{Handler: cb, ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ln)
		defer hs.Close()
	}

	// The probe: the server's 401 says where its metadata is.
	probe, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"backplane-login","version":"1"}}}`))
	if err != nil {
		return fail("%v", err)
	}
	for k, v := range srv.Headers { // the server's static headers, as every request of serve's carries them
		probe.Header.Set(k, v)
	}
	probe.Header.Set("Content-Type", "application/json")
	probe.Header.Set("Accept", "application/json, text/event-stream")
	probe.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := hc.Do(probe)
	if err != nil {
		return fail("reaching %s: %v", srv.URL, err)
	}
	// A server may let initialize through without a token and ask for one
	// only on calls: without a 401's challenge the discovery starts at the
	// .well-known locations (RFC 9728 section 3.1). A 403 is taken as a
	// 401: the SDK's handler goes on only for insufficient_scope.
	if resp.StatusCode == http.StatusForbidden {
		resp.StatusCode = http.StatusUnauthorized
	}
	challenge := resp.Header.Values("WWW-Authenticate")

	var got struct {
		cfg *oauth2.Config
		tok *oauth2.Token
	}
	hcfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL: redirect,
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs:            []string{redirect},
			ClientName:              "Backplane",
			GrantTypes:              []string{"authorization_code", "refresh_token"},
			ResponseTypes:           []string{"code"},
			TokenEndpointAuthMethod: "none",
			Scope:                   strings.Join(cfg.Scopes, " "),
		}},
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			u, err := url.Parse(args.URL)
			if err != nil {
				return nil, err
			}
			cb.expect(u.Query().Get("state"))
			o.Show(args.URL)
			select {
			case r := <-cb.done:
				if r.err != nil {
					return nil, r.err
				}
				return r.res, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("no redirect came back: %w", ctx.Err())
			}
		},
		Client:                hc,
		RequestRefreshToken:   true,
		AcceptUnadvertisedIss: true, // a matching iss is fine even when unadvertised; a wrong one never is
		NewTokenSource: func(_ context.Context, c *oauth2.Config, t *oauth2.Token) (oauth2.TokenSource, error) {
			got.cfg, got.tok = c, t
			return oauth2.StaticTokenSource(t), nil
		},
	}
	if len(cfg.Scopes) > 0 {
		scopes := cfg.Scopes
		hcfg.ScopeFilter = func([]string) []string { return scopes }
	}
	if cfg.ClientIDMetadataURL != "" {
		hcfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: cfg.ClientIDMetadataURL}
	}
	if cfg.ClientID != "" {
		pre := &oauthex.ClientCredentials{ClientID: cfg.ClientID}
		if cfg.ClientSecret != "" {
			pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: cfg.ClientSecret}
		}
		hcfg.PreregisteredClient = pre
	}
	h, err := auth.NewAuthorizationCodeHandler(hcfg)
	if err != nil {
		resp.Body.Close()
		return fail("%v", err)
	}
	status := resp.Status
	if err := h.Authorize(ctx, probe, resp); err != nil {
		if resp.StatusCode != http.StatusUnauthorized {
			return fail("%s (the server answered %s to a request without a token, not 401)", describeTokenError(err), status)
		}
		return fail("%s", describeTokenError(err))
	}
	if got.tok == nil || got.tok.AccessToken == "" {
		return fail("the authorization server gave no access token")
	}
	st := StoredToken{
		Token: got.tok, Mode: "service", Updated: time.Now(),
		ClientID: got.cfg.ClientID, ClientSecret: got.cfg.ClientSecret,
		TokenURL: got.cfg.Endpoint.TokenURL,
		Scopes:   got.cfg.Scopes,
	}
	if s, ok := got.tok.Extra("scope").(string); ok && s != "" {
		st.Scopes = strings.Fields(s)
	}
	// The revocation endpoint, for `connections revoke`: the same
	// discovery again (the SDK's handler does not return the metadata).
	dt := newOAuthTransport(o.Transport, srv.Name, srv.URL, *cfg)
	if asm, err := dt.discover(ctx, &authRefusal{challenge: challenge}); err == nil {
		st.RevocationURL = asm.RevocationEndpoint
	}
	return st, nil
}

// callback is the redirect's handler: the first redirect with the
// expected state ends the wait.
type callback struct {
	state chan string
	done  chan callbackResult
}

type callbackResult struct {
	res *auth.AuthorizationResult
	err error
}

func newCallback() *callback {
	return &callback{state: make(chan string, 1), done: make(chan callbackResult, 1)}
}

func (c *callback) expect(state string) {
	select {
	case c.state <- state:
	default:
	}
}

func (c *callback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/callback" {
		http.NotFound(w, r)
		return
	}
	status, msg := c.deliver(r.URL.Query())
	if status != http.StatusOK {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>Backplane</title><p>%s</p>\n", html.EscapeString(msg))
}

// deliver hands a redirect's query to the waiting Login when its state is
// the one expected, and says what to answer the browser: the status (200
// once delivered, a refusal included) and a message.
func (c *callback) deliver(q url.Values) (int, string) {
	var want string
	select {
	case want = <-c.state:
	default:
		return http.StatusGone, "no sign-in is waiting (or it already ended)"
	}
	if q.Get("state") != want || want == "" {
		c.state <- want // still waiting for the real one
		return http.StatusBadRequest, "this redirect is not the one Backplane is waiting for (state does not match)"
	}
	var res callbackResult
	if e := q.Get("error"); e != "" {
		res.err = fmt.Errorf("the authorization server refused: %s", quoteScope(strings.TrimSpace(e+" "+q.Get("error_description"))))
	} else {
		res.res = &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}
	}
	c.done <- res
	if res.err != nil {
		return http.StatusOK, "Backplane: the sign-in was refused. See the terminal."
	}
	return http.StatusOK, "Backplane has the authorization: you may close this page."
}

// Revoke asks the authorization server to revoke a saved token (RFC
// 7009): its refresh token, else its access token, at st.RevocationURL,
// as its client (the one registered at login, else clientID and
// clientSecret). ErrNoRevocation when the server has no revocation
// endpoint. The token is never in an error.
func Revoke(ctx context.Context, rt http.RoundTripper, st StoredToken, clientID, clientSecret string) error {
	if st.RevocationURL == "" {
		return ErrNoRevocation
	}
	if st.Token == nil {
		return errors.New("nothing to revoke")
	}
	if st.ClientID != "" {
		clientID, clientSecret = st.ClientID, st.ClientSecret
	}
	form := url.Values{}
	if st.Token.RefreshToken != "" {
		form.Set("token", st.Token.RefreshToken)
		form.Set("token_type_hint", "refresh_token")
	} else {
		form.Set("token", st.Token.AccessToken)
		form.Set("token_type_hint", "access_token")
	}
	if clientSecret == "" {
		form.Set("client_id", clientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.RevocationURL, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if clientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(clientSecret))
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := (&http.Client{Transport: rt, Timeout: time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("revoking at %s: %w", st.RevocationURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		code := ""
		if i := bytes.Index(body, []byte(`"error":"`)); i >= 0 {
			rest := body[i+9:]
			if j := bytes.IndexByte(rest, '"'); j >= 0 && j < 64 {
				code = ": " + quoteScope(string(rest[:j]))
			}
		}
		return fmt.Errorf("revoking at %s: %s%s", st.RevocationURL, resp.Status, code)
	}
	return nil
}

// ErrNoRevocation is Revoke's answer when the authorization server has no
// revocation endpoint: the credential can only be forgotten.
var ErrNoRevocation = errors.New("the authorization server has no revocation endpoint")
