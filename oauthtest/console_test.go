package oauthtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/config"
)

// consoleRig is serve (assemble.OpenServer, SQLite, a secrets key) with
// one server remote whose credential is an operator's consent at a fosite
// codeAS, and an operator's browser: an HTTP client with a cookie jar,
// logged in to the console with the login form (no token in a header, so
// none follows a redirect to the authorization server).
type consoleRig struct {
	a                          *codeAS
	u                          *peer
	s                          *assemble.Serving
	browser                    *http.Client
	auditPath, opPath, srvPath string
	stop                       func() // stops serve: see close
}

func newConsoleRig(t *testing.T, iss string) *consoleRig {
	t.Helper()
	l := listen(t)
	r := &consoleRig{a: startCodeAS(t, time.Hour, iss)}
	r.u = startUpstream(t, l, r.a.as)
	k := make([]byte, 32)
	rand.Read(k)
	r.open(t, "state", k)
	return r
}

// open starts r's serve over the store named store (a folder, or a
// PostgreSQL URL replicas share), sealing with key, and logs its browser
// in to the console.
func (r *consoleRig) open(t *testing.T, store string, k []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secrets.key"), []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, config.DefaultFile)
	yaml := "store: '" + store + "'\n" +
		"secrets: {key_file: secrets.key}\n" +
		"policy:\n  - caller: alice\n    allow: [\"*\"]\n" +
		"operators:\n  - name: ops\n    token: ops-token-5e1a\n" +
		"serve:\n  http: 127.0.0.1:0\n  tokens: {\"alice-token-77c2\": alice}\n" +
		"servers:\n  - name: remote\n    url: " + r.u.url() + "\n" +
		"    auth: {oauth: {mode: service, grant: authorization_code, client_id: " + publicClient + ", scopes: [tools, offline_access]}}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r.auditPath, r.opPath, r.srvPath = filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "op.log"), filepath.Join(dir, "serve.log")
	opFile, _ := os.Create(r.opPath)
	t.Cleanup(func() { opFile.Close() })
	srvFile, _ := os.Create(r.srvPath)
	t.Cleanup(func() { srvFile.Close() })
	ctx := context.Background()
	r.s, err = assemble.OpenServer(ctx, cfg, &assemble.ServeOptions{
		Open:   &assemble.Options{AuditLog: r.auditPath, Log: slog.New(slog.NewTextHandler(opFile, &slog.HandlerOptions{Level: slog.LevelDebug})), Stderr: io.Discard},
		Logger: slog.New(slog.NewTextHandler(srvFile, nil)), NoControlSocket: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	go r.s.Run(rctx)
	r.stop = func() { cancel(); r.s.Close() }
	t.Cleanup(r.stop)

	jar, _ := cookiejar.New(nil)
	r.browser = &http.Client{Jar: jar, Timeout: time.Minute}
	resp, err := r.browser.PostForm(r.s.URL()+"/ui/login", url.Values{"token": {"ops-token-5e1a"}, "next": {"/ui/connections"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<h1>Connections</h1>") {
		t.Fatalf("the console's login: %d", resp.StatusCode)
	}
}

// page GETs a console page (or follows a link) in the operator's browser.
func (r *consoleRig) page(t *testing.T, u string) (int, string) {
	t.Helper()
	if strings.HasPrefix(u, "/") {
		u = r.s.URL() + u
	}
	resp, err := r.browser.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// submit posts one of the page's forms, as the browser does (same-origin).
func (r *consoleRig) submit(t *testing.T, action string, form url.Values) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", r.s.URL()+action, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", r.s.URL())
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := r.browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var continueLink = regexp.MustCompile(`id="continue" href="([^"]+)"`)

// connect clicks Connect for remote and follows the interstitial's link
// to fosite, which consents at once and redirects to serve's callback,
// which redirects back to the Connections page: its status, its URL and
// its text.
func (r *consoleRig) connect(t *testing.T, seen map[string]string) (string, string, string) {
	t.Helper()
	_, body := r.page(t, "/ui/connections")
	if !strings.Contains(body, `action="/ui/connections/connect"`) || !strings.Contains(body, "not connected") {
		t.Fatalf("the Connections page offers no Connect for remote:\n%s", body)
	}
	resp, body := r.submit(t, "/ui/connections/connect", url.Values{"server": {"remote"}})
	seen["the Connect page"] = body
	m := continueLink.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("Connect: %d, no link to the authorization server:\n%s", resp.StatusCode, body)
	}
	authURL := html.UnescapeString(m[1])
	if !strings.HasPrefix(authURL, r.a.issuer()+"/authorize?") {
		t.Fatalf("the link goes to %s, not fosite's authorization endpoint", authURL)
	}
	resp, err := r.browser.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status, resp.Request.URL.String(), string(b)
}

// leaks looks for every token fosite issued against everything an operator
// or an operations team sees: pages, logs, /metrics. It stops r's serve
// after reading the pages, to read its logs whole: the audit log reaches
// its file in batches (internal/auditlog: within FlushEvery of an event,
// and at Close), so an event written just before is not yet in the file
// while serve runs. The files' texts are left in seen under their paths.
func (r *consoleRig) leaks(t *testing.T, seen map[string]string) {
	t.Helper()
	for _, p := range []string{"/metrics", "/ui/overview", "/ui/connections", "/ui/upstreams", "/ui/journal", "/ui/health", "/ui/api/connections", "/ui/api/upstreams"} {
		_, seen[p] = r.page(t, p)
	}
	r.stop()
	for _, f := range []string{r.auditPath, r.opPath, r.srvPath} {
		b, _ := os.ReadFile(f)
		seen[f] = string(b)
	}
	r.a.mu.Lock()
	issued := append(append([]string(nil), r.a.issued...), r.a.refreshed...)
	r.a.mu.Unlock()
	for where, text := range seen {
		for _, tok := range issued {
			if strings.Contains(text, tok) {
				t.Errorf("a token fosite issued is in %s", where)
			}
		}
	}
}

// TestConsoleConnectionsConnect: an operator clicks Connect on the
// Connections page for a server that needs consent; the console sends the
// browser to fosite with PKCE S256, a state, resource and serve's
// callback as redirect_uri; the callback (iss checked by the login's own
// code) saves the token and sends the browser back to the page, which
// shows the server connected with its scopes and expiry, never the token;
// serve's upstream then runs calls with it; Revoke on the page revokes it
// at fosite. No token is on any page, in a log or in /metrics.
//
// An HTTP client with a cookie jar plays the browser: Debian's chromium
// is what the console's browser tests use (cmd/backplane), and this
// module does not depend on chromedp; the flow has no script to run.
func TestConsoleConnectionsConnect(t *testing.T) {
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Log("chromium is absent: the operator's browser is an HTTP client (the pages need no script)")
	}
	r := newConsoleRig(t, "issuer")
	seen := map[string]string{}
	status, landed, body := r.connect(t, seen)
	seen["the page after the login"] = body
	if status != "200 OK" || !strings.HasPrefix(landed, r.s.URL()+"/ui/connections?connected=remote") || !strings.Contains(body, "Connected the gateway to remote.") {
		t.Fatalf("after fosite's consent the browser is on %s (%s):\n%s", landed, status, body)
	}
	r.a.amu.Lock()
	q := r.a.authorize[0]
	grants := append([]string(nil), r.a.grants...)
	r.a.amu.Unlock()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" || q.Get("resource") != r.u.url() ||
		q.Get("redirect_uri") != r.s.URL()+"/oauth/upstream/callback" || q.Get("client_id") != publicClient {
		t.Errorf("the authorization request: %v", q)
	}
	if len(grants) != 1 || grants[0] != "authorization_code" {
		t.Errorf("token requests %q, want one code exchange", grants)
	}
	if !strings.Contains(body, "<code>tools</code>") || !strings.Contains(body, "<code>offline_access</code>") || !strings.Contains(body, "Connect again") {
		t.Errorf("the Connections page does not show remote connected with its scopes:\n%s", body)
	}
	_, api := r.page(t, "/ui/api/connections")
	var list struct {
		Connections []struct {
			Server, Mode string
			Scopes       []string
			Expiry       time.Time
		}
	}
	if err := json.Unmarshal([]byte(api), &list); err != nil || len(list.Connections) != 1 || list.Connections[0].Server != "remote" ||
		list.Connections[0].Expiry.IsZero() || len(list.Connections[0].Scopes) != 2 {
		t.Fatalf("the connections API: %v %s", err, api)
	}

	// The state is used once: the same redirect again is refused.
	r.a.amu.Lock()
	n := len(r.a.authorize)
	r.a.amu.Unlock()
	if n != 1 {
		t.Errorf("%d authorization requests", n)
	}
	if code, _ := r.page(t, "/oauth/upstream/callback?state="+url.QueryEscape(q.Get("state"))+"&code=again"); code != http.StatusBadRequest {
		t.Errorf("the callback again with the used state: %d, want 400", code)
	}

	// serve's upstream, down at start for want of a token, reconnects at
	// once (the login saved at this serve's callback wakes its retry) and
	// calls run with the token.
	r.greetsWithIssuedToken(t, "after the console's login")

	resp, body := r.submit(t, "/ui/connections/revoke", url.Values{"server": {"remote"}, "caller": {""}})
	seen["the page after Revoke"] = body
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Revoked the connection to remote.") {
		t.Fatalf("Revoke: %d\n%s", resp.StatusCode, body)
	}
	r.a.amu.Lock()
	revoked := r.a.revoked
	r.a.amu.Unlock()
	if revoked != 1 {
		t.Errorf("fosite revoked %d times, want 1", revoked)
	}
	if !strings.Contains(body, "not connected") {
		t.Errorf("after Revoke the page does not offer Connect again")
	}
	r.leaks(t, seen) // serve stopped: its audit log is whole on disk
	if audit := seen[r.auditPath]; !strings.Contains(audit, `"via":"console"`) || !strings.Contains(audit, `"step":"login_start"`) {
		t.Errorf("the audit lacks the console's login:\n%s", audit)
	}
}

// TestConsoleConnectWrongIss: the authorization server advertises RFC
// 9207 but its redirect names another issuer: the login's own check
// refuses it, the code is never exchanged, and the page says why.
func TestConsoleConnectWrongIss(t *testing.T) {
	r := newConsoleRig(t, "http://127.0.0.1:1")
	_, landed, body := r.connect(t, map[string]string{})
	if !strings.Contains(landed, "/ui/connections?failed=remote") || !strings.Contains(body, "not connected to remote") || !strings.Contains(body, "issuer") {
		t.Fatalf("a wrong iss: the browser is on %s:\n%s", landed, body)
	}
	if _, resources, _ := r.a.snapshot(); len(resources) != 0 {
		t.Errorf("the code was exchanged %d times", len(resources))
	}
	if _, api := r.page(t, "/ui/api/connections"); strings.Contains(api, `"server": "remote"`) {
		t.Errorf("a connection was saved: %s", api)
	}
}

// TestConsoleConnectAcrossReplicas: two serve replicas share one
// PostgreSQL store and secrets key. The operator clicks Connect on A's
// console; fosite's redirect, routed (as a load balancer would) to B's
// callback, completes there: B relays it through the store to A, which
// checks it (state, iss) and exchanges the code with its PKCE verifier;
// the token is saved as the server's, and calls through A run with it.
// The same redirect again, at B or at A, is refused, and no login is left
// in progress in the store.
func TestConsoleConnectAcrossReplicas(t *testing.T) {
	storeURL, db := newPGSchema(t)
	l := listen(t)
	a := &consoleRig{a: startCodeAS(t, time.Hour, "issuer")}
	a.u = startUpstream(t, l, a.a.as)
	key := make([]byte, 32)
	rand.Read(key)
	a.open(t, storeURL, key)
	b := &consoleRig{a: a.a, u: a.u}
	b.open(t, storeURL, key)

	_, body := a.page(t, "/ui/connections")
	if !strings.Contains(body, `action="/ui/connections/connect"`) {
		t.Fatalf("A's Connections page offers no Connect for remote:\n%s", body)
	}
	resp, body := a.submit(t, "/ui/connections/connect", url.Values{"server": {"remote"}})
	m := continueLink.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("Connect at A: %d, no link to the authorization server:\n%s", resp.StatusCode, body)
	}
	authURL := html.UnescapeString(m[1])
	au, _ := url.Parse(authURL)
	if q := au.Query(); q.Get("code_challenge_method") != "S256" || q.Get("redirect_uri") != a.s.URL()+"/oauth/upstream/callback" || q.Get("resource") != a.u.url() {
		t.Fatalf("the authorization request: %v", q)
	}
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pending_logins WHERE server = 'remote' AND caller = ''`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the console's login in progress is not in the store: %d rows (%v)", n, err)
	}

	// fosite consents at once and redirects to A's callback; the load
	// balancer sends it to B instead.
	noFollow := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil || !strings.HasSuffix(loc.Path, "/oauth/upstream/callback") {
		t.Fatalf("fosite answered %s, not a redirect to the callback (%v)", resp.Status, err)
	}
	bu, _ := url.Parse(b.s.URL())
	loc.Host = bu.Host
	resp, err = noFollow.Get(loc.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if back := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(back, "connected=remote") {
		t.Fatalf("B's callback: %s, back to %q", resp.Status, back)
	}
	if _, resources, _ := a.a.snapshot(); len(resources) != 1 || resources[0] != a.u.url() {
		t.Errorf("the code exchanges' resources: %q, want one, %s", resources, a.u.url())
	}

	// Replayed, at either replica: refused.
	for _, r := range []*consoleRig{b, a} {
		ru, _ := url.Parse(r.s.URL())
		loc.Host = ru.Host
		resp, err := noFollow.Get(loc.String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("the redirect replayed at %s: %s, want 400", ru.Host, resp.Status)
		}
	}
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pending_logins`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d logins left in progress (%v), want 0", n, err)
	}

	// A's upstream, down at start for want of a token, reconnects with
	// the token B's callback saved in the shared store: at its next retry,
	// since the login woke only B's (A's retries back off from a second,
	// doubling up to a minute: greetsWithIssuedToken waits 70 s).
	a.greetsWithIssuedToken(t, "at A after the login completed at B")
}

// greetsWithIssuedToken calls remote.greet through r's serve until it runs
// (its upstream, down at start for want of a token, reconnects once a
// login saved one: at once when the login completed at r, which wakes the
// retry; else at its next retry, backing off from a second and doubling up
// to a minute, within the 70 s it waits), then checks that
// the call reached the upstream with the first token the authorization
// server issued. when says, in a failure, after what.
func (r *consoleRig) greetsWithIssuedToken(t *testing.T, when string) {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "console-test", Version: "1"}, nil)
	ctx := context.Background()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: r.s.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{"alice-token-77c2", http.DefaultTransport}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	deadline := time.Now().Add(70 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "remote.greet", Arguments: map[string]any{}})
		cancel()
		if err == nil && !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote.greet never ran %s: %v %+v", when, err, res)
		}
		time.Sleep(500 * time.Millisecond)
	}
	issued, _, _ := r.a.snapshot()
	if seen := r.u.tokensSeen(); len(seen) == 0 || seen[0] != issued[0] {
		t.Errorf("the tool ran %s without the console login's token", when)
	}
}
