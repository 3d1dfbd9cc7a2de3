package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/internal/mcpstream"
	"github.com/agentbackplane/backplane/oauth"
	"github.com/agentbackplane/backplane/opsview"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Paths of the HTTP handler.
const (
	PathMCP     = "/mcp"
	PathMetrics = "/metrics"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathConsole = "/ui"
	// PathUpstreamCallback is where an upstream server's authorization
	// server sends a caller's browser back (Options.UpstreamCallback).
	PathUpstreamCallback = "/oauth/upstream/callback"
)

// Handler is the HTTP face of the server: streamable HTTP MCP at /mcp and
// /metrics, both behind bearer-token authentication, and /healthz, open.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// requireToken authenticates (auth.go) and answers 401 with a
	// WWW-Authenticate challenge; the SDK's own middleware after it puts
	// the caller where the MCP handlers (callerFromToken) and the session
	// binding (a session answers only to the caller that opened it) read it.
	// A 2026-07-28 request (modern.go) has no session: neither the
	// session cap nor the tracking of a session's requests applies.
	legacy := s.limitSessions(s.sdkAuth()(s.trackRequests(s.checkRequestIDs(s.httpHandler))))
	// A 2026-07-28 tools/call is served by the fast path (fastpath.go),
	// every other 2026-07-28 request by the SDK's stateless handler; the
	// Mcp-Param-* headers of a call are checked before either.
	modern := s.sdkAuth()(s.checkParamHeaders(s.fastCalls(s.checkRequestIDs(s.checkTaskName(s.modernHandler)))))
	mux.Handle(PathMCP, s.streamDeadlines(s.checkOrigin(s.requireToken(s.rateLimitHTTP(s.routeEra(modern, legacy)))), true))
	s.serveMetadata(mux)
	s.serveHooks(mux)
	// The metrics name callers and tools: operators only.
	mux.Handle(PathMetrics, s.streamDeadlines(s.RequireOperator(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})), false))
	mux.Handle(PathHealthz, s.streamDeadlines(http.HandlerFunc(s.healthz), false))
	mux.Handle(PathReadyz, s.streamDeadlines(http.HandlerFunc(s.readyz), false))
	if s.opts.UpstreamCallback != nil {
		// Open: a browser arrives from the authorization server without a
		// token; the state it carries is what binds it to a caller.
		mux.Handle("GET "+PathUpstreamCallback, s.streamDeadlines(s.opts.UpstreamCallback, false))
	}
	if s.opts.Console != nil {
		// The console's live page is an event stream: no write deadline.
		// Its browser requests pass the same Origin check as /mcp's.
		console := s.streamDeadlines(s.checkOrigin(s.opts.Console), true)
		mux.Handle(PathConsole, console)
		mux.Handle(PathConsole+"/", console)
	}
	return mux
}

// maxIDCheckBytes is as much of a POST body as checkRequestIDs reads: the
// SDK's own limit, beyond which it answers 413 itself.
const maxIDCheckBytes = 4 << 20

// peekBody reads up to maxIDCheckBytes of r's body for a check, and puts
// what it read back in front of the rest, so that the next handler reads
// the body whole. ok is false for a body too large to check, or one that
// could not be read: the next handler (the SDK) answers those (413, or
// its own error).
func peekBody(r *http.Request) (body []byte, ok bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxIDCheckBytes+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	return body, err == nil && len(body) <= maxIDCheckBytes
}

// checkRequestIDs answers -32600 (HTTP 400, id null) a POST whose request
// id the SDK's answer would not carry back as sent: a lone surrogate
// escape or invalid UTF-8 in a string id (the SDK decodes it as U+FFFD,
// another id) or a number a float64 does not hold. The stdio transport
// refuses the same ids (package mcpstream); everything else about the
// body is left to the SDK.
func (s *Server) checkRequestIDs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, ok := peekBody(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		if err := mcpstream.CheckRequestIDs(body, maxIDCheckBytes+1); err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			msg, _ := json.Marshal("Invalid Request: " + err.Error())
			w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":` + string(msg) + `}}` + "\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireToken refuses, with 401, a request it cannot authenticate
// (authenticate), and passes on who the others are.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A token that starts like ones that failed too often is refused
		// unchecked (a right guess among wrong ones must not pass), and
		// every other token is checked as usual: a flood of wrong tokens
		// does not lock out the holders of right ones (internal/auththrottle).
		token, hasToken := bearer(r.Header.Get("Authorization"))
		if hasToken {
			if left, blocked := s.opAuth.Blocked(token); blocked {
				w.Header().Set("Retry-After", strconv.Itoa(int(max(left.Round(time.Second)/time.Second, 1))))
				http.Error(w, "too many wrong bearer tokens that start like this one: wait and try again", http.StatusTooManyRequests)
				return
			}
		}
		id, err := s.authenticate(r)
		if err != nil && hasToken {
			if s.opAuth.Fail(token) {
				s.log.Warn("bearer tokens that start alike failed too often: they are refused for a while", "remote", r.RemoteAddr)
			}
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", s.challenge(err))
			msg := "a valid bearer token is required"
			switch {
			case len(s.tokens) == 0 && s.opts.OAuth == nil && s.opts.AnonymousCaller == "" && s.opts.CertCaller == "":
				msg = "no tokens are configured (serve.tokens): every request is refused"
			case errors.Is(err, oauth.ErrInvalidToken):
				msg = err.Error()
			}
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identKey{}, id)))
	})
}

