package server_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/server"
)

// fakeListener claims a non-loopback address and accepts nothing: no
// traffic leaves the machine.
type fakeListener struct{ accepts int }

func (l *fakeListener) Accept() (net.Conn, error) {
	l.accepts++
	return nil, net.ErrClosed
}
func (l *fakeListener) Close() error { return nil }
func (l *fakeListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 8787}
}

func TestAnonymousCallerOnlyOnLoopback(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{AnonymousCaller: "bob"})
	ln := &fakeListener{}
	err := s.ServeHTTP(ln)
	if err == nil || !strings.Contains(err.Error(), "loopback") || ln.accepts != 0 {
		t.Fatalf("ServeHTTP on 192.0.2.10: %v (%d accepts), want a refusal before serving", err, ln.accepts)
	}

	// Request by request too: a connection that arrived on another
	// address (a listener someone else made) is not anonymous.
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	req := httptest.NewRequest(http.MethodPost, server.PathMCP, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, ln.Addr()))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("anonymous request on 192.0.2.10: %d, want 401", rec.Code)
	}
	if h := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer ") || strings.Contains(h, "error=") {
		t.Errorf("challenge %q: want Bearer without an error code (no credentials were sent)", h)
	}

	// On loopback the anonymous caller is bob, with bob's tools.
	hs := httpServer(t, s)
	cs, err := connectHTTP(t, hs, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(res.Tools); len(got) != 1 || got[0] != "echo" {
		t.Errorf("anonymous tools %v, want bob's (echo)", got)
	}
}

// A session opened without a token is the anonymous caller's: a request
// bearing another caller's token cannot use it, nor the other way round.
func TestAnonymousSessionsAreBound(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{AnonymousCaller: "bob", Tokens: map[string]string{"alice-token": "alice"}})
	hs := httpServer(t, s)
	post := func(token, session string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hs.URL+server.PathMCP, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	anon, err := connectHTTP(t, hs, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := connectHTTP(t, hs, "alice-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	if code := post("", anon.ID()); code != http.StatusOK {
		t.Fatalf("the anonymous session, anonymously: %d", code)
	}
	if code := post("alice-token", anon.ID()); code == http.StatusOK {
		t.Error("alice's token used the anonymous session")
	}
	if code := post("", alice.ID()); code == http.StatusOK {
		t.Error("an anonymous request used alice's session")
	}
}
