package upstream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/agentbackplane/backplane/tool"
)

// A caller's login to an upstream server (per_caller): the OAuth
// authorization code flow with PKCE (S256) and the resource parameter
// (RFC 8707), its state bound to the caller and the server, completed at
// the gateway's callback (Logins.ServeHTTP, served by serve at
// server.PathUpstreamCallback). A call from a caller without a token is
// answered with the authorization URL, in what the caller's client can
// show:
//
//   - a client that answers by calling again (2026-07-28,
//     tool.InputDeferrer): an *tool.InputRequiredError with one URL-mode
//     elicitation (the error's State marks it as the gateway's own, so
//     the retry is sent to the server as a new call);
//   - a client that takes requests during the call (2025-11-25): a
//     URL-mode elicitation; once the person accepts, the call waits for
//     the flow to complete (within the call's deadline and LoginWait) and
//     then runs;
//   - otherwise, or when the person declines or does not finish in time:
//     a *LoginRequiredError, whose details carry the URL.
//
// Nothing is sent to the server before the caller has a token: each of
// these answers wraps tool.ErrNotStarted, and the call settles not run.
//
// A caller whose token the server refuses with 403 insufficient_scope
// (RFC 6750 3.1) is asked the same way for a new login (a step-up) whose
// scopes are those its token holds, those the server demanded and the
// configuration's; the server refused the call before running it, so it
// settles not run, and the retry runs with the new token.
//
// The flows in progress are kept in a LoginStore (for DefaultLoginTTL, at
// most DefaultMaxLogins per caller): with the gateway's store
// (internal/credstore, sealed), the callback may reach any replica, and a
// call waiting at one replica sees the token the callback at another
// saved in the TokenStore. A state completes one flow once: a replayed
// callback finds nothing and is refused.

// DefaultLoginTTL is how long an authorization URL stays valid.
const DefaultLoginTTL = 10 * time.Minute

// DefaultMaxLogins is how many logins a caller may have in progress at
// once, on every server: each retry gives the same URL again, so only
// different servers (or a step-up to other scopes) make more.
const DefaultMaxLogins = 8

// LoginWait bounds how long a 2025-11-25 call waits, after its person
// accepted the URL-mode elicitation, for the flow to complete.
const LoginWait = 5 * time.Minute

// loginPoll is how often a waiting call reads the TokenStore for the
// token a callback served by another replica saved.
const loginPoll = 250 * time.Millisecond

// loginInput is the key of the login's elicitation in a 2026-07-28
// input_required answer, and loginStatePrefix marks its state.
const (
	loginInput       = "backplane_login"
	loginStatePrefix = "backplane-upstream-login:"
)

func isLoginState(s string) bool { return strings.HasPrefix(s, loginStatePrefix) }

// LoginsOptions configure NewLogins; nil means the defaults, with no
// callback (every login fails, saying serve is needed).
type LoginsOptions struct {
	// RedirectURL is the callback's public URL, where the authorization
	// server sends the browser back: serve's URL and
	// server.PathUpstreamCallback. Replicas behind one address share it.
	RedirectURL string
	// TTL is how long a flow stays valid (DefaultLoginTTL).
	TTL time.Duration
	// Store keeps the flows in progress: nil keeps them in this process's
	// memory, where only this process's callback completes them.
	Store LoginStore
	// MaxPerCaller caps a caller's flows in progress (0: DefaultMaxLogins;
	// negative: no cap).
	MaxPerCaller int
}

// Logins are the authorization code flows in progress, of every
// per_caller server of the process, and their callback. The flows are in
// a LoginStore; what stays in memory is which servers this process
// serves and the wake-up of calls waiting here. Safe for concurrent use.
type Logins struct {
	redirect string
	ttl      time.Duration
	max      int
	store    LoginStore

	mu      sync.Mutex
	servers map[string]*callerAuth // the per_caller servers, by name
	failed  map[string]error       // flows whose callback failed here, by elicitation id
	changed chan struct{}          // closed (and replaced) when a callback here ends
}

// NewLogins returns an empty set of flows.
func NewLogins(opts *LoginsOptions) *Logins {
	l := &Logins{ttl: DefaultLoginTTL, max: DefaultMaxLogins, servers: map[string]*callerAuth{},
		failed: map[string]error{}, changed: make(chan struct{})}
	if opts != nil {
		l.redirect, l.store = opts.RedirectURL, opts.Store
		if opts.TTL > 0 {
			l.ttl = opts.TTL
		}
		switch {
		case opts.MaxPerCaller > 0:
			l.max = opts.MaxPerCaller
		case opts.MaxPerCaller < 0:
			l.max = 0
		}
	}
	if l.store == nil {
		l.store = &MemoryLogins{}
	}
	return l
}

