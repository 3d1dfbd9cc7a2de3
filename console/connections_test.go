package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store"
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

// consentBackend is connBackend that can start a login.
type consentBackend struct {
	*connBackend
	started []string // "server operator"
}

func (b *consentBackend) ConsentServers(context.Context) []string { return []string{"tracker", "wiki"} }

func (b *consentBackend) StartConnection(_ context.Context, server, operator string) (string, error) {
	if server != "tracker" && server != "wiki" {
		return "", fmt.Errorf("%w: no such server", store.ErrNotFound)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.started = append(b.started, server+" "+operator)
	return "http://127.0.0.1:9/authorize?state=s-" + server + "&client_id=backplane", nil
}

// TestConnectionsConnect: the page offers Connect for each server that
// needs an operator's consent, saying which are connected (with their
// scopes); the Connect form's POST reaches the backend as the operator's
// action and answers with a link to the authorization server (not a
// redirect, which form-action 'self' would stop); the JSON API gives the
// URL; a caller, a cross-site POST and an unknown server are refused; the
// callback's return shows the outcome.
func TestConnectionsConnect(t *testing.T) {
	cb := &consentBackend{connBackend: &connBackend{fakeBackend: &fakeBackend{}, conns: []gateway.Connection{
		{Server: "tracker", Mode: "service", Scopes: []string{"tools.read"}, Expiry: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Updated: time.Now()},
	}}}
	c := New(cb, NewTokenAuth(map[string]string{opToken: "ops"}, map[string]string{callerToken: "alice"}), nil)
	mux := http.NewServeMux()
	mux.Handle(Prefix+"/", c)
	srv := httptest.NewServer(mux)
	defer func() { c.Close(); srv.Close() }()

	resp, body := do(t, noRedirect(), "GET", srv.URL+"/ui/connections", opToken, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/ui/connections: %d", resp.StatusCode)
	}
	for _, want := range []string{`action="/ui/connections/connect"`, `name="server" value="wiki"`, "not connected", "Connect again", "connected (<code>tools.read</code>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if resp, _ := do(t, noRedirect(), "POST", srv.URL+"/ui/connections/connect", callerToken, strings.NewReader("server=wiki"), form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a caller's Connect: %d, want 403", resp.StatusCode)
	}
	cross := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}
	if resp, _ := do(t, noRedirect(), "POST", srv.URL+"/ui/connections/connect", opToken, strings.NewReader("server=wiki"), cross); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site Connect: %d, want 403", resp.StatusCode)
	}
	if len(cb.started) != 0 {
		t.Fatalf("refused Connects reached the backend: %q", cb.started)
	}
	resp, body = do(t, noRedirect(), "POST", srv.URL+"/ui/connections/connect", opToken, strings.NewReader("server=wiki"), form)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `href="http://127.0.0.1:9/authorize?state=s-wiki&amp;client_id=backplane"`) {
		t.Fatalf("Connect: %d\n%s", resp.StatusCode, body)
	}
	if len(cb.started) != 1 || cb.started[0] != "wiki ops" {
		t.Errorf("started %q", cb.started)
	}
	resp, body = do(t, noRedirect(), "POST", srv.URL+"/ui/api/connections/connect", opToken, strings.NewReader(`{"server":"tracker"}`), map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"authorization_url": "http://127.0.0.1:9/authorize?state=s-tracker`) {
		t.Errorf("the API's Connect: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, noRedirect(), "POST", srv.URL+"/ui/connections/connect", opToken, strings.NewReader("server=nope"), form); resp.StatusCode != http.StatusNotFound {
		t.Errorf("Connect of an unknown server: %d, want 404", resp.StatusCode)
	}
	if resp, _ := do(t, noRedirect(), "POST", srv.URL+"/ui/connections/connect", opToken, strings.NewReader(""), form); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Connect without a server: %d, want 400", resp.StatusCode)
	}
	_, body = do(t, noRedirect(), "GET", srv.URL+"/ui/connections?connected=wiki", opToken, nil, nil)
	if !strings.Contains(body, "Connected the gateway to wiki.") {
		t.Errorf("the page after a login lacks its outcome")
	}
	_, body = do(t, noRedirect(), "GET", srv.URL+"/ui/connections?failed=wiki&note=the+authorization+server+refused%3A+access_denied", opToken, nil, nil)
	if !strings.Contains(body, "not connected to wiki: the authorization server refused: access_denied") {
		t.Errorf("the page after a failed login lacks why")
	}
}
