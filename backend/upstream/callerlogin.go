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
// The flows in progress are kept in this process's memory (for
// DefaultLoginTTL): the callback has to reach the replica that gave the
// URL. The token it gets is saved to the TokenStore, which replicas may
// share.

// DefaultLoginTTL is how long an authorization URL stays valid.
const DefaultLoginTTL = 10 * time.Minute

// LoginWait bounds how long a 2025-11-25 call waits, after its person
// accepted the URL-mode elicitation, for the flow to complete.
const LoginWait = 5 * time.Minute

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
	// server.PathUpstreamCallback.
	RedirectURL string
	// TTL is how long a flow stays valid (DefaultLoginTTL).
	TTL time.Duration
}

// Logins are the authorization code flows in progress, of every
// per_caller server of the process, and their callback. Safe for
// concurrent use.
type Logins struct {
	redirect string
	ttl      time.Duration

	mu    sync.Mutex
	flows map[string]*loginFlow   // by state
	byKey map[TokenKey]*loginFlow // the flow of each caller on each server
}

// NewLogins returns an empty set of flows.
func NewLogins(opts *LoginsOptions) *Logins {
	l := &Logins{ttl: DefaultLoginTTL, flows: map[string]*loginFlow{}, byKey: map[TokenKey]*loginFlow{}}
	if opts != nil {
		l.redirect = opts.RedirectURL
		if opts.TTL > 0 {
			l.ttl = opts.TTL
		}
	}
	return l
}

type loginFlow struct {
	key      TokenKey
	a        *callerAuth
	id       string // the elicitation's id; not the state
	state    string // a secret: who holds it completes the flow for key
	verifier string
	url      string
	expires  time.Time
	done     chan struct{} // closed once finished
	err      error         // why it failed, once done
}

func (f *loginFlow) finish(err error) {
	f.err = err
	close(f.done)
}

func randomString() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrNoCallback: a login cannot complete without serve's callback.
var ErrNoCallback = errors.New("a caller's login completes at backplane serve's callback, and this process serves none")

