package assemble

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/console"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/internal/credstore"
	"github.com/agentbackplane/backplane/internal/secrets"
	"github.com/agentbackplane/backplane/store"
)

// openTokens picks where the upstreams' OAuth tokens are kept: sealed in
// the store when secrets: is set, else in memory (each process its own;
// the client credentials grant only, as config refuses an authorization
// code grant without secrets).
func (rt *Runtime) openTokens() error {
	if rt.Config.Secrets == nil {
		rt.Tokens = &upstream.MemoryTokens{}
		return nil
	}
	sl, err := secrets.New(rt.Config.Secrets.Keys...)
	if err != nil {
		return &config.Error{File: rt.Config.Path, Line: rt.Config.Secrets.Line, Msg: err.Error(), Err: err}
	}
	rt.sealed = credstore.New(rt.Store, sl)
	rt.Tokens = rt.sealed
	rt.loginStore = credstore.NewLogins(rt.Store, sl) // upstream_callers.go
	return nil
}

// ErrNoSecrets: the operation needs the secrets: key.
var ErrNoSecrets = errors.New("no secrets: key is configured (upstream tokens are not kept in the store)")

// ResealSecrets seals again, with the first secrets key, every upstream
// token sealed with a previous one, and returns how many it re-sealed
// (`backplane secrets reseal`, the middle step of a key rotation).
func (rt *Runtime) ResealSecrets(ctx context.Context) (int, error) {
	if rt.sealed == nil {
		return 0, ErrNoSecrets
	}
	return rt.sealed.Reseal(ctx)
}

// ErrNotLoginServer: the server named is not one `servers login` applies to.
var ErrNotLoginServer = errors.New("not a server with auth.oauth grant authorization_code")

// LoginServer runs the service mode's authorization code flow for the
// server named (upstream.Login: show is handed the URL to open) and saves
// its token, sealed, where serve reads it. It returns what was saved,
// without the token. The audit records the login (who, which server, the
// scopes granted), never the token.
func (rt *Runtime) LoginServer(ctx context.Context, name, by string, show func(string)) (_ *gateway.Connection, err error) {
	defer func() {
		if err != nil {
			rt.Audit.Warn("connection", "step", "login", "outcome", "failed", "server", name, "by", by, "error", err.Error())
		}
	}()
	srv, err := rt.loginTarget(name)
	if err != nil {
		return nil, err
	}
	st, err := upstream.Login(ctx, srv, &upstream.LoginOptions{Show: show})
	if err != nil {
		return nil, err
	}
	return rt.saveLogin(ctx, name, by, "cli", st)
}

// loginTarget is the server named, when it is one an operator's login
// connects (mode service, grant authorization_code).
func (rt *Runtime) loginTarget(name string) (upstream.Server, error) {
	sc, ok := rt.serverConfig(name)
	if !ok {
		return upstream.Server{}, fmt.Errorf("no server named %s in %s: %w", name, rt.Config.Path, ErrNotLoginServer)
	}
	if sc.OAuth == nil || sc.OAuth.Grant != config.GrantAuthorizationCode {
		return upstream.Server{}, fmt.Errorf("server %s: %w (the client credentials grant needs no login)", name, ErrNotLoginServer)
	}
	srv, _ := rt.serverOptions(sc, SandboxDecision{}, nil)
	return srv, nil
}

// saveLogin saves a login's token where serve reads it (every replica
// sharing the store picks it up at its next read), and audits it.
func (rt *Runtime) saveLogin(ctx context.Context, name, by, via string, st upstream.StoredToken) (*gateway.Connection, error) {
	if err := rt.Tokens.SaveToken(ctx, upstream.TokenKey{Server: name}, st); err != nil {
		return nil, fmt.Errorf("saving the token of %s: %w", name, err)
	}
	rt.Audit.Info("connection", "step", "login", "outcome", "connected", "server", name, "mode", st.Mode,
		"scopes", strings.Join(st.Scopes, " "), "by", by, "via", via)
	rt.late.now(name) // down at start for want of this token: connect it now
	return &gateway.Connection{Server: name, Mode: st.Mode, Scopes: st.Scopes, Expiry: st.Token.Expiry, Updated: st.Updated}, nil
}

// openServiceLogins makes the console's logins (Connect on the
// Connections page), which complete at serve's callback: at any replica
// when the flows are recorded in the store (secrets: set), else at the
// one the operator clicked on.
func (rt *Runtime) openServiceLogins(o *Options) {
	rt.serviceLogins = upstream.NewServiceLogins(&upstream.ServiceLoginsOptions{RedirectURL: o.UpstreamCallback, Store: rt.loginStore})
	rt.closers = append(rt.closers, rt.serviceLogins)
}

// consentServers names the servers an operator's login connects.
func (rt *Runtime) consentServers() []string {
	var out []string
	for _, s := range rt.Config.Servers {
		if s.URL != "" && s.OAuth != nil && (s.OAuth.Mode == config.UpstreamOAuthService || s.OAuth.Mode == "") && s.OAuth.Grant == config.GrantAuthorizationCode {
			out = append(out, s.Name)
		}
	}
	return out
}

