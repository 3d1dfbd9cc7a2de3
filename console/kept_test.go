package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The attacks below were refused in issue 22's review ("Kept") and had no
// test of their own; each asserts the refusal and that nothing behind it
// (a decision, an accepted definition, a session) happened.

// keptPost sends one decision form straight to the console's handler (no
// network), with the given Host and headers, as a bearer operator.
func keptPost(c *Console, host, path string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader("decision=approve&tool=up.echo&hash=h&token="+opToken))
	req.Host = host
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+opToken)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, req)
	return w
}

func newKeptConsole(t *testing.T) (*fakeBackend, *Console) {
	t.Helper()
	fb := &fakeBackend{}
	fb.addPending("apr_1", "write")
	c := New(fb, NewTokenAuth(map[string]string{opToken: "ops"}, map[string]string{callerToken: "alice"}), nil)
	t.Cleanup(c.Close)
	return fb, c
}

// TestKeptHostLookAlikesAreRefused: Host names that look like loopback but
// are not one of the allowed names (a final dot, an IPv4-mapped IPv6
// literal, nothing at all) are 403 before authentication, and no decision
// is made; the allowed name itself goes through (the test can fail).
func TestKeptHostLookAlikesAreRefused(t *testing.T) {
	fb, c := newKeptConsole(t)
	for _, host := range []string{"evil.example", "evil.example:8787", "localhost.", "localhost.:8787", "127.0.0.1.",
		"127.0.0.1.:8787", "[::ffff:127.0.0.1]", "[::ffff:127.0.0.1]:8787", "::ffff:127.0.0.1", ""} {
		w := keptPost(c, host, "/ui/approvals/apr_1/decide", nil)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "host name is not allowed") {
			t.Errorf("Host %q: %d %q, want 403 from the Host check", host, w.Code, w.Body.String())
		}
	}
	if d := fb.decided(); len(d) != 0 {
		t.Fatalf("a refused Host reached the backend: %q", d)
	}
	if w := keptPost(c, "127.0.0.1:8787", "/ui/approvals/apr_1/decide", nil); w.Code != http.StatusSeeOther || len(fb.decided()) != 1 {
		t.Errorf("Host 127.0.0.1: %d, decisions %q, want 303 and one decision", w.Code, fb.decided())
	}
}

// TestKeptCrossSiteLookAlikesAreRefused: cross-site POSTs that are not
// plainly "cross-site" (Sec-Fetch-Site same-site, Origin null, the same
// host on another port, another scheme) are 403 on every form, and none
// decides, accepts or logs in.
func TestKeptCrossSiteLookAlikesAreRefused(t *testing.T) {
	fb, c := newKeptConsole(t)
	const host = "127.0.0.1:8787"
	for name, hdr := range map[string]map[string]string{
		"Sec-Fetch-Site same-site":           {"Sec-Fetch-Site": "same-site"},
		"Sec-Fetch-Site same-site, own host": {"Sec-Fetch-Site": "same-site", "Origin": "http://" + host},
		"Origin null":                        {"Origin": "null"},
		"Origin other port":                  {"Origin": "http://127.0.0.1:1"},
		"Origin localhost other port":        {"Origin": "http://localhost:8788"},
		"Origin https same host":             {"Origin": "https://127.0.0.1:8788"},
	} {
		for _, p := range []string{"/ui/approvals/apr_1/decide", "/ui/api/approvals/apr_1/decide", "/ui/tools/accept", "/ui/login"} {
			w := keptPost(c, host, p, hdr)
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "cross-origin") {
				t.Errorf("%s POST %s: %d %q, want 403 cross-origin", name, p, w.Code, w.Body.String())
			}
			if len(w.Result().Cookies()) != 0 {
				t.Errorf("%s POST %s set a cookie", name, p)
			}
		}
	}
	fb.mu.Lock()
	accepted := len(fb.accepted)
	fb.mu.Unlock()
	if d := fb.decided(); len(d) != 0 || accepted != 0 {
		t.Fatalf("a cross-site POST reached the backend: decisions %q, %d accepted", d, accepted)
	}
	// The console's own origin goes through (the test can fail).
	if w := keptPost(c, host, "/ui/approvals/apr_1/decide", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}); w.Code != http.StatusSeeOther || len(fb.decided()) != 1 {
		t.Errorf("same-origin POST: %d, decisions %q, want 303 and one", w.Code, fb.decided())
	}
}

// TestKeptPlantedSessionCookieIsIgnored: a session id chosen by an attacker
// and planted in the operator's browser before login (session fixation)
// is never adopted: login issues a fresh id, the planted one still gets
// the login form, and logout ends the fresh one for every later request.
func TestKeptPlantedSessionCookieIsIgnored(t *testing.T) {
	_, c := newKeptConsole(t)
	planted := strings.Repeat("ab", 32)
	send := func(method, path, body, cookie string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("Cookie", cookieName+"="+cookie)
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		return w
	}
	if w := send("GET", "/ui/journal", "", planted); w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/login") {
		t.Fatalf("the planted cookie before login: %d %q, want the login form", w.Code, w.Header().Get("Location"))
	}
	w := send("POST", "/ui/login", url.Values{"token": {opToken}}.Encode(), planted)
	var fresh string
	for _, ck := range w.Result().Cookies() {
		if ck.Name == cookieName {
			fresh = ck.Value
		}
	}
	if w.Code != http.StatusSeeOther || fresh == "" || fresh == planted {
		t.Fatalf("login with a planted cookie: %d, new id %q: want 303 and a fresh id", w.Code, fresh)
	}
	if w := send("GET", "/ui/journal", "", planted); w.Code != http.StatusSeeOther {
		t.Errorf("the planted cookie after login: %d, want the login form", w.Code)
	}
	if w := send("GET", "/ui/journal", "", fresh); w.Code != http.StatusOK {
		t.Fatalf("the fresh session: %d, want 200", w.Code)
	}
	if w := send("POST", "/ui/logout", "", fresh); w.Code != http.StatusSeeOther {
		t.Fatalf("logout: %d", w.Code)
	}
	for _, p := range []string{"/ui/journal", "/ui/api/approvals", "/ui/events"} {
		if w := send("GET", p, "", fresh); w.Code == http.StatusOK {
			t.Errorf("GET %s after logout: %d, want refused", p, w.Code)
		}
	}
	if w := send("POST", "/ui/approvals/apr_1/decide", "decision=approve", fresh); w.Code != http.StatusUnauthorized {
		t.Errorf("a decision after logout: %d, want 401", w.Code)
	}
}

