package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
)

// connBackend is the fake backend with upstream connections.
type connBackend struct {
	*fakeBackend
	mu      sync.Mutex
	conns   []gateway.Connection
	revoked []string // "server caller operator"
}

func (b *connBackend) Connections(context.Context) ([]gateway.Connection, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]gateway.Connection(nil), b.conns...), nil
}

func (b *connBackend) RevokeConnection(_ context.Context, server, caller, operator string) (*gateway.Revoked, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.revoked = append(b.revoked, server+" "+caller+" "+operator)
	return &gateway.Revoked{Server: server, Caller: caller, By: operator, Note: "forgotten here; the authorization server has no revocation endpoint"}, nil
}

// TestConnectionsPage: the page lists each connection (the gateway's own
// and a caller's, scopes and expiry), its Revoke form reaches the
// backend as the operator's action, and a caller is refused both.
func TestConnectionsPage(t *testing.T) {
	cb := &connBackend{fakeBackend: &fakeBackend{}, conns: []gateway.Connection{
		{Server: "tracker", Mode: "service", Scopes: []string{"tools.read"}, Expiry: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Updated: time.Now()},
		{Server: "docs", Caller: "alice", Mode: "per_caller", Updated: time.Now()},
	}}
	c := New(cb, NewTokenAuth(map[string]string{opToken: "ops"}, map[string]string{callerToken: "alice"}), nil)
	mux := http.NewServeMux()
	mux.Handle(Prefix+"/", c)
	srv := httptest.NewServer(mux)
	defer func() { c.Close(); srv.Close() }()

	resp, body := do(t, noRedirect(), "GET", srv.URL+"/ui/connections", opToken, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/ui/connections: %d", resp.StatusCode)
	}
	for _, want := range []string{"tracker", "the gateway", "<code>tools.read</code>", "2030-01-02 03:04:05Z", "docs", "alice", "per_caller", "no expiry given", `action="/ui/connections/revoke"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	resp, body = do(t, noRedirect(), "GET", srv.URL+"/ui/api/connections", opToken, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"server": "tracker"`) {
		t.Errorf("/ui/api/connections: %d %s", resp.StatusCode, body)
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if resp, _ := do(t, noRedirect(), "POST", srv.URL+"/ui/connections/revoke", callerToken, strings.NewReader("server=docs&caller=alice"), form); resp.StatusCode == http.StatusSeeOther || resp.StatusCode == http.StatusOK {
		t.Errorf("a caller revoked: %d", resp.StatusCode)
	}
	resp, _ = do(t, noRedirect(), "POST", srv.URL+"/ui/connections/revoke", opToken, strings.NewReader("server=docs&caller=alice"), form)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/connections?revoked=docs") {
		t.Fatalf("revoke: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if len(cb.revoked) != 1 || cb.revoked[0] != "docs alice ops" {
		t.Errorf("revoked %q", cb.revoked)
	}
	if resp, _ := do(t, noRedirect(), "POST", srv.URL+"/ui/connections/revoke", opToken, strings.NewReader("caller=alice"), form); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("revoke without a server: %d", resp.StatusCode)
	}
}
