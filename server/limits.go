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
	"time"
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
	// open at once; an initialize beyond it closes an idle one (sessions.go).
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