// TestKeptSecurityHeaders: every answer of the console, pages, JSON,
// refusals and the login form alike, forbids framing, inline script,
// sniffing, caching (but static assets) and referrers leaving it.
func TestKeptSecurityHeaders(t *testing.T) {
	_, _, srv := newTestConsole(t)
	cl := noRedirect()
	for _, tc := range []struct{ path, token string }{
		{"/ui/approvals", opToken}, {"/ui/api/approvals", opToken}, {"/ui/journal/nope", opToken},
		{"/ui/login", ""}, {"/ui/approvals", callerToken}, {"/ui/approvals", ""}, {"/ui/api/health", "nobody-token"},
	} {
		resp, _ := do(t, cl, "GET", srv.URL+tc.path, tc.token, nil, nil)
		h := resp.Header
		for k, want := range map[string]string{
			"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
		} {
			if got := h.Get(k); got != want {
				t.Errorf("GET %s (%d): %s %q, want %q", tc.path, resp.StatusCode, k, got, want)
			}
		}
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %s", tc.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("GET %s: Content-Security-Policy %q allows inline script", tc.path, csp)
		}
	}
}

// escapingBackend is fakeBackend with markup in every name the pages show
// that a caller, a JWT or an upstream server chooses.
type escapingBackend struct{ *fakeBackend }

const markup = `<script>alert(1)</script><img src=x onerror=alert(2)>`

func (e escapingBackend) Tools(context.Context) ([]Tool, error) {
	return []Tool{{Name: "up.t" + markup, Description: "desc" + markup, Source: "up" + markup, DefinitionHash: "sha256:aa",
		InputSchema: json.RawMessage(`{"type":"object","description":` + string(mustMarshalString(markup)) + `}`)}}, nil
}

func (e escapingBackend) Health(context.Context) Health {
	return Health{OK: false, State: "degraded", Checks: []HealthCheck{{Name: "upstream up" + markup, State: "down", Detail: "err" + markup}}}
}

func mustMarshalString(s string) []byte { b, _ := json.Marshal(s); return b }

// TestKeptPagesEscapeMarkup: commands, paths, diffs, upstream names, tool
// descriptions, results and caller names (a JWT's sub is the caller's
// choice) reach the pages as text, never as markup.
func TestKeptPagesEscapeMarkup(t *testing.T) {
	fb := &fakeBackend{}
	caller := "jwt-sub" + markup
	fb.approvals = []Approval{{ID: "apr_1", Caller: caller, Tool: "bash", ToolDescription: "runs" + markup, Status: "pending",
		Command: "echo " + markup, Arguments: json.RawMessage(`{"command":` + string(mustMarshalString("echo "+markup)) + `}`),
		CreatedAt: time.Unix(1000, 0), ExpiresAt: time.Unix(2000, 0)},
		{ID: "apr_2", Caller: caller, Tool: "write", Status: "pending",
			Arguments: json.RawMessage(`{"path":` + string(mustMarshalString("p"+markup)) + `,"content":"x"}`),
			Diff:      "--- a/p" + markup + "\n+++ b/p" + markup + "\n@@ -1 +1 @@\n-" + markup + "\n+" + markup + "\n",
			CreatedAt: time.Unix(1000, 0), ExpiresAt: time.Unix(2000, 0)}}
	fb.calls = []Call{{ID: "call_1", Caller: caller, Tool: "read", Status: "succeeded", ErrorMessage: "e" + markup,
		Arguments: json.RawMessage(`{"path":` + string(mustMarshalString("p"+markup)) + `}`),
		Result:    json.RawMessage(`{"content":[{"type":"text","text":` + string(mustMarshalString(markup)) + `}]}`)}}
	c := New(escapingBackend{fb}, NewTokenAuth(map[string]string{opToken: "ops"}, nil), nil)
	srv := httptest.NewServer(c)
	t.Cleanup(func() { c.Close(); srv.Close() })
	for _, p := range []string{"/ui/approvals", "/ui/approvals/apr_1", "/ui/approvals/apr_2", "/ui/journal", "/ui/journal/call_1",
		"/ui/tools", "/ui/health", "/ui/journal?caller=" + url.QueryEscape(caller)} {
		resp, body := do(t, noRedirect(), "GET", srv.URL+p, opToken, nil, nil)
		if resp.StatusCode != http.StatusOK && (p != "/ui/health" || resp.StatusCode != http.StatusServiceUnavailable) {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
			continue
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Errorf("GET %s: markup reached the page raw:\n%s", p, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s: the markup is not shown as text (escaped):\n%s", p, body)
		}
	}
	card, err := c.renderFragment("approval_card", fb.approvals[0])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(card, "<script>alert") || !strings.Contains(card, "&lt;script&gt;") {
		t.Errorf("the live card: %s", card)
	}
}
