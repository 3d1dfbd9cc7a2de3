package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
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
// The flows in progress are kept in this process's memory, for their
// TTL: the callback has to reach the replica the operator clicked on. The
// token is handed to the save function given to Start (the gateway saves
// it sealed in the store, which replicas share). Safe for concurrent use.
type ServiceLogins struct {
	redirect  string
	ttl       time.Duration
	transport http.RoundTripper

	ctx    context.Context // ends every flow at Close
	cancel context.CancelFunc

	mu    sync.Mutex
	flows map[string]*serviceFlow // by state
}

type serviceFlow struct {
	server string
	cb     *callback
	done   chan struct{} // closed when Login and save have ended
	err    error         // why it failed, once done
}

// ServiceLoginsOptions configure NewServiceLogins.
type ServiceLoginsOptions struct {
	// RedirectURL is the callback's public URL (serve's URL and
	// server.PathUpstreamCallback). Without it every Start fails.
	RedirectURL string
	// TTL bounds a flow, from Start to the token saved (DefaultLoginTTL).
	TTL time.Duration
	// Transport carries Login's requests (LoginOptions.Transport).
	Transport http.RoundTripper
}

// NewServiceLogins returns an empty set of flows; Close ends them.
func NewServiceLogins(opts *ServiceLoginsOptions) *ServiceLogins {
	l := &ServiceLogins{ttl: DefaultLoginTTL, flows: map[string]*serviceFlow{}}
	if opts != nil {
		l.redirect, l.transport = opts.RedirectURL, opts.Transport
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
				l.mu.Lock()
				l.flows[state] = f
				l.mu.Unlock()
				shown <- authURL
			},
		})
		if err == nil {
			err = save(fctx, st)
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

// Handles reports whether state is a flow's of these logins (else the
// callback is someone else's: a per_caller login's).
func (l *ServiceLogins) Handles(state string) bool {
	if state == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.flows[state]
	return ok
}

// ErrNoServiceLogin: the redirect names no flow in progress here.
var ErrNoServiceLogin = errors.New("no sign-in of the gateway's is waiting for this redirect (expired, already used, or started on another replica)")

// completeWait bounds Complete's wait for the code exchange and the save.
const completeWait = time.Minute

// Complete hands the authorization server's redirect r to its flow and
// waits for the flow to end: it returns the server's name and nil once
// the token is saved, else why not (the authorization server's refusal,
// a wrong iss, a failed exchange). The state is used once.
func (l *ServiceLogins) Complete(r *http.Request) (server string, err error) {
	q := r.URL.Query()
	l.mu.Lock()
	f, ok := l.flows[q.Get("state")]
	l.mu.Unlock()
	if !ok {
		return "", ErrNoServiceLogin
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
