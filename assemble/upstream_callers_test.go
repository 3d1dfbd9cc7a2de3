package assemble

import (
	"reflect"
	"testing"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
)

// TestServerOptionsPerCaller: a per_caller or exchange server's settings
// reach backend/upstream with the runtime's token store and logins, and
// serve mounts the login callback only when a server is in mode
// per_caller.
func TestServerOptionsPerCaller(t *testing.T) {
	rt := &Runtime{Config: &config.Config{}, Tokens: &upstream.MemoryTokens{}}
	rt.openCallerAuth(&Options{UpstreamCallback: "http://127.0.0.1:8787/oauth/upstream/callback"})
	s := config.ServerConfig{Name: "docs", URL: "http://127.0.0.1:1/mcp", OAuth: &config.UpstreamOAuth{
		Mode: config.UpstreamOAuthExchange, ClientID: "bp", ClientSecret: "s3",
		PerCaller: config.UpstreamCallerOAuth{Audience: "docs", SubjectTokenType: "urn:ietf:params:oauth:token-type:jwt"},
	}}
	srv, opts := rt.serverOptions(s, SandboxDecision{}, nil)
	want := &upstream.OAuth{Mode: upstream.OAuthModeExchange, ClientID: "bp", ClientSecret: "s3",
		PerCaller: upstream.CallerOAuth{Audience: "docs", SubjectTokenType: "urn:ietf:params:oauth:token-type:jwt"}, Tokens: rt.Tokens}
	if !reflect.DeepEqual(srv.OAuth, want) {
		t.Errorf("OAuth %+v, want %+v", srv.OAuth, want)
	}
	if opts.Tokens == nil || opts.Tokens != rt.Tokens || opts.Logins == nil || opts.Logins != rt.logins {
		t.Errorf("the server does not get the runtime's token store and logins")
	}
	rt.Config.Servers = []config.ServerConfig{s}
	if h := rt.upstreamCallback(); h != nil {
		t.Errorf("a callback is mounted without a per_caller server")
	}
	s.OAuth.Mode, s.OAuth.PerCaller = config.UpstreamOAuthPerCaller, config.UpstreamCallerOAuth{AuthURL: "http://127.0.0.1:2/authorize"}
	rt.Config.Servers = []config.ServerConfig{s}
	if h := rt.upstreamCallback(); h == nil {
		t.Errorf("no callback is mounted for a per_caller server")
	}
	if srv, _ := rt.serverOptions(s, SandboxDecision{}, nil); srv.OAuth.PerCaller.AuthURL != "http://127.0.0.1:2/authorize" || srv.OAuth.Mode != upstream.OAuthModePerCaller {
		t.Errorf("per_caller: OAuth %+v", srv.OAuth)
	}
}