func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// healthz is liveness: 200 unless a store check fails (the store does not
// answer, may not serve, or the gateway's last write to it failed), 503
// then. An upstream that is down leaves it 200, with the state
// "degraded" (or "not_ready" for a required one): restarting the
// gateway would not bring the upstream back. It is open to anyone who
// can reach the port, so it says only the overall state and each
// upstream's name and whether it is up, never why (an error may name
// paths or hosts): the console's health page has the reasons.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.health(w, r, opsview.Healthy)
}

// readyz is readiness: 503 also while an upstream marked required is
// down, so that a load balancer sends calls elsewhere.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	s.health(w, r, opsview.Ready)
}

// healthBody is what /healthz and /readyz answer.
type healthBody struct {
	OK        bool              `json:"ok"`
	State     string            `json:"state"`
	Upstreams map[string]string `json:"upstreams,omitempty"` // name -> "up" or "down"
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, pass func([]opsview.HealthCheck) error) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// The same checks as the console's health page (gateway.CheckHealth).
	checks := s.g.CheckHealth(ctx)
	err := pass(checks)
	body := healthBody{OK: err == nil, State: opsview.State(checks)}
	for _, c := range checks {
		if c.Upstream == "" {
			continue
		}
		if body.Upstreams == nil {
			body.Upstreams = map[string]string{}
		}
		body.Upstreams[c.Upstream] = map[bool]string{true: "up", false: "down"}[c.Err == nil]
	}
	b, _ := json.Marshal(body)
	if err != nil {
		s.refusals.warn(s.log, "health "+r.URL.Path, "health check failed", "path", r.URL.Path, "error", err)
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	w.Write(append(b, '\n'))
}

// ServeHTTP serves Handler on ln until Shutdown, which stops accepting
// connections and ends the server. It returns nil as soon as Shutdown
// begins (as http.Server.Serve does): wait for Shutdown to return. It
// returns ErrServerClosed at once when the server is already shut down, and
// any error serving ln otherwise. It logs, at start, where it listens and,
// when no token is configured, that every request will be refused.
func (s *Server) ServeHTTP(ln net.Listener) error {
	// ReadTimeout is left unset: it would also bound the reads that watch a
	// response stream's connection, and cut it; each request's body read
	// is bounded instead (streamDeadlines), and so is /mcp's write.
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.timeouts.ReadHeader,
		IdleTimeout:       s.timeouts.Idle,
		WriteTimeout:      s.timeouts.Write,
	}
	if c, ok := s.opts.Console.(interface{ Close() }); ok {
		hs.RegisterOnShutdown(c.Close)
	}
	if err := s.checkAnonymousListener(ln.Addr()); err != nil {
		return err
	}
	if !s.addHTTPServer(hs) {
		return ErrServerClosed
	}
	if len(s.tokens) == 0 && s.opts.OAuth == nil && s.opts.AnonymousCaller == "" && s.opts.CertCaller == "" {
		s.log.Warn("no bearer tokens are configured (serve.tokens): every HTTP request will be refused with 401")
	}
	scheme := "http://"
	if s.opts.TLS != nil {
		scheme = "https://"
		hs.TLSConfig = s.opts.TLS
		// A failed handshake (a plain HTTP request, a client certificate
		// that does not verify) is the client's; net/http logs each one,
		// which a scanner could turn into a flood: they go through the
		// throttled refusal log instead.
		hs.ErrorLog = log.New(&handshakeLog{s: s}, "", 0)
	}
	s.log.Info("serving MCP over streamable HTTP", append([]any{"url", scheme + ln.Addr().String() + PathMCP,
		"metrics", scheme + ln.Addr().String() + PathMetrics, "callers", s.describeTokens()}, s.describeAuth()...)...)
	var err error
	if s.opts.TLS != nil {
		err = hs.ServeTLS(ln, "", "")
	} else {
		err = hs.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
