package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/agentbackplane/backplane/console"
	"github.com/agentbackplane/backplane/internal/testkit"
	"github.com/agentbackplane/backplane/oauth"
	"github.com/agentbackplane/backplane/server"
)

// The attacks below were refused in issue 22's review ("Kept") and had no
// test of their own.

// hostPost sends an initialize to /mcp over a raw loopback connection, so
// that the Host header is exactly host (empty included), and returns the
// status.
func hostPost(t *testing.T, addr, host, token string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Authorization: Bearer %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		server.PathMCP, host, token, len(initializeMsg), initializeMsg)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("Host %q: %v", host, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestKeptMCPHostLookAlikesAreRefused: on a loopback listener, /mcp
// refuses Host names that look like loopback but are not (a final dot,
// nothing at all) with 403 (DNS rebinding), and no session is opened; the
// listener's own address goes through (the test can fail).
func TestKeptMCPHostLookAlikesAreRefused(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}})
	hs := httpServer(t, s)
	addr := hs.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	for _, host := range []string{"evil.example", "localhost.", "localhost.:" + port, "127.0.0.1.", "127.0.0.1.:" + port, ""} {
		if code := hostPost(t, addr, host, "tok-alice"); code != http.StatusForbidden {
			t.Errorf("Host %q: %d, want 403", host, code)
		}
	}
	if n := s.SessionCount("alice"); n != 0 {
		t.Fatalf("%d sessions opened by refused Hosts", n)
	}
	if code := hostPost(t, addr, addr, "tok-alice"); code != http.StatusOK {
		t.Errorf("Host %s: %d, want 200", addr, code)
	}
	if n := s.SessionCount("alice"); n != 1 {
		t.Errorf("%d sessions after the allowed Host, want 1", n)
	}
}

// TestKeptMCPHostIPv4MappedLoopback: the review refused Host
// [::ffff:127.0.0.1] on the console; /mcp's Host check (the SDK's) takes
// it for loopback. It is an IP literal, not a name a rebinding DNS answer
// could put in a page's URL, so this is recorded rather than claimed.
func TestKeptMCPHostIPv4MappedLoopback(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}})
	hs := httpServer(t, s)
	addr := hs.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	code := hostPost(t, addr, "[::ffff:127.0.0.1]:"+port, "tok-alice")
	if code != http.StatusForbidden {
		t.Skipf("issue 22 kept-list: Host [::ffff:127.0.0.1] on /mcp not refused (%d; the SDK's util.IsLoopback unmaps it): see report", code)
	}
}

// TestKeptJWTsReachNoOperatorSurface: with serve.oauth on, a JWT the
// verifier accepts for /mcp (the control) is never an operator: /metrics
// is 401 without a metric, the console's API and pages refuse it and its
// login form sets no cookie, even when the JWT's subject is an operator's
// name.
func TestKeptJWTsReachNoOperatorSurface(t *testing.T) {
	const iss, aud = "https://issuer.test", "http://127.0.0.1/mcp"
	key := testkit.NewRSAKey(t, "rsa-1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, testkit.KeySet(t, key), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := oauth.New(&oauth.Options{Issuer: iss, Audience: aud, KeySetFile: file})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(sub string) string {
		return key.Sign(t, jwt.NewBuilder().Issuer(iss).Subject(sub).Audience([]string{aud}).
			IssuedAt(time.Now()).Expiration(time.Now().Add(time.Hour)))
	}
	f := newFixture(t)
	tokens, operators := map[string]string{"tok-alice": "alice"}, map[string]string{"tok-ops": "ops"}
	ui := console.New(console.GatewayBackend(f.g, nil), console.NewTokenAuth(operators, tokens), nil)
	t.Cleanup(ui.Close)
	s := server.New(f.g, &server.Options{Tokens: tokens, Operators: operators, OAuth: v, Console: ui})
	hs := httpServer(t, s)

	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b)
	}
	// Controls: the JWT is good for /mcp; the operator's token for both.
	if code, body := rawPost(t, hs.URL, sign("alice"), nil, initializeMsg); code != http.StatusOK {
		t.Fatalf("the JWT on /mcp: %d %s, want 200", code, body)
	}
	if code, body := get(server.PathMetrics, "tok-ops"); code != http.StatusOK || !strings.Contains(body, "backplane_") {
		t.Fatalf("/metrics with the operator's token: %d", code)
	}
	if code, _ := get("/ui/api/health", "tok-ops"); code != http.StatusOK {
		t.Fatalf("the console with the operator's token: %d", code)
	}
	for _, sub := range []string{"alice", "ops"} {
		jwt := sign(sub)
		if code, body := get(server.PathMetrics, jwt); code != http.StatusUnauthorized || strings.Contains(body, "backplane_") {
			t.Errorf("/metrics with a JWT for %s: %d, want 401 and no metrics: %.200s", sub, code, body)
		}
		for _, p := range []string{"/ui/api/health", "/ui/api/approvals", "/ui/approvals", "/ui/events"} {
			if code, _ := get(p, jwt); code != http.StatusUnauthorized {
				t.Errorf("GET %s with a JWT for %s: %d, want 401", p, sub, code)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/ui/login", strings.NewReader(url.Values{"token": {jwt}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("console login with a JWT for %s: %d, cookies %v, want 401 and none", sub, resp.StatusCode, resp.Cookies())
		}
	}
}

