package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Authentication of /mcp. A request is authenticated once, by
// authenticate, in requireToken; what it found travels in the request's
// context to the session limit and to the SDK's middleware, which binds
// sessions to the caller. The ways, in order:
//
//   - no Authorization header: the caller a verified client certificate
//     names (Options.CertCaller, tlscaller.go), else
//     Options.AnonymousCaller, when set and the listener is loopback; 401
//     otherwise;
//   - a static token of Options.Tokens;
//   - a JWT access token Options.OAuth verifies;
//   - anything else: 401, with the challenge naming the protected
//     resource metadata when OAuth is configured.

// ident is who a request was authenticated as.
type ident struct {
	caller string
	expiry time.Time // a JWT's exp; zero for static tokens and anonymous
	scopes []string
	// jwt is the bearer token when it was verified as a JWT (serve.oauth),
	// for a backend that exchanges it (tool.Call.CallerToken); "" for a
	// static token, which never leaves the gateway.
	jwt string
}

// tokenExtraJWT is where the caller's verified JWT travels in the SDK's
// TokenInfo, from the HTTP middleware to the tools/call handler.
const tokenExtraJWT = "backplane.caller_jwt"

// callerJWT is the verified JWT of the request that carried req.
func callerJWT(req mcp.Request) string {
	if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil {
		s, _ := ex.TokenInfo.Extra[tokenExtraJWT].(string)
		return s
	}
	return ""
}

type identKey struct{}

func identFrom(ctx context.Context) (ident, bool) {
	id, ok := ctx.Value(identKey{}).(ident)
	return id, ok
}

// errNoToken: the request carries no Authorization header.
var errNoToken = errors.New("a bearer token is required")

// anonymousBearer stands, for the SDK's middleware (which needs a bearer
// header to call its verifier), for the absent token of an anonymous
// request. The verifier reads the caller from the context, never this.
const anonymousBearer = "anonymous"

// authenticate says who r is, or why not.
func (s *Server) authenticate(r *http.Request) (ident, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if caller, ok, err := s.certCaller(r); ok || err != nil {
			return ident{caller: caller}, err
		}
		if s.opts.AnonymousCaller != "" && s.anonymousAllowed(r) {
			return ident{caller: s.opts.AnonymousCaller}, nil
		}
		return ident{}, errNoToken
	}
	token, ok := bearer(h)
	if !ok {
		return ident{}, errors.New("the Authorization header is not a bearer token")
	}
	if caller, ok := s.callerOfToken(token); ok {
		return ident{caller: caller}, nil
	}
	if s.opts.OAuth == nil {
		return ident{}, errors.New("unknown token")
	}
	c, err := s.opts.OAuth.Verify(r.Context(), token)
	if err != nil {
		return ident{}, err
	}
	return ident{caller: c.Caller, expiry: c.Expiry, scopes: c.Scopes, jwt: token}, nil
}

// anonymousAllowed checks, request by request, what ServeHTTP checked of
// its listener: an anonymous caller is for loopback connections only.
func (s *Server) anonymousAllowed(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	tcp, ok := la.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// challenge is the WWW-Authenticate header of a 401 (RFC 6750 3, with
// RFC 9728's resource_metadata when OAuth is configured). A request that
// carried no credentials gets no error code (RFC 6750 3.1).
func (s *Server) challenge(err error) string {
	v := `Bearer realm="backplane"`
	if s.opts.OAuth != nil {
		v += fmt.Sprintf(", resource_metadata=%q", s.opts.OAuth.MetadataURL())
	}
	if !errors.Is(err, errNoToken) {
		v += `, error="invalid_token"`
	}
	return v
}

// sdkAuth is the SDK's bearer middleware over what requireToken found: it
// puts the caller where the MCP handlers read it and binds sessions to it.
func (s *Server) sdkAuth() func(http.Handler) http.Handler {
	verify := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		id, ok := identFrom(ctx)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		ti := &auth.TokenInfo{UserID: id.caller, Expiration: id.expiry, Scopes: id.scopes}
		if id.jwt != "" {
			ti.Extra = map[string]any{tokenExtraJWT: id.jwt}
		}
		return ti, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true, ClockSkew: s.leeway()})
	return func(next http.Handler) http.Handler {
		h := verify(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "" {
				r = r.Clone(r.Context())
				r.Header.Set("Authorization", "Bearer "+anonymousBearer)
			}
			h.ServeHTTP(w, r)
		})
	}
}

// leeway is the clock skew the SDK's own expiry check tolerates: the
// verifier's, so that the two agree.
func (s *Server) leeway() time.Duration {
	if s.opts.OAuth == nil {
		return 0
	}
	return s.opts.OAuth.Leeway()
}

// serveMetadata registers the protected resource metadata document, open
// to anyone (it is public: RFC 9728 3).
func (s *Server) serveMetadata(mux *http.ServeMux) {
	if s.opts.OAuth == nil {
		return
	}
	h := s.streamDeadlines(s.opts.OAuth.MetadataHandler(), false)
	for _, p := range s.opts.OAuth.MetadataPaths() {
		mux.Handle(p, h)
	}
}

// checkAnonymousListener refuses to serve an anonymous caller on a
// listener that is not loopback.
func (s *Server) checkAnonymousListener(addr net.Addr) error {
	if s.opts.AnonymousCaller == "" {
		return nil
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return nil
	}
	return fmt.Errorf("server: anonymous caller %q on %s: only a loopback listener may serve requests without a token", s.opts.AnonymousCaller, addr)
}

// describeAuth is for the start-up log.
func (s *Server) describeAuth() []any {
	var a []any
	if s.opts.OAuth != nil {
		a = append(a, "oauth_resource", s.opts.OAuth.Audience(), "resource_metadata", s.opts.OAuth.MetadataURL())
	}
	if s.opts.AnonymousCaller != "" {
		a = append(a, "anonymous_caller", s.opts.AnonymousCaller)
	}
	if s.opts.CertCaller != "" {
		a = append(a, "client_certificate_caller", s.opts.CertCaller)
	}
	return a
}
