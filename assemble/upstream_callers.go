package assemble

import (
	"net/http"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
)

// openCallerAuth makes what the per_caller and exchange servers share:
// the token store (in this process's memory: the sealed store shared
// through the gateway's store is the next step of issue 28) and the
// logins in progress, whose callback serve mounts (Serving's
// UpstreamCallback).
func (rt *Runtime) openCallerAuth(o *Options) {
	rt.tokens = &upstream.MemoryTokens{}
	rt.logins = upstream.NewLogins(&upstream.LoginsOptions{RedirectURL: o.UpstreamCallback})
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