var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// keptRaw sends one request of session sid (none for initialize) and
// returns the status, the session id the answer names and up to 64 KiB of
// the body read within 2 s (a GET stream does not end by itself).
func keptRaw(t *testing.T, hs string, method, sid, lastEventID, msg string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var body io.Reader
	if msg != "" {
		body = strings.NewReader(msg)
	}
	req, _ := http.NewRequestWithContext(ctx, method, hs+server.PathMCP, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer tok-alice")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // ends with the 2 s deadline at worst
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

// TestKeptLastEventIDOfAnotherSession (issue 22's review, "Kept"): a
// caller resuming with the Last-Event-ID of another of its own sessions'
// streams gets none of that session's events. (No positive control: the
// call's stream is one event, and a replay gives only what follows it;
// TestResumeAfterDroppedStream shows replay within a session works.)
func TestKeptLastEventIDOfAnotherSession(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.g, &server.Options{Tokens: map[string]string{"tok-alice": "alice"}})
	hs := httpServer(t, s).URL
	open := func() string {
		code, sid, body := keptRaw(t, hs, http.MethodPost, "", "", initializeMsg)
		if code != http.StatusOK || sid == "" {
			t.Fatalf("initialize: %d %q %s", code, sid, body)
		}
		if code, _, body := keptRaw(t, hs, http.MethodPost, sid, "", `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
			t.Fatalf("initialized: %d %s", code, body)
		}
		return sid
	}
	a, b := open(), open()
	secret := fmt.Sprintf("secret-of-A-%d", time.Now().UnixNano())
	code, _, body := keptRaw(t, hs, http.MethodPost, a, "",
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"`+secret+`"}}}`)
	if code != http.StatusOK || !strings.Contains(body, secret) {
		t.Fatalf("the call in session A: %d %s", code, body)
	}
	var ids []string
	for _, line := range strings.Split(body, "\n") {
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			ids = append(ids, strings.TrimSpace(id))
		}
	}
	if len(ids) == 0 {
		t.Fatalf("the call's stream carries no event id (no event store?):\n%s", body)
	}
	// Resume in B from every id of A's stream, and from the index a
	// forger would guess.
	for _, id := range ids {
		stream, _, _ := strings.Cut(id, "_")
		for _, last := range []string{id, stream + "_0", stream + "_1"} {
			code, _, got := keptRaw(t, hs, http.MethodGet, b, last, "")
			if strings.Contains(got, secret) {
				t.Errorf("session B resumed with A's Last-Event-ID %s and got A's event (%d):\n%s", last, code, got)
			}
		}
	}
}
