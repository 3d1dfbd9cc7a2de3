package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Limits of the HTTP face: what one caller, one connection or one browser
// page can hold or do.

// Defaults of the limits.
const (
	// DefaultSessionIdleTimeout closes an HTTP session that received no
	// request for this long: an abandoned session (~40 KB and a few
	// goroutines) is not held forever.
	DefaultSessionIdleTimeout = 30 * time.Minute
	// DefaultMaxSessionsPerCaller bounds the HTTP sessions one caller holds
	// open at once; an initialize beyond it is answered 429.
	DefaultMaxSessionsPerCaller = 16
	// DefaultReadHeaderTimeout bounds the reading of a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadBodyTimeout bounds the reading of a request's body (a
	// slow-body POST is cut). It does not apply once the body is read: a
	// response stream is not a read.
	DefaultReadBodyTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection that carries no
	// request for this long.
	DefaultIdleTimeout = 20 * time.Second
	// DefaultWriteTimeout bounds the writing of a response of /metrics and
	// /healthz. /mcp has none: its responses are event streams that last
	// as long as a call (which has its own deadline) or a session.
	DefaultWriteTimeout = 30 * time.Second
)

// HTTPTimeouts are the HTTP server's timeouts; zero fields mean the
// defaults above.
type HTTPTimeouts struct {
	ReadHeader, ReadBody, Idle, Write time.Duration
}

func (t HTTPTimeouts) withDefaults() HTTPTimeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.ReadHeader, DefaultReadHeaderTimeout)
	def(&t.ReadBody, DefaultReadBodyTimeout)
	def(&t.Idle, DefaultIdleTimeout)
	def(&t.Write, DefaultWriteTimeout)
	return t
}

// sessions tracks whose each HTTP session is, for the per-caller cap.
type sessions struct {
	mu      sync.Mutex
	owner   map[string]string // session id -> caller
	pending map[string]int    // caller -> sessions being created, not yet recorded
	// converted counts, per caller, requests whose session was recorded
	// (it moved from pending to owner) while the request still runs: the
	// client may send its next initialize before the handler returns.
	converted map[string]int
}

// recordSession notes that the session ss (just initialized) is caller's.
func (s *Server) recordSession(ss *mcp.ServerSession, caller string) {
	if ss == nil || ss.ID() == "" {
		return // stdio: one session, nothing to bound
	}
	s.sessionOpened(ss)
	s.sess.mu.Lock()
	s.sess.owner[ss.ID()] = caller
	if s.sess.pending[caller] > 0 {
		s.sess.pending[caller]--
		s.sess.converted[caller]++
	}
	s.sess.mu.Unlock()
}

// liveSessions counts caller's open HTTP sessions, forgetting the closed
// ones. The caller holds s.sess.mu.
func (s *Server) liveSessionsLocked(caller string) int {
	live := map[string]bool{}
	for ss := range s.http.Sessions() {
		live[ss.ID()] = true
	}
	n := 0
	for id, c := range s.sess.owner {
		switch {
		case !live[id]:
			delete(s.sess.owner, id)
		case c == caller:
			n++
		}
	}
	return n
}

// SessionCount returns how many HTTP sessions caller holds open.
func (s *Server) SessionCount(caller string) int {
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	return s.liveSessionsLocked(caller)
}

// limitSessions answers 429 to a request that would open a session (a POST
// without Mcp-Session-Id) when its caller already holds the most allowed,
// counting those being opened.
func (s *Server) limitSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		max := s.opts.MaxSessionsPerCaller
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || max < 0 {
			next.ServeHTTP(w, r)
			return
		}
		id, _ := identFrom(r.Context()) // requireToken put it there
		caller := id.caller
		s.sess.mu.Lock()
		open := s.liveSessionsLocked(caller) + s.sess.pending[caller]
		if open >= max {
			s.sess.mu.Unlock()
			s.refusals.warn(s.log, "sessions "+caller, "session refused: the caller holds the most sessions allowed", "caller", caller, "open", open, "max", max)
			w.Header().Set("Retry-After", "60")
			http.Error(w, fmt.Sprintf(
				"caller %s already holds %d MCP sessions, the most allowed (serve.max_sessions_per_caller): end one with DELETE, or wait for an idle one to close (serve.session_idle_timeout)",
				caller, open), http.StatusTooManyRequests)
			return
		}
		s.sess.pending[caller]++
		s.sess.mu.Unlock()
		defer func() {
			s.sess.mu.Lock()
			if s.sess.converted[caller] > 0 {
				if s.sess.converted[caller]--; s.sess.converted[caller] == 0 {
					delete(s.sess.converted, caller)
				}
			} else if s.sess.pending[caller]--; s.sess.pending[caller] <= 0 {
				delete(s.sess.pending, caller)
			}
			s.sess.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// checkOrigin answers 403 to a request whose Origin header (sent by
// browsers) is neither a loopback origin on the listener's port nor one of
// Options.AllowedOrigins: a web page must not drive the gateway with a
// token it got hold of, nor through DNS rebinding (the MCP transport
// specification: servers MUST validate Origin). A request without Origin
// (a non-browser client) passes.
func (s *Server) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || s.originAllowed(r.Context(), origin) {
			next.ServeHTTP(w, r)
			return
		}
		// One key for every origin: the header is the sender's to vary.
		s.refusals.warn(s.log, "origin", "request refused: origin not allowed", "origin", origin)
		http.Error(w, fmt.Sprintf("Forbidden: origin %q is not allowed (serve.allowed_origins)", origin), http.StatusForbidden)
	})
}

func (s *Server) originAllowed(ctx context.Context, origin string) bool {
	if slices.Contains(s.origins, strings.ToLower(strings.TrimSuffix(origin, "/"))) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	host := u.Hostname()
	ip := net.ParseIP(host)
	if !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
		return false
	}
	// The listener's port: a page served by another local program (another
	// port) is another origin.
	la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	_, lport, err := net.SplitHostPort(la.String())
	if err != nil {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return port == lport
}

// normOrigins lower-cases the configured origins and drops a final slash.
func normOrigins(list []string) []string {
	var out []string
	for _, o := range list {
		out = append(out, strings.ToLower(strings.TrimSuffix(o, "/")))
	}
	return out
}

// streamDeadlines sets the deadlines of one request: its body must be read
// within ReadBody (then the read deadline is lifted, so that a response
// stream is never cut by the connection's reads), and /mcp responses have
// no write deadline (event streams; a call has its own deadline and a
// session its idle timeout), while the others keep the server's.
func (s *Server) streamDeadlines(next http.Handler, stream bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if stream {
			_ = rc.SetWriteDeadline(time.Time{})
		}
		if r.Body == nil || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			_ = rc.SetReadDeadline(time.Now().Add(s.timeouts.ReadBody))
			r.Body = &liftOnEOF{ReadCloser: r.Body, rc: rc}
		}
		next.ServeHTTP(w, r)
	})
}

// liftOnEOF lifts the read deadline once the body has been read whole.
type liftOnEOF struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *liftOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