// serve makes a's server's flows completable at this callback (the
// newest Upstream of a name wins: a reload's).
func (l *Logins) serve(a *callerAuth) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.servers[a.server] = a
	l.mu.Unlock()
}

// forget undoes serve, unless another Upstream of the name replaced a.
func (l *Logins) forget(a *callerAuth) {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.servers[a.server] == a {
		delete(l.servers, a.server)
	}
	l.mu.Unlock()
}

func (l *Logins) server(name string) *callerAuth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.servers[name]
}

// ended records that a callback here ended the flow of elicitation id
// (err: how it failed) and wakes the calls waiting here.
func (l *Logins) ended(id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if len(l.failed) > 1024 { // a bound: a stale entry only ends a wait early
			clear(l.failed)
		}
		l.failed[id] = err
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *Logins) watch(id string) (<-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed, l.failed[id]
}

func randomString() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrNoCallback: a login cannot complete without serve's callback.
var ErrNoCallback = errors.New("a caller's login completes at backplane serve's callback, and this process serves none")

// begin returns the caller's flow in progress on the server asking for
// scopes, or a new one: the same URL on every retry until it is used or
// expires.
func (l *Logins) begin(ctx context.Context, a *callerAuth, caller string, scopes []string) (PendingLogin, error) {
	if l == nil || l.redirect == "" {
		return PendingLogin{}, a.fail("%v", ErrNoCallback)
	}
	m, err := a.endpoints(ctx)
	if err != nil {
		return PendingLogin{}, err
	}
	open, err := l.store.Logins(ctx, a.server, caller)
	if err != nil {
		return PendingLogin{}, a.fail("reading the logins in progress: %v", err)
	}
	for _, p := range open {
		if sameScopes(p.Scopes, scopes) {
			return p, nil
		}
	}
	now := time.Now()
	state := randomString()
	p := PendingLogin{
		Server: a.server, Caller: caller, Scopes: scopes, Verifier: oauth2.GenerateVerifier(), ElicitationID: randomString(),
		ClientID: a.clientID, ClientSecret: a.clientSecret, TokenURL: m.TokenEndpoint, Redirect: l.redirect,
		Issuer: m.Issuer, IssRequired: m.AuthorizationResponseIssParameterSupported,
		Created: now, Expires: now.Add(l.ttl),
	}
	cfg := a.authCodeConfig(m, l.redirect)
	cfg.Scopes = scopes
	p.URL = cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(p.Verifier), oauth2.SetAuthURLParam("resource", a.resource))
	if err := l.store.AddLogin(ctx, state, p, l.max); err != nil {
		if errors.Is(err, ErrTooManyLogins) {
			return PendingLogin{}, a.fail("caller %s has %d logins in progress already: finish one, or wait until they expire (%s)", caller, l.max, l.ttl)
		}
		return PendingLogin{}, a.fail("keeping the login in progress: %v", err)
	}
	return p, nil
}

