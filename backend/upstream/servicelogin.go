package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ServiceLogins are the service mode's logins (grant authorization_code)
// started from a front end rather than a terminal: an operator's
// "Connect" on the console's Connections page. Each is Login itself, run
// in the background, so the discovery, the client chosen, PKCE S256, the
// state, the resource parameter and the RFC 9207 iss check are exactly
// `backplane servers login`'s; only the redirect differs: it comes back
// to the gateway's callback (serve's server.PathUpstreamCallback, which
// is also the per_caller logins'; Handles tells them apart by state)
// instead of a loopback listener, so the browser may be anywhere the
// gateway's public URL reaches. A client registered in advance must list
// that callback among its redirect URIs; one registered at login (RFC
// 7591) is registered with it.
//
// A flow runs in the process that started it (the SDK's handler holds its
// PKCE verifier and client), for its TTL. Without a LoginStore the
// callback has to reach that process. With one (the gateway's store,
// sealed, which replicas share) the callback may reach any replica: the
// flow is recorded there under its state, and a callback elsewhere takes
// that record (once: a replayed redirect finds none and is refused) and
// relays the redirect's query through the store to the process running
// the flow, which polls for it, checks it exactly as it checks a redirect
// of its own (state, iss, then the code exchange with the verifier and
// resource), saves the token and relays its outcome back. The token is
// handed to the save function given to Start (the gateway saves it sealed
// in the store, which replicas share). Safe for concurrent use.
type ServiceLogins struct {
	redirect  string
	ttl       time.Duration
	transport http.RoundTripper
	store     LoginStore // nil: the flows are this process's only

	ctx    context.Context // ends every flow at Close
	cancel context.CancelFunc

	mu    sync.Mutex
	flows map[string]*serviceFlow // by state
}

type serviceFlow struct {
	server  string
	cb      *callback
	done    chan struct{} // closed when Login and save have ended
	err     error         // why it failed, once done
	shared  bool          // recorded in the LoginStore (set before the flow is in flows)
	relayed atomic.Bool   // its redirect came from another replica's callback
}

// The LoginStore keys of a service flow: the flow, the redirect relayed to
// it, and its outcome relayed back. Prefixed, so that no per_caller
// callback takes them for a caller's login.
const serviceStatePrefix = "backplane-service-login:"

func flowKey(state string) string   { return serviceStatePrefix + "flow:" + state }
func relayKey(state string) string  { return serviceStatePrefix + "relay:" + state }
func resultKey(state string) string { return serviceStatePrefix + "result:" + state }

// The outcome relayed back, in PendingLogin.URL: resultOK, or resultErr
// and the error's text (Login's errors hold nothing secret).
const (
	resultOK  = "ok"
	resultErr = "error:"
)

// ServiceLoginsOptions configure NewServiceLogins.
type ServiceLoginsOptions struct {
	// RedirectURL is the callback's public URL (serve's URL and
	// server.PathUpstreamCallback). Without it every Start fails.
	RedirectURL string
	// TTL bounds a flow, from Start to the token saved (DefaultLoginTTL).
	TTL time.Duration
	// Transport carries Login's requests (LoginOptions.Transport).
	Transport http.RoundTripper
	// Store, shared by the replicas, lets a callback at any of them
	// complete a flow (see ServiceLogins); nil keeps the flows in this
	// process's memory only.
	Store LoginStore
}

