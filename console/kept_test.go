package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
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
