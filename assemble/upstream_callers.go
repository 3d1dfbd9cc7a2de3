package assemble

import (
	"net/http"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
)

// openCallerAuth makes the per_caller servers' logins in progress, whose
// callback serve mounts (Serving's UpstreamCallback). With secrets: set,
// the logins in progress and the tokens they get are both sealed in the
// store (tokens.go): a login begun at one replica completes at the
// callback of any other, and every replica then uses the caller's
// connection. Without it, both stay in this process's memory.
func (rt *Runtime) openCallerAuth(o *Options) {
	rt.logins = upstream.NewLogins(&upstream.LoginsOptions{RedirectURL: o.UpstreamCallback, Store: rt.loginStore})
}

// callerOAuth copies a server's per-caller settings.
func callerOAuth(dst *upstream.OAuth, src *config.UpstreamOAuth) {
	if src.Mode != config.UpstreamOAuthService {
		dst.Mode = src.Mode // "" is the service mode's
	}
	dst.PerCaller = upstream.CallerOAuth{
		AuthURL: src.PerCaller.AuthURL, Audience: src.PerCaller.Audience, SubjectTokenType: src.PerCaller.SubjectTokenType,
	}
}

// upstreamCallback is the login callback serve mounts: nil when no
// server is in mode per_caller.
func (rt *Runtime) upstreamCallback() http.Handler {
	for _, s := range rt.Config.Servers {
		if s.OAuth != nil && s.OAuth.Mode == config.UpstreamOAuthPerCaller {
			return rt.logins
		}
	}
	return nil
}