// NewServiceLogins returns an empty set of flows; Close ends them.
func NewServiceLogins(opts *ServiceLoginsOptions) *ServiceLogins {
	l := &ServiceLogins{ttl: DefaultLoginTTL, flows: map[string]*serviceFlow{}}
	if opts != nil {
		l.redirect, l.transport, l.store = opts.RedirectURL, opts.Transport, opts.Store
		if opts.TTL > 0 {
			l.ttl = opts.TTL
		}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// Close ends every flow in progress (their Login fails; nothing is saved).
func (l *ServiceLogins) Close() error {
	l.cancel()
	return nil
}

// Start begins srv's login and returns the authorization URL to send the
// operator's browser to, once Login has built it (ctx bounds that wait
// only: the flow runs on, for the TTL, until the redirect comes back to
// Complete). save is handed the token Login got, from the flow's
// goroutine; its error, or Login's, is the flow's, which Complete
// returns. An error before the URL (the server or its authorization
// server unreachable, no metadata, no usable client) is Start's.
func (l *ServiceLogins) Start(ctx context.Context, srv Server, save func(context.Context, StoredToken) error) (string, error) {
	if l.redirect == "" {
		return "", fmt.Errorf("upstream %s: %w: %w", srv.Name, ErrLogin, ErrNoCallback)
	}
	if save == nil {
		return "", fmt.Errorf("upstream %s: %w: nowhere to save the token", srv.Name, ErrLogin)
	}
	f := &serviceFlow{server: srv.Name, cb: newCallback(), done: make(chan struct{})}
	shown := make(chan string, 1)
	ended := make(chan error, 1)
	var state string
	fctx, cancel := context.WithTimeout(l.ctx, l.ttl) // the flow outlives the request that started it
	go func() {
		defer cancel()
		st, err := Login(fctx, srv, &LoginOptions{
			Transport: l.transport, redirect: l.redirect, cb: f.cb,
			Show: func(authURL string) {
				if u, err := url.Parse(authURL); err == nil {
					state = u.Query().Get("state")
				}
				if l.store != nil && state != "" {
					now := time.Now()
					err := l.store.AddLogin(fctx, flowKey(state), PendingLogin{Server: srv.Name, Redirect: l.redirect, Created: now, Expires: now.Add(l.ttl)}, 0)
					f.shared = err == nil // else only this process's callback completes it
					if f.shared {
						go l.awaitRelay(fctx, state, f)
					}
				}
				l.mu.Lock()
				l.flows[state] = f
				l.mu.Unlock()
				shown <- authURL
			},
		})
		if err == nil {
			err = save(fctx, st)
		}
		if f.shared {
			l.settle(state, f, err)
		}
		l.mu.Lock()
		if l.flows[state] == f {
			delete(l.flows, state)
		}
		l.mu.Unlock()
		f.err = err
		close(f.done)
		ended <- err
	}()
	select {
	case u := <-shown:
		return u, nil
	case err := <-ended:
		if err == nil {
			err = fmt.Errorf("upstream %s: %w: it ended without an authorization URL", srv.Name, ErrLogin)
		}
		return "", err
	case <-ctx.Done():
		cancel()
		return "", ctx.Err()
	}
}

// awaitRelay waits, for the flow's life, for a redirect another replica's
// callback relays to f, and hands it to f's callback as if it had come
// here: the same state and iss checks, the same exchange.
func (l *ServiceLogins) awaitRelay(ctx context.Context, state string, f *serviceFlow) {
	t := time.NewTicker(loginPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.done:
			return
		case <-t.C:
		}
		p, err := l.store.TakeLogin(ctx, relayKey(state))
		if err != nil {
			continue // none yet (or the store is unreachable for now)
		}
		q, err := url.ParseQuery(p.URL)
		if err != nil {
			q = url.Values{"state": {state}, "error": {"invalid_request"}, "error_description": {"the relayed redirect does not parse"}}
		}
		f.relayed.Store(true)
		f.cb.deliver(q)
		return
	}
}

// settle tidies a shared flow's record once it has ended and, when its
// redirect was relayed, relays its outcome back to the waiting callback.
func (l *ServiceLogins) settle(state string, f *serviceFlow, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.store.TakeLogin(ctx, flowKey(state)) // gone already when a callback took it
	if !f.relayed.Load() {
		return
	}
	out := resultOK
	if err != nil {
		out = resultErr + err.Error()
	}
	now := time.Now()
	l.store.AddLogin(ctx, resultKey(state), PendingLogin{Server: f.server, URL: out, Created: now, Expires: now.Add(completeWait)}, 0)
}

// Handles reports whether state is a flow's of these logins in this
// process (a flow another replica started, kept in the LoginStore, is
// not known here until Complete takes it).
func (l *ServiceLogins) Handles(state string) bool {
	if state == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.flows[state]
	return ok
}

// ErrNoServiceLogin: the redirect names no flow in progress here (nor, with
// a LoginStore, at any replica).
var ErrNoServiceLogin = errors.New("no sign-in of the gateway's is waiting for this redirect (expired, already used, or started on another replica)")

// completeWait bounds Complete's wait for the code exchange and the save.
const completeWait = time.Minute

// Complete hands the authorization server's redirect r to its flow and
// waits for the flow to end: it returns the server's name and nil once
// the token is saved, else why not (the authorization server's refusal,
// a wrong iss, a failed exchange). The state is used once. With a
// LoginStore, a flow another replica runs is completed there: its record
// is taken (once), the redirect relayed to it, and its outcome awaited.
// ErrNoServiceLogin when the state is no flow's (then it may be a
// per_caller login's).
func (l *ServiceLogins) Complete(r *http.Request) (server string, err error) {
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		return "", ErrNoServiceLogin
	}
	l.mu.Lock()
	f, ok := l.flows[state]
	l.mu.Unlock()
	if !ok && l.store != nil {
		return l.relay(r, state)
	}
	if !ok {
		return "", ErrNoServiceLogin
	}
	if f.shared {
		// The store's record is the one-time gate wherever the redirect lands.
		if _, err := l.store.TakeLogin(r.Context(), flowKey(state)); errors.Is(err, ErrNoLogin) {
			return "", ErrNoServiceLogin
		} else if err != nil {
			return f.server, fmt.Errorf("upstream %s: %w: reading the sign-in in progress: %v", f.server, ErrLogin, err)
		}
	}
	if status, msg := f.cb.deliver(q); status != http.StatusOK {
		return f.server, errors.New(msg)
	}
	t := time.NewTimer(completeWait)
	defer t.Stop()
	select {
	case <-f.done:
		return f.server, f.err
	case <-t.C:
		return f.server, fmt.Errorf("upstream %s: %w: the token exchange did not end within %s", f.server, ErrLogin, completeWait)
	case <-r.Context().Done():
		return f.server, r.Context().Err()
	}
}