// loginCallback is what serve mounts at server.PathUpstreamCallback: the
// console's service logins by their state, else the per_caller logins'
// callback (upstream_callers.go); nil when there is neither.
func (rt *Runtime) loginCallback() http.Handler {
	next := rt.upstreamCallback()
	if len(rt.consentServers()) == 0 || rt.serviceLogins == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Complete knows a flow of another replica's only by taking it
		// from the store, so it is asked first; a state that is no
		// service flow's is the per_caller logins'.
		server, err := rt.serviceLogins.Complete(r)
		if errors.Is(err, upstream.ErrNoServiceLogin) && next != nil {
			next.ServeHTTP(w, r)
			return
		}
		back := console.Prefix + "/connections?connected=" + url.QueryEscape(server)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return // the browser went away
			}
			rt.Log.Warn("upstream login from the console failed", "server", server, "error", err.Error())
			rt.Audit.Warn("connection", "step", "login", "outcome", "failed", "server", server, "via", "console", "error", err.Error())
			if server == "" {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			back = console.Prefix + "/connections?failed=" + url.QueryEscape(server) + "&note=" + url.QueryEscape(err.Error())
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer") // the code and state stay here
		http.Redirect(w, r, back, http.StatusSeeOther)
	})
}

func (rt *Runtime) serverConfig(name string) (config.ServerConfig, bool) {
	for _, s := range rt.Config.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return config.ServerConfig{}, false
}

// connections is the gateway's view of the upstream credentials: the
// store's rows (their plain metadata only), and revocation.
type connections struct{ rt *Runtime }

// ConsentServers is what the gateway asks for its Connect (ConsentServers).
func (c *connections) ConsentServers() []string { return c.rt.consentServers() }

// StartLogin is the gateway's StartConnection: upstream.Login, through
// ServiceLogins, its token saved and audited (by the operator, via the
// console) once the redirect comes back to serve's callback.
func (c *connections) StartLogin(ctx context.Context, server, operator string) (string, error) {
	rt := c.rt
	srv, err := rt.loginTarget(server)
	if errors.Is(err, ErrNotLoginServer) {
		return "", fmt.Errorf("%w: %w", gateway.ErrNoConnection, err)
	}
	if err != nil {
		return "", err
	}
	return rt.serviceLogins.Start(ctx, srv, func(ctx context.Context, st upstream.StoredToken) error {
		_, err := rt.saveLogin(ctx, server, operator, "console", st)
		return err // a failure is audited where the callback learns of it
	})
}

func (c *connections) ListConnections(ctx context.Context, server string) ([]gateway.Connection, error) {
	if c.rt.sealed == nil {
		return nil, nil // in memory: nothing is kept beyond a process
	}
	rows, err := c.rt.Store.ListCredentials(ctx, server)
	if err != nil {
		return nil, err
	}
	out := make([]gateway.Connection, len(rows))
	for i, r := range rows {
		out[i] = gateway.Connection{Server: r.Server, Caller: r.Caller, Mode: r.Mode, Scopes: r.Scopes, Subject: r.Subject, Expiry: r.Expiry, Updated: r.Updated}
	}
	return out, nil
}

// RevokeConnection revokes at the authorization server what it can (the
// token opened with the secrets key, sent to the revocation endpoint
// found at login, as its client), then deletes the row whatever the
// authorization server said: an operator who revokes wants it gone here.
func (c *connections) RevokeConnection(ctx context.Context, server, caller string) (bool, error, error) {
	if c.rt.sealed == nil {
		return false, nil, gateway.ErrNoConnection
	}
	if _, err := c.rt.Store.GetCredential(ctx, server, caller); errors.Is(err, store.ErrNotFound) {
		return false, nil, gateway.ErrNoConnection
	} else if err != nil {
		return false, nil, err
	}
	var remote error
	revoked := false
	st, err := c.rt.Tokens.Token(ctx, upstream.TokenKey{Server: server, Caller: caller})
	switch {
	case err != nil:
		remote = fmt.Errorf("the token does not open here (%v)", err)
	default:
		var id, secret string
		if sc, ok := c.rt.serverConfig(server); ok && sc.OAuth != nil {
			id, secret = sc.OAuth.ClientID, sc.OAuth.ClientSecret
		}
		err := upstream.Revoke(ctx, http.DefaultTransport, st, id, secret)
		switch {
		case err == nil:
			revoked = true
		case errors.Is(err, upstream.ErrNoRevocation):
		default:
			remote = errors.New(strings.TrimSpace(err.Error()))
		}
	}
	if err := c.rt.Store.DeleteCredential(ctx, server, caller); err != nil && !errors.Is(err, store.ErrNotFound) {
		return revoked, remote, err
	}
	return revoked, remote, nil
}