// sameScopes reports whether a and b hold the same scopes, in any order.
func sameScopes(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// authCodeConfig is the client of the authorization code flow.
func (a *callerAuth) authCodeConfig(m *oauthex.AuthServerMeta, redirect string) *oauth2.Config {
	return &oauth2.Config{
		ClientID: a.clientID, ClientSecret: a.clientSecret,
		Endpoint:    oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint, TokenURL: m.TokenEndpoint, AuthStyle: a.style()},
		RedirectURL: redirect, Scopes: a.cfg.Scopes,
	}
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title></head>
<body><h1>{{.Title}}</h1><p>{{.Text}}</p></body></html>
`))

func loginAnswer(w http.ResponseWriter, status int, title, text string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	loginPage.Execute(w, struct{ Title, Text string }{title, text})
}

// ServeHTTP is the callback: it takes the authorization server's answer
// (RFC 6749 4.1.2) and the flow of its state from the LoginStore (once:
// a replayed or second callback finds none and is refused), checks its
// iss where the server says it sends one (RFC 9207), redeems the code
// with the flow's PKCE verifier, client and redirect, and saves the token
// as the caller's. Any process serving the flow's server completes it.
func (l *Logins) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	state := q.Get("state")
	if state == "" {
		loginAnswer(w, http.StatusBadRequest, "Not a sign-in answer", "This address carries no state. Call the tool again for a link.")
		return
	}
	f, err := l.store.TakeLogin(ctx, state)
	switch {
	case errors.Is(err, ErrNoLogin):
		loginAnswer(w, http.StatusBadRequest, "This link has expired or was already used",
			"Each sign-in link completes once. Call the tool again for a new one.")
		return
	case err != nil:
		loginAnswer(w, http.StatusServiceUnavailable, "Not connected", "The sign-in could not be read here; try the link again.")
		return
	case time.Now().After(f.Expires):
		loginAnswer(w, http.StatusBadRequest, "This link has expired or was already used",
			"The sign-in took longer than the link lasts. Call the tool again for a new one.")
		return
	}
	a := l.server(f.Server)
	if a == nil {
		loginAnswer(w, http.StatusBadRequest, "Not connected", "This gateway has no per_caller server named "+f.Server+". Call the tool again to start over.")
		return
	}
	fail := func(msg string) {
		l.ended(f.ElicitationID, errors.New(msg))
		a.log.Warn("upstream login failed", "caller", f.Caller, "reason", msg)
		loginAnswer(w, http.StatusBadRequest, "Not connected", msg+" Call the tool again to start over.")
	}
	if e := q.Get("error"); e != "" {
		msg := "The authorization server answered " + quoteScope(e)
		if d := q.Get("error_description"); d != "" {
			msg += " (" + quoteScope(d) + ")"
		}
		fail(msg + ".")
		return
	}
	if iss := q.Get("iss"); (f.IssRequired && iss != f.Issuer) || (iss != "" && f.Issuer != "" && iss != f.Issuer) {
		fail("The answer does not come from the authorization server the link was for (its iss does not match).")
		return
	}
	code := q.Get("code")
	if code == "" {
		fail("The answer carries no authorization code.")
		return
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: a.base, Timeout: time.Minute})
	style := oauth2.AuthStyleInParams // a public client sends its id in the form
	if f.ClientSecret != "" {
		style = a.style()
	}
	cfg := &oauth2.Config{ClientID: f.ClientID, ClientSecret: f.ClientSecret, RedirectURL: f.Redirect,
		Endpoint: oauth2.Endpoint{TokenURL: f.TokenURL, AuthStyle: style}}
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(f.Verifier), oauth2.SetAuthURLParam("resource", a.resource))
	if err == nil && tok.AccessToken == "" {
		err = errors.New("an answer without an access token")
	}
	if err != nil {
		fail("The authorization server did not give a token for the code: " + describeTokenError(err) + ".")
		return
	}
	if err := a.saveLogin(ctx, f, tok); err != nil {
		fail("The token could not be kept: " + err.Error() + ".")
		return
	}
	l.ended(f.ElicitationID, nil)
	a.log.Info("upstream account connected", "caller", f.Caller, "scopes", strings.Join(grantedScopes(tok, f.Scopes), " "))
	loginAnswer(w, http.StatusOK, "Connected",
		fmt.Sprintf("Backplane now calls %s as your account, for your calls only. Go back to your client: the call can be made again.", a.server))
}

// LoginRequiredError answers a call from a caller that has not connected
// an account on a per_caller server, or whose token lacks a scope the
// server demanded (Scopes: the step-up asks for them all): nothing was
// sent, or the server refused it before running it (it wraps
// tool.ErrNotStarted), and its details carry the URL where the caller
// connects it (tool.DetailedError). Error() does not repeat the URL.
type LoginRequiredError struct {
	Server string
	Caller string
	URL    string
	// StepUp is the scope the server demanded (insufficient_scope) when
	// the caller has a token that lacks it; "" for a first login.
	StepUp string
	// Scopes are the scopes the login asks for.
	Scopes []string
	input  *tool.InputRequiredError // for a client that answers by calling again
}

func (e *LoginRequiredError) Error() string {
	if e.StepUp != "" {
		return fmt.Sprintf("upstream %s: caller %s's account lacks scope %s (insufficient_scope): open the authorization_url in this error's details to grant %s, then call again",
			e.Server, e.Caller, quoteScope(e.StepUp), quoteScope(strings.Join(e.Scopes, " ")))
	}
	return fmt.Sprintf("upstream %s: caller %s has not connected an account yet: open the authorization_url in this error's details, sign in, then call again", e.Server, e.Caller)
}

// Unwrap says nothing ran, and gives the input_required answer for a
// client that calls again.
func (e *LoginRequiredError) Unwrap() []error {
	if e.input != nil {
		return []error{tool.ErrNotStarted, e.input}
	}
	return []error{tool.ErrNotStarted}
}

// ErrorDetails implements tool.DetailedError.
func (e *LoginRequiredError) ErrorDetails() map[string]any {
	d := map[string]any{"authorization_url": e.URL, "authorization_server": e.Server}
	if e.StepUp != "" {
		d["insufficient_scope"] = e.StepUp
		d["scopes"] = strings.Join(e.Scopes, " ")
	}
	return d
}

// login answers a call whose caller has no token, or (stepUp set: the
// scope the server demanded) a token without a scope it needs: see the
// top of this file. scopes are those the login asks for. It returns nil
// when the flow completed during the call (the call then runs).
func (u *Upstream) login(ctx context.Context, call *tool.Call, scopes []string, stepUp string) error {
	a := u.perCaller
	key := TokenKey{Server: a.server, Caller: call.Caller}
	var held string // the token before the login: the wait is for another
	if st, err := a.tokens.Token(ctx, key); err == nil && st.Token != nil {
		held = st.Token.AccessToken
	}
	f, err := u.logins.begin(ctx, a, call.Caller, scopes)
	if err != nil {
		return err
	}
	le := &LoginRequiredError{Server: u.srv.Name, Caller: call.Caller, URL: f.URL, StepUp: stepUp, Scopes: f.Scopes}
	msg := fmt.Sprintf("Connect your %s account: Backplane calls it as you, for your calls only. Open the link, sign in, then the call goes on.", u.srv.Name)
	if stepUp != "" {
		msg = fmt.Sprintf("%s needs more access to your account (scope %s). Open the link and allow it, then the call goes on.", u.srv.Name, quoteScope(stepUp))
	}
	params, _ := json.Marshal(map[string]any{"mode": "url", "url": f.URL, "elicitationId": f.ElicitationID, "message": msg})
	purpose := "upstream_login"
	if stepUp != "" {
		purpose = "upstream_step_up"
	}
	attrs := []any{"method", tool.RequestElicitation, "mode", "url", "purpose", purpose, "caller", call.Caller, "call_id", call.CallID}
	// A client that answers by calling again is asked with input_required,
	// when it can show a URL; any other such client gets the error, whose
	// details carry the URL.
	cc, capable := call.Client.(tool.CapableClient)
	if d, ok := call.Client.(tool.InputDeferrer); ok && d.DefersInput() && capable && cc.Capabilities().ElicitationURL {
		le.input = &tool.InputRequiredError{
			Server:   u.srv.Name,
			Requests: map[string]tool.InputRequest{loginInput: {Method: tool.RequestElicitation, Params: params}},
			State:    loginStatePrefix + f.ElicitationID,
		}
		u.record(ctx, append(attrs, "via", "input_required"), "deferred")
		return le
	}
	if call.Client == nil {
		return le
	}
	raw, err := call.Client.Request(ctx, tool.RequestElicitation, params)
	var res struct {
		Action string `json:"action"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	outcome := "relayed"
	if err != nil {
		outcome = "refused"
	}
	u.record(ctx, append(attrs, "via", "elicitation", "action", res.Action), outcome)
	if err != nil || res.Action != "accept" {
		return le
	}
	if u.logins.wait(ctx, a, key, f.ElicitationID, held) {
		return nil
	}
	return le
}

// wait waits, within ctx and LoginWait, for the flow of elicitation id
// to complete: a callback here wakes it at once (and one that failed here
// ends it), one at another replica is seen in the TokenStore, where the
// caller's token is then another than held.
func (l *Logins) wait(ctx context.Context, a *callerAuth, key TokenKey, id, held string) bool {
	timer := time.NewTimer(LoginWait)
	defer timer.Stop()
	tick := time.NewTicker(loginPoll)
	defer tick.Stop()
	for {
		changed, failed := l.watch(id)
		if failed != nil {
			return false
		}
		if st, err := a.tokens.Token(ctx, key); err == nil && st.Token != nil && st.Token.AccessToken != "" && st.Token.AccessToken != held {
			return true
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		}
	}
}
