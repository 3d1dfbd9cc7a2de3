package server

import (
	"context"
	"crypto/rand"
	"net/http"

	"github.com/agentbackplane/backplane/internal/opauth"
)

// Operators are authenticated by their own bearer tokens
// ([Options.Operators]), separate from callers': an operator may read
// /metrics (and the console's pages), a caller may not (403). Tokens are
// told apart by internal/opauth, the console's and the CLI's authenticator
// too.

// Operator authenticates an operator's request by its bearer token. It
// returns the operator's name and 200, or 401 (no token, or one nobody
// has), 403 (a caller's token: callers are not operators) or 429 (a token
// that starts like ones that failed too often: the throttle /mcp uses).
func (s *Server) Operator(r *http.Request) (string, int) {
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return "", http.StatusUnauthorized
	}
	if _, blocked := s.opAuth.Blocked(token); blocked {
		return "", http.StatusTooManyRequests
	}
	name, status := s.OperatorOfToken(token)
	if status == http.StatusUnauthorized {
		s.opAuth.Fail(token)
	}
	return name, status
}

// OperatorOfToken is [Server.Operator] for a token obtained otherwise (a
// console's login form).
func (s *Server) OperatorOfToken(token string) (string, int) {
	switch who, name := s.opAuth.Check(token); who {
	case opauth.Operator:
		return name, http.StatusOK
	case opauth.Caller:
		return "", http.StatusForbidden
	}
	return "", http.StatusUnauthorized
}

type operatorKey struct{}

// OperatorFrom returns the operator RequireOperator authenticated.
func OperatorFrom(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(operatorKey{}).(string)
	return name, ok
}

// RequireOperator lets through only requests bearing an operator's token:
// 401 without a valid token, 403 for a caller's.
func (s *Server) RequireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, status := s.Operator(r)
		switch status {
		case http.StatusOK:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, name)))
			return
		case http.StatusForbidden:
			http.Error(w, "this is for operators: a caller's token is not an operator's", http.StatusForbidden)
			return
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", "60")
			http.Error(w, "too many wrong bearer tokens that start like this one: wait and try again", http.StatusTooManyRequests)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="backplane-operators", error="invalid_token"`)
		msg := "an operator's bearer token is required"
		if s.opAuth.Operators() == 0 {
			msg = "no operator tokens are configured (operators:): every request is refused"
		}
		http.Error(w, msg, http.StatusUnauthorized)
	})
}

// requestHeader is the header, set by the server itself on every /mcp
// request (any value a client sent is replaced), that lets a tools/call
// find the HTTP request it came in on: a call ends when its client's
// request does (a disconnect), not only on notifications/cancelled.
const requestHeader = "X-Backplane-Http-Request"

// trackRequests registers each /mcp request's context under a fresh id.
func (s *Server) trackRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := rand.Text()
		r.Header.Set(requestHeader, id)
		s.httpRequests.Store(id, r.Context())
		defer s.httpRequests.Delete(id)
		// A GET with Last-Event-ID resumes a stream: its client is back;
		// only when it is the session's own caller's (the SDK refuses
		// another's after this, but a call must not be kept by it).
		resuming := r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" &&
			s.ownsSession(r.Context(), r.Header.Get("Mcp-Session-Id"))
		defer s.sessionRequest(r.Header.Get("Mcp-Session-Id"), resuming, r.Context())()
		// A session with a request in progress (a stream included) is in
		// use: never the one closed to make room (sessions.go).
		if session := r.Header.Get("Mcp-Session-Id"); session != "" && s.ownsSession(r.Context(), session) {
			s.sessionActive(session, 1)
			defer s.sessionActive(session, -1)
		}
		if resuming {
			s.serveResumption(next, w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// httpRequestContext is the context of the HTTP request a call came in on.
// A call whose request has already ended (its client went away before the
// handler started, as after a stream's first, priming event) gets a done
// context: the header is set on every /mcp request, so its id without an
// entry means the request is over, not that there was none.
func (s *Server) httpRequestContext(h http.Header) (context.Context, bool) {
	if h == nil {
		return nil, false
	}
	id := h.Get(requestHeader)
	if id == "" {
		return nil, false
	}
	v, ok := s.httpRequests.Load(id)
	if !ok {
		return endedRequest, true
	}
	return v.(context.Context), true
}

// endedRequest stands for an HTTP request that is over.
var endedRequest = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
