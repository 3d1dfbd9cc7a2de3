package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/internal/auththrottle"
	"github.com/agentbackplane/backplane/internal/opauth"
)

// cookieName is the login session cookie.
const cookieName = "backplane_console"

// TokenAuth is an Auth over fixed token tables: operators' tokens to their
// names, and callers' tokens (to refuse them with 403). It is the
// authenticator the server's operator endpoints use too (internal/opauth):
// tokens are looked up by their SHA-256, which keeps the time taken
// independent of how much of a token matches.
type TokenAuth struct{ t *opauth.Tokens }

// NewTokenAuth returns an Auth over operators (token to operator name) and
// callers (token to caller name). A token in both tables is an operator's.
func NewTokenAuth(operators, callers map[string]string) *TokenAuth {
	return &TokenAuth{opauth.New(operators, callers, nil)}
}

// TokenAuthOf is the Auth over t, the tokens (and the count of wrong ones)
// the server was handed too (server.Options.TokenAuth), so that a guesser
// gets no more tries at the console than at /mcp. Within this module only
// (internal/opauth).
func TokenAuthOf(t *opauth.Tokens) *TokenAuth { return &TokenAuth{t} }

// Operator implements Auth.
func (a *TokenAuth) Operator(token string) (string, bool) { return a.t.Operator(token) }

// IsCaller implements Auth.
func (a *TokenAuth) IsCaller(token string) bool { return a.t.IsCaller(token) }

// Blocked implements Auth.
func (a *TokenAuth) Blocked(token string) (time.Duration, bool) { return a.t.Blocked(token) }

// Fail implements Auth.
func (a *TokenAuth) Fail(token string) bool { return a.t.Fail(token) }

// session is one login.
type session struct {
	operator string
	expires  time.Time
	created  time.Time
}

// sessions keeps logins server-side; the browser holds only a random id.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
	max int
	now func() time.Time
}

func (s *sessions) create(operator string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
	for len(s.m) >= s.max {
		var oldest string
		var at time.Time
		for k, v := range s.m {
			if oldest == "" || v.created.Before(at) {
				oldest, at = k, v.created
			}
		}
		delete(s.m, oldest)
	}
	s.m[id] = &session{operator: operator, created: now, expires: now.Add(s.ttl)}
	return id, nil
}

func (s *sessions) lookup(id string) (string, bool) {
	if len(id) != 64 {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok {
		return "", false
	}
	if !s.now().Before(v.expires) {
		delete(s.m, id)
		return "", false
	}
	return v.operator, true
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

type operatorKey struct{}

// operatorOf is the operator a request was authenticated as.
func operatorOf(ctx context.Context) string {
	name, _ := ctx.Value(operatorKey{}).(string)
	return name
}

// authResult is what authenticate found.
type authResult int

const (
	authNone      authResult = iota // no credentials, or unknown ones
	authCaller                      // a caller's token: 403
	authThrottled                   // a token whose key failed too often: 429
	authOK
)

// authenticate reads the bearer token or the session cookie.
func (c *Console) authenticate(r *http.Request) (string, authResult) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := bearer(h)
		if !ok {
			return "", authNone
		}
		// A blocked token is not even checked: a right guess among wrong
		// ones must not get through (see internal/auththrottle).
		if _, blocked := c.auth.Blocked(tok); blocked {
			return "", authThrottled
		}
		if name, ok := c.auth.Operator(tok); ok {
			return name, authOK
		}
		if c.auth.IsCaller(tok) {
			return "", authCaller
		}
		c.auth.Fail(tok)
		return "", authNone
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		if name, ok := c.sessions.lookup(ck.Value); ok {
			return name, authOK
		}
	}
	return "", authNone
}

func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// requireOperator lets through only requests authenticated as an operator.
// A caller's token gets 403; no or unknown credentials get 401, or a
// redirect to the login form for a browser asking for a page.
func (c *Console) requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, res := c.authenticate(r)
		switch res {
		case authOK:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, name)))
		case authCaller:
			c.fail(w, r, http.StatusForbidden, "this is a caller's token: the console is for operators only (configure operators: in the configuration)")
		case authThrottled:
			c.tooMany(w, r)
		default:
			if r.Method == http.MethodGet && !wantsJSON(r) && r.Header.Get("Authorization") == "" {
				http.Redirect(w, r, Prefix+"/login?next="+url.QueryEscape(safeNext(r.URL.RequestURI())), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="backplane console"`)
			c.fail(w, r, http.StatusUnauthorized, "an operator's token is required")
		}
	})
}

// checkHost refuses a request whose Host is not allowed: a page on another
// site that resolves its own name to 127.0.0.1 (DNS rebinding) must not
// reach the console.
func (c *Console) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.hostAllowed(r.Host) {
			http.Error(w, "this host name is not allowed", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *Console) hostAllowed(hostport string) bool {
	if c.anyHost {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	_, ok := c.hosts[strings.ToLower(host)]
	return ok
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "/approvals"
	}
	return next
}

// tooMany refuses a request whose token is blocked by the throttle of
// failed tokens (429, with when to try again).
func (c *Console) tooMany(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", strconv.Itoa(int(auththrottle.Window/time.Second)))
	c.log.Warn("console: token refused: too many failures with tokens that start like it", "remote", r.RemoteAddr)
	c.fail(w, r, http.StatusTooManyRequests, "too many wrong tokens that start like this one: wait and try again")
}