// begin returns the caller's flow in progress on the server, or a new one.
func (l *Logins) begin(ctx context.Context, a *callerAuth, caller string) (*loginFlow, error) {
	if l == nil || l.redirect == "" {
		return nil, a.fail("%v", ErrNoCallback)
	}
	m, err := a.endpoints(ctx)
	if err != nil {
		return nil, err
	}
	key := TokenKey{Server: a.server, Caller: caller}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, f := range l.flows {
		if now.After(f.expires) {
			delete(l.flows, s)
			if l.byKey[f.key] == f {
				delete(l.byKey, f.key)
			}
		}
	}
	if f, ok := l.byKey[key]; ok {
		return f, nil // the same URL on every retry until it is used or expires
	}
	f := &loginFlow{
		key: key, a: a, id: randomString(), state: randomString(), verifier: oauth2.GenerateVerifier(),
		expires: now.Add(l.ttl), done: make(chan struct{}),
	}
	f.url = a.authCodeConfig(m, l.redirect).AuthCodeURL(f.state,
		oauth2.S256ChallengeOption(f.verifier), oauth2.SetAuthURLParam("resource", a.resource))
	l.flows[f.state] = f
	l.byKey[key] = f
	return f, nil
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
// (RFC 6749 4.1.2), checks its iss where the server says it sends one
// (RFC 9207), redeems the code with the flow's PKCE verifier, and saves
// the token as the caller's. A state is used once.
func (l *Logins) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	l.mu.Lock()
	f, ok := l.flows[state]
	if ok {
		delete(l.flows, state)
		if l.byKey[f.key] == f {
			delete(l.byKey, f.key)
		}
	}
	l.mu.Unlock()
	if !ok || time.Now().After(f.expires) {
		loginAnswer(w, http.StatusBadRequest, "This link has expired or was already used",
			"Call the tool again for a new one.")
		return
	}
	a := f.a
	fail := func(msg string) {
		f.finish(errors.New(msg))
		a.log.Warn("upstream login failed", "caller", f.key.Caller, "reason", msg)
		loginAnswer(w, http.StatusBadRequest, "Not connected", msg+" Call the tool again to start over.")
	}
	if e := q.Get("error"); e != "" {
		msg := "The authorization server answered " + e
		if d := q.Get("error_description"); d != "" {
			msg += " (" + d + ")"
		}
		fail(msg + ".")
		return
	}
	m := a.meta
	if iss := q.Get("iss"); (m.AuthorizationResponseIssParameterSupported && iss != m.Issuer) || (iss != "" && m.Issuer != "" && iss != m.Issuer) {
		fail("The answer does not come from the authorization server the link was for (its iss does not match).")
		return
	}
	code := q.Get("code")
	if code == "" {
		fail("The answer carries no authorization code.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: a.base, Timeout: time.Minute})
	tok, err := a.authCodeConfig(m, l.redirect).Exchange(ctx, code,
		oauth2.VerifierOption(f.verifier), oauth2.SetAuthURLParam("resource", a.resource))
	if err == nil && tok.AccessToken == "" {
		err = errors.New("an answer without an access token")
	}
	if err != nil {
		fail("The authorization server did not give a token for the code: " + describeTokenError(err) + ".")
		return
	}
	if err := a.save(ctx, f.key.Caller, tok); err != nil {
		fail("The token could not be kept: " + err.Error() + ".")
		return
	}
	f.finish(nil)
	a.log.Info("upstream account connected", "caller", f.key.Caller)
	loginAnswer(w, http.StatusOK, "Connected",
		fmt.Sprintf("Backplane now calls %s as your account, for your calls only. Go back to your client: the call can be made again.", a.server))
}

// LoginRequiredError answers a call from a caller that has not connected
// an account on a per_caller server: nothing was sent (it wraps
// tool.ErrNotStarted), and its details carry the URL where the caller
// connects it (tool.DetailedError). Error() does not repeat the URL.
type LoginRequiredError struct {
	Server string
	Caller string
	URL    string
	input  *tool.InputRequiredError // for a client that answers by calling again
}

func (e *LoginRequiredError) Error() string {
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
	return map[string]any{"authorization_url": e.URL, "authorization_server": e.Server}
}

// login answers a call whose caller has no token: see the top of this
// file. It returns nil when the flow completed during the call (the call
// then runs).
func (u *Upstream) login(ctx context.Context, call *tool.Call) error {
	a := u.perCaller
	f, err := u.logins.begin(ctx, a, call.Caller)
	if err != nil {
		return err
	}
	le := &LoginRequiredError{Server: u.srv.Name, Caller: call.Caller, URL: f.url}
	params, _ := json.Marshal(map[string]any{
		"mode": "url", "url": f.url, "elicitationId": f.id,
		"message": fmt.Sprintf("Connect your %s account: Backplane calls it as you, for your calls only. Open the link, sign in, then the call goes on.", u.srv.Name),
	})
	attrs := []any{"method", tool.RequestElicitation, "mode", "url", "purpose", "upstream_login", "caller", call.Caller, "call_id", call.CallID}
	// A client that answers by calling again is asked with input_required,
	// when it can show a URL; any other such client gets the error, whose
	// details carry the URL.
	cc, capable := call.Client.(tool.CapableClient)
	if d, ok := call.Client.(tool.InputDeferrer); ok && d.DefersInput() && capable && cc.Capabilities().ElicitationURL {
		le.input = &tool.InputRequiredError{
			Server:   u.srv.Name,
			Requests: map[string]tool.InputRequest{loginInput: {Method: tool.RequestElicitation, Params: params}},
			State:    loginStatePrefix + f.id,
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
	wait := time.NewTimer(LoginWait)
	defer wait.Stop()
	select {
	case <-f.done:
		if f.err == nil {
			return nil
		}
	case <-ctx.Done():
	case <-wait.C:
	}
	return le
}
