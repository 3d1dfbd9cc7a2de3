package assemble

import (
	"reflect"
	"testing"

	"github.com/agentbackplane/backplane/backend/upstream"
	"github.com/agentbackplane/backplane/config"
)

// TestServerOptionsOAuth: a server's auth.oauth reaches package
// backend/upstream whole (the secret included), and a server without it gets
// none.
func TestServerOptionsOAuth(t *testing.T) {
	rt := &Runtime{Config: &config.Config{}}
	s := config.ServerConfig{Name: "tracker", URL: "http://127.0.0.1:1/mcp", OAuth: &config.UpstreamOAuth{
		Mode: config.UpstreamOAuthService, ClientID: "bp", ClientSecret: "s3", Scopes: []string{"a"}, TokenURL: "http://127.0.0.1:2/token",
	}}
	srv, _ := rt.serverOptions(s, SandboxDecision{}, nil)
	want := &upstream.OAuth{ClientID: "bp", ClientSecret: "s3", Scopes: []string{"a"}, TokenURL: "http://127.0.0.1:2/token"}
	if !reflect.DeepEqual(srv.OAuth, want) {
		t.Errorf("OAuth %+v, want %+v", srv.OAuth, want)
	}
	s.OAuth = nil
	if srv, _ := rt.serverOptions(s, SandboxDecision{}, nil); srv.OAuth != nil {
		t.Errorf("a server without auth got OAuth %+v", srv.OAuth)
	}
}