// relay completes, from this replica's callback, a flow another replica
// runs: it takes the flow's record (so a replay finds none), relays the
// redirect's query and waits for the outcome.
func (l *ServiceLogins) relay(r *http.Request, state string) (string, error) {
	ctx := r.Context()
	p, err := l.store.TakeLogin(ctx, flowKey(state))
	switch {
	case errors.Is(err, ErrNoLogin):
		return "", ErrNoServiceLogin
	case err != nil:
		return "", fmt.Errorf("%w: reading the sign-in in progress: %v", ErrLogin, err)
	case !time.Now().Before(p.Expires):
		return p.Server, fmt.Errorf("upstream %s: %w: the sign-in took longer than its link lasts (%s)", p.Server, ErrLogin, l.ttl)
	}
	now := time.Now()
	if err := l.store.AddLogin(ctx, relayKey(state), PendingLogin{Server: p.Server, URL: r.URL.RawQuery, Created: now, Expires: now.Add(completeWait)}, 0); err != nil {
		return p.Server, fmt.Errorf("upstream %s: %w: handing the redirect on: %v", p.Server, ErrLogin, err)
	}
	t := time.NewTicker(loginPoll)
	defer t.Stop()
	deadline := time.NewTimer(completeWait)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return p.Server, ctx.Err()
		case <-deadline.C:
			return p.Server, fmt.Errorf("upstream %s: %w: the replica that started the sign-in did not end it within %s", p.Server, ErrLogin, completeWait)
		case <-t.C:
		}
		res, err := l.store.TakeLogin(ctx, resultKey(state))
		if err != nil {
			continue
		}
		if res.URL == resultOK {
			return p.Server, nil
		}
		return p.Server, errors.New(strings.TrimPrefix(res.URL, resultErr))
	}
}
