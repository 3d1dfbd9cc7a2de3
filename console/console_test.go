package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/internal/auththrottle"
	"github.com/agentbackplane/backplane/internal/opauth"
	"github.com/agentbackplane/backplane/store"
)

// fakeBackend is a Backend over memory, for the HTTP behaviour of the
// console; the gateway's adapter is tested against the real gateway.
type fakeBackend struct {
	mu        sync.Mutex
	approvals []Approval
	calls     []Call
	decisions []string // "id approve|deny operator reason"
	accepted  []string
	// resolutions are "id executed operator reason".
	resolutions []string
	overview    *Overview
	upstreams   []Upstream
}

func (f *fakeBackend) ListApprovals(_ context.Context, status string, limit int) ([]Approval, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Approval
	for _, a := range f.approvals {
		if (status == "" || a.Status == status) && len(out) < limit {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fakeBackend) GetApproval(_ context.Context, id string) (*Approval, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.approvals {
		if a.ID == id {
			return &a, nil
		}
	}
	return nil, fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
}

func (f *fakeBackend) DecideApproval(_ context.Context, id string, approve bool, operator, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.approvals {
		a := &f.approvals[i]
		if a.ID != id {
			continue
		}
		if a.Status != "pending" {
			return fmt.Errorf("approval %s: already decided: %w", id, ErrConflict)
		}
		verdict := "deny"
		a.Status = "denied"
		if approve {
			verdict, a.Status = "approve", "approved"
		}
		a.DecidedBy, a.Reason, a.Channel = operator, reason, "console"
		f.decisions = append(f.decisions, strings.Join([]string{id, verdict, operator, reason}, " "))
		return nil
	}
	return fmt.Errorf("approval %s: %w", id, store.ErrNotFound)
}

func (f *fakeBackend) ListCalls(_ context.Context, q CallQuery) ([]Call, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var match []Call
	for _, c := range f.calls {
		if (q.Caller == "" || c.Caller == q.Caller) && (q.Tool == "" || c.Tool == q.Tool) &&
			(q.Status == "" || c.Status == q.Status || (q.Status == "tool_error" && c.ToolError)) {
			match = append(match, c)
		}
	}
	if q.Offset >= len(match) {
		return nil, false, nil
	}
	match = match[q.Offset:]
	if len(match) > q.Limit {
		return match[:q.Limit], true, nil
	}
	return match, false, nil
}

func (f *fakeBackend) GetCall(_ context.Context, id string) (*Call, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c.ID == id {
			return &c, nil
		}
	}
	return nil, fmt.Errorf("call %s: %w", id, store.ErrNotFound)
}

func (f *fakeBackend) Budgets(context.Context) ([]Budget, error) {
	return []Budget{{Scope: "caller", Key: "alice", Used: 3, Quota: 10}}, nil
}

func (f *fakeBackend) Tools(context.Context) ([]Tool, error) {
	return []Tool{
		{Name: "read", Source: "builtin", ReadOnly: true, InputSchema: json.RawMessage(`{"type":"object"}`), DefinitionHash: "sha256:aaaa"},
		{Name: "up.echo", Source: "up", DefinitionHash: "sha256:bbbb", Pin: &Pin{AcceptedHash: "sha256:old", SeenHash: "sha256:bbbb"}},
	}, nil
}

func (f *fakeBackend) AcceptDefinition(_ context.Context, tool, hash, operator string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accepted = append(f.accepted, tool+" "+hash+" "+operator)
	return nil
}

func (f *fakeBackend) Health(context.Context) Health {
	return Health{OK: true, State: "ok", Checks: []HealthCheck{{Name: "store", OK: true, State: "ok"}}}
}

func (f *fakeBackend) ResolveCall(_ context.Context, id string, executed bool, operator, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.calls {
		c := &f.calls[i]
		if c.ID != id {
			continue
		}
		if c.Status != "uncertain" {
			return fmt.Errorf("call %s is %s: %w", id, c.Status, ErrConflict)
		}
		c.Status, c.ResolvedBy = "not_executed", operator
		if executed {
			c.Status = "executed"
		}
		f.resolutions = append(f.resolutions, fmt.Sprintf("%s %v %s %s", id, executed, operator, reason))
		return nil
	}
	return fmt.Errorf("call %s: %w", id, store.ErrNotFound)
}

func (f *fakeBackend) Overview(_ context.Context, since, until time.Time) (*Overview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.overview != nil {
		o := *f.overview
		return &o, nil
	}
	return &Overview{Since: since, Until: until, Bucket: time.Minute, Totals: map[string]int{}}, nil
}

func (f *fakeBackend) Upstreams(context.Context) []Upstream {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.upstreams)
}

func (f *fakeBackend) addPending(id, tool string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.approvals = append([]Approval{{ID: id, Caller: "alice", Tool: tool, Status: "pending",
		Arguments: json.RawMessage(`{"path":"notes.txt","content":"<b>hi</b>"}`),
		Diff:      "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-old\n+<b>hi</b>\n",
		CreatedAt: time.Unix(1000, 0), ExpiresAt: time.Unix(2000, 0)}}, f.approvals...)
}

func (f *fakeBackend) decided() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.decisions...)
}

const (
	opToken     = "ops-secret-token"
	callerToken = "alice-caller-token"
)

func newTestConsole(t *testing.T) (*fakeBackend, *Console, *httptest.Server) {
	t.Helper()
	fb := &fakeBackend{}
	c := New(fb, NewTokenAuth(map[string]string{opToken: "ops"}, map[string]string{callerToken: "alice"}),
		&Options{PollInterval: 20 * time.Millisecond})
	mux := http.NewServeMux()
	mux.Handle(Prefix+"/", c)
	mux.Handle(Prefix, c)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { c.Close(); srv.Close() })
	return fb, c, srv
}

// noRedirect is a client that shows redirects rather than following them.
func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, cl *http.Client, method, u, token string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestEveryPageNeedsAnOperator(t *testing.T) {
	_, _, srv := newTestConsole(t)
	cl := noRedirect()
	paths := []string{"/ui", "/ui/", "/ui/approvals", "/ui/approvals/x", "/ui/journal", "/ui/journal/x",
		"/ui/budgets", "/ui/tools", "/ui/health", "/ui/sessions", "/ui/events", "/ui/api/approvals", "/ui/api/journal",
		"/ui/api/budgets", "/ui/api/tools", "/ui/api/health", "/ui/api/sessions", "/ui/nothing-here"}
	for i, p := range paths {
		// A caller's token is refused with 403, whatever the page.
		resp, body := do(t, cl, "GET", srv.URL+p, callerToken, nil, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "caller") {
			t.Errorf("GET %s with a caller token: %d %q, want 403 naming the caller token", p, resp.StatusCode, body)
		}
		// An unknown token: 401 with a challenge (each its own, or the
		// throttle of failed tokens would answer 429 after ten).
		resp, _ = do(t, cl, "GET", srv.URL+p, fmt.Sprintf("%02d-nobody", i), nil, nil)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s with an unknown token: %d, want 401 with WWW-Authenticate", p, resp.StatusCode)
		}
		// Nothing: a page redirects to the login form, JSON says 401.
		resp, _ = do(t, cl, "GET", srv.URL+p, "", nil, nil)
		if strings.HasPrefix(p, "/ui/api/") {
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without credentials: %d, want 401", p, resp.StatusCode)
			}
		} else if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login?next=") {
			t.Errorf("GET %s without credentials: %d to %q, want a redirect to the login form", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// Actions too, and the backend is never reached.
	for _, p := range []string{"/ui/approvals/x/decide", "/ui/api/approvals/x/decide", "/ui/tools/accept"} {
		resp, _ := do(t, cl, "POST", srv.URL+p, callerToken, strings.NewReader("decision=approve"),
			map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s with a caller token: %d, want 403", p, resp.StatusCode)
		}
	}
}

func TestBearerOperatorReadsEveryPage(t *testing.T) {
	fb, _, srv := newTestConsole(t)
	fb.addPending("apr_1", "write")
	fb.calls = []Call{{ID: "call_1", Caller: "alice", Tool: "write", Status: "succeeded", ToolError: true,
		Arguments: json.RawMessage(`{"path":"a"}`), Result: json.RawMessage(`{"isError":true}`)}}
	cl := noRedirect()
	for p, want := range map[string]string{
		"/ui/approvals":       "notes.txt",
		"/ui/approvals/apr_1": `class="add">&#43;&lt;b&gt;hi&lt;/b&gt;`, // the diff, escaped
		"/ui/journal":         "call_1",
		"/ui/journal/call_1":  "the tool ran and reported an error",
		"/ui/budgets":         "alice",
		"/ui/tools":           "Accept the new definition",
		"/ui/health":          "store",
		"/ui/api/approvals":   `"id": "apr_1"`,
		"/ui/api/journal":     `"tool_error": true`,
		"/ui/api/tools":       `"up.echo"`,
		"/ui/api/health":      `"ok": true`,
	} {
		resp, body := do(t, cl, "GET", srv.URL+p, opToken, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, body)
			continue
		}
		if !strings.Contains(body, want) {
			t.Errorf("GET %s: the page lacks %q:\n%s", p, want, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", p, csp)
		}
	}
	if _, body := do(t, cl, "GET", srv.URL+"/ui/approvals", opToken, nil, nil); strings.Contains(body, "<b>hi</b>") {
		t.Error("the arguments reached the page unescaped")
	}
	resp, _ := do(t, cl, "GET", srv.URL+"/ui/journal/nope", opToken, nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown call: %d, want 404", resp.StatusCode)
	}
}

func TestLoginKeepsASessionNotTheToken(t *testing.T) {
	_, _, srv := newTestConsole(t)
	cl := noRedirect()
	form := func(tok string) io.Reader {
		return strings.NewReader(url.Values{"token": {tok}, "next": {"/ui/journal"}}.Encode())
	}
	ct := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

	resp, body := do(t, cl, "POST", srv.URL+"/ui/login", "", form(callerToken), ct)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "caller") || len(resp.Cookies()) != 0 {
		t.Fatalf("login with a caller token: %d, cookies %v, want 403 and no cookie", resp.StatusCode, resp.Cookies())
	}
	resp, _ = do(t, cl, "POST", srv.URL+"/ui/login", "", form("wrong"), ct)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("login with a wrong token: %d, want 401 and no cookie", resp.StatusCode)
	}

	resp, _ = do(t, cl, "POST", srv.URL+"/ui/login", "", form(opToken), ct)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/journal" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			ck = c
		}
	}
	if ck == nil {
		t.Fatal("no session cookie")
	}
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui" {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui", ck)
	}
	if strings.Contains(ck.Value, opToken) || len(ck.Value) != 64 {
		t.Errorf("the cookie %q is not a random session id", ck.Value)
	}
	cookie := map[string]string{"Cookie": cookieName + "=" + ck.Value}
	resp, body = do(t, cl, "GET", srv.URL+"/ui/journal", "", nil, cookie)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<span class="who">ops</span>`) {
		t.Fatalf("with the session: %d\n%s", resp.StatusCode, body)
	}
	// A forged id gets nothing.
	resp, _ = do(t, cl, "GET", srv.URL+"/ui/journal", "", nil, map[string]string{"Cookie": cookieName + "=" + strings.Repeat("0", 64)})
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("with a forged session: %d, want a redirect to the login form", resp.StatusCode)
	}
	// Logging out ends the session server-side.
	resp, _ = do(t, cl, "POST", srv.URL+"/ui/logout", "", nil, cookie)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	resp, _ = do(t, cl, "GET", srv.URL+"/ui/journal", "", nil, cookie)
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after logout the old session still works: %d", resp.StatusCode)
	}
}

func TestDecide(t *testing.T) {
	fb, _, srv := newTestConsole(t)
	fb.addPending("apr_1", "write")
	fb.addPending("apr_2", "bash")
	cl := noRedirect()
	resp, body := do(t, cl, "POST", srv.URL+"/ui/approvals/apr_1/decide", opToken,
		strings.NewReader("decision=approve&reason=looks+fine"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/approvals/apr_1" {
		t.Fatalf("form decision: %d %q %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	resp, body = do(t, cl, "POST", srv.URL+"/ui/api/approvals/apr_2/decide", opToken,
		strings.NewReader(`{"approve":false,"reason":"no"}`), map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"status": "denied"`) {
		t.Fatalf("JSON decision: %d %s", resp.StatusCode, body)
	}
	want := []string{"apr_1 approve ops looks fine", "apr_2 deny ops no"}
	if got := fb.decided(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("decisions %q, want %q", got, want)
	}
	// A second decision is a conflict; bad input is refused before the backend.
	resp, _ = do(t, cl, "POST", srv.URL+"/ui/api/approvals/apr_2/decide", opToken,
		strings.NewReader(`{"approve":true}`), map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("deciding twice: %d, want 409", resp.StatusCode)
	}
	for _, body := range []string{`{"approve":true,"approve":false}`, `{"reason":"x"}`, `{"approve":true,"extra":1}`, `[`} {
		resp, _ = do(t, cl, "POST", srv.URL+"/ui/api/approvals/apr_9/decide", opToken,
			strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("decision body %s: %d, want 400", body, resp.StatusCode)
		}
	}
	resp, _ = do(t, cl, "POST", srv.URL+"/ui/approvals/apr_9/decide", opToken,
		strings.NewReader("decision=maybe"), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("decision=maybe: %d, want 400", resp.StatusCode)
	}
	if n := len(fb.decided()); n != 2 {
		t.Errorf("%d decisions recorded, want 2", n)
	}
}

func TestCrossSiteRequestsAreRefused(t *testing.T) {
	fb, _, srv := newTestConsole(t)
	fb.addPending("apr_1", "write")
	cl := noRedirect()
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for name, hdr := range map[string]map[string]string{
		"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": "cross-site"},
		"foreign Origin":            {"Origin": "http://evil.example"},
	} {
		for k, v := range form {
			hdr[k] = v
		}
		for _, p := range []string{"/ui/approvals/apr_1/decide", "/ui/login", "/ui/tools/accept"} {
			resp, _ := do(t, cl, "POST", srv.URL+p, opToken, strings.NewReader("decision=approve&tool=up.echo&hash=h&token="+opToken), hdr)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s POST %s: %d, want 403", name, p, resp.StatusCode)
			}
		}
	}
	if d := fb.decided(); len(d) != 0 {
		t.Errorf("a cross-site request decided: %q", d)
	}
	// The same request from the console's own origin goes through.
	resp, _ := do(t, cl, "POST", srv.URL+"/ui/approvals/apr_1/decide", opToken, strings.NewReader("decision=approve"),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin", "Origin": srv.URL})
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("same-origin POST: %d, want 303", resp.StatusCode)
	}
}

func TestHostMustBeAllowed(t *testing.T) {
	_, _, srv := newTestConsole(t)
	req, _ := http.NewRequest("GET", srv.URL+"/ui/api/health", nil)
	req.Host = "attacker.example:8787"
	req.Header.Set("Authorization", "Bearer "+opToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host attacker.example: %d, want 403", resp.StatusCode)
	}
	for _, h := range []string{"localhost:1", "127.0.0.1", "[::1]:8787", "LOCALHOST"} {
		req.Host = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %d, want 200", h, resp.StatusCode)
		}
	}
}

func TestJournalFiltersAndPages(t *testing.T) {
	fb, _, srv := newTestConsole(t)
	for i := range 120 {
		c := Call{ID: fmt.Sprintf("call_%03d", i), Caller: "alice", Tool: "read", Status: "succeeded"}
		if i%2 == 1 {
			c.Caller = "bob"
		}
		if i == 7 {
			c.ToolError = true
		}
		fb.calls = append(fb.calls, c)
	}
	cl := noRedirect()
	_, body := do(t, cl, "GET", srv.URL+"/ui/journal?caller=bob", opToken, nil, nil)
	if strings.Contains(body, "call_000") || !strings.Contains(body, "call_001") || !strings.Contains(body, `href="/ui/journal?caller=bob&amp;offset=50"`) {
		t.Errorf("caller filter or next page link wrong:\n%s", body)
	}
	_, body = do(t, cl, "GET", srv.URL+"/ui/journal?caller=bob&offset=50", opToken, nil, nil)
	if !strings.Contains(body, "call_101") || !strings.Contains(body, `rel="prev"`) || strings.Contains(body, `rel="next"`) {
		t.Errorf("second page wrong:\n%s", body)
	}
	_, body = do(t, cl, "GET", srv.URL+"/ui/api/journal?status=tool_error", opToken, nil, nil)
	var got struct {
		Calls []Call `json:"calls"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.Calls) != 1 || got.Calls[0].ID != "call_007" {
		t.Errorf("status=tool_error: %v %s", err, body)
	}
	for _, q := range []string{"offset=-1", "offset=x", "offset=999999999", "caller=" + strings.Repeat("a", 300)} {
		resp, _ := do(t, cl, "GET", srv.URL+"/ui/api/journal?"+q, opToken, nil, nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, resp.StatusCode)
		}
	}
}

func TestAcceptDefinition(t *testing.T) {
	fb, _, srv := newTestConsole(t)
	resp, _ := do(t, noRedirect(), "POST", srv.URL+"/ui/tools/accept", opToken, strings.NewReader("tool=up.echo&hash=sha256%3Abbbb"),
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("accept: %d", resp.StatusCode)
	}
	if len(fb.accepted) != 1 || fb.accepted[0] != "up.echo sha256:bbbb ops" {
		t.Errorf("accepted %q", fb.accepted)
	}
}

// readEvents reads server-sent events until want of them arrived.
func readEvents(t *testing.T, r *bufio.Reader, want int) []string {
	t.Helper()
	var out []string
	var name string
	for len(out) < want {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading events after %q: %v", out, err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d struct {
				ID  string   `json:"id"`
				IDs []string `json:"ids"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
			if name == "snapshot" {
				out = append(out, "snapshot "+strings.Join(d.IDs, ","))
			} else {
				out = append(out, name+" "+d.ID)
			}
		}
	}
	return out
}

func TestEventsReportPendingAndClosed(t *testing.T) {
	fb, c, srv := newTestConsole(t)
	fb.addPending("apr_1", "write")
	req, _ := http.NewRequest("GET", srv.URL+"/ui/events", nil)
	req.Header.Set("Authorization", "Bearer "+opToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if got := readEvents(t, r, 2); strings.Join(got, "|") != "snapshot apr_1|pending apr_1" {
		t.Fatalf("first events %q", got)
	}
	fb.addPending("apr_2", "bash")
	if got := readEvents(t, r, 1); got[0] != "pending apr_2" {
		t.Fatalf("after a new request: %q", got)
	}
	if err := fb.DecideApproval(context.Background(), "apr_1", true, "ops", ""); err != nil {
		t.Fatal(err)
	}
	if got := readEvents(t, r, 1); got[0] != "closed apr_1" {
		t.Fatalf("after a decision: %q", got)
	}
	// Close ends the stream, so that a server shutting down is not held.
	c.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
}

func TestStaticAssetsAreEmbedded(t *testing.T) {
	_, _, srv := newTestConsole(t)
	for _, p := range []string{"/ui/static/console.js", "/ui/static/console.css"} {
		resp, body := do(t, http.DefaultClient, "GET", srv.URL+p, "", nil, nil)
		if resp.StatusCode != http.StatusOK || len(body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, resp.StatusCode, len(body))
		}
	}
	resp, _ := do(t, noRedirect(), "GET", srv.URL+"/ui/static/", "", nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("directory listing: %d, want 404", resp.StatusCode)
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/ui/journal?x=1":     "/ui/journal?x=1",
		"https://evil.com/ui": "/ui/approvals",
		"//evil.com/ui/":      "/ui/approvals",
		"/ui/\\evil":          "/ui/approvals",
		"/other":              "/ui/approvals",
		"":                    "/ui/approvals",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSessionsAreCappedAndExpire(t *testing.T) {
	now := time.Unix(0, 0)
	s := &sessions{m: map[string]*session{}, ttl: time.Hour, max: 2, now: func() time.Time { return now }}
	a, _ := s.create("a")
	now = now.Add(time.Second)
	b, _ := s.create("b")
	now = now.Add(time.Second)
	c, _ := s.create("c")
	if _, ok := s.lookup(a); ok {
		t.Error("the oldest session survived the cap")
	}
	if name, ok := s.lookup(c); !ok || name != "c" {
		t.Error("the newest session is missing")
	}
	now = now.Add(time.Hour)
	if _, ok := s.lookup(b); ok {
		t.Error("an expired session still works")
	}
}

func TestTrustedOriginIsAccepted(t *testing.T) {
	fb := &fakeBackend{}
	fb.addPending("apr_1", "write")
	c := New(fb, NewTokenAuth(map[string]string{opToken: "ops"}, nil), &Options{TrustedOrigins: []string{"https://ops.example"}})
	defer c.Close()
	post := func(host, origin string) int {
		req := httptest.NewRequest("POST", "http://"+host+"/ui/approvals/apr_1/decide", strings.NewReader("decision=deny"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+opToken)
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		return w.Code
	}
	if code := post("127.0.0.1:8787", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("an untrusted origin: %d, want 403", code)
	}
	if code := post("ops.example", "https://ops.example"); code != http.StatusSeeOther {
		t.Errorf("the trusted origin: %d, want 303", code)
	}
	if d := fb.decided(); len(d) != 1 {
		t.Errorf("decisions %q, want the trusted one", d)
	}
}

// Failed tokens are throttled by what they start with, not by address
// (issue 22, finding 13: any local process, all sharing 127.0.0.1, could
// lock the operator out of the login form, and wrong bearer tokens on
// /ui/api were never throttled). Guesses that start otherwise never block
// the operator, at the form or as bearer; guesses that start like a token
// block that token, even the right one, until the window ends.
func TestLoginFailuresAreThrottled(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	c := New(&fakeBackend{}, TokenAuthOf(opauth.New(map[string]string{opToken: "ops"}, nil, &opauth.Options{Now: clock})), &Options{Now: clock})
	defer c.Close()
	login := func(tok string) int {
		req := httptest.NewRequest("POST", "http://127.0.0.1/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = "127.0.0.1:1"
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		return w.Code
	}
	api := func(tok string) int {
		req := httptest.NewRequest("GET", "http://127.0.0.1/ui/api/health", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.RemoteAddr = "127.0.0.1:1"
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		return w.Code
	}
	// A flood of guesses from the operator's own address.
	for i := range 5 * auththrottle.Failures {
		if code := login(fmt.Sprint("guess", i)); code != http.StatusUnauthorized {
			t.Fatalf("login failure %d: %d, want 401", i, code)
		}
		if code := api(fmt.Sprintf("%03d-bearer-guess", i)); code != http.StatusUnauthorized {
			t.Fatalf("bearer failure %d: %d, want 401", i, code)
		}
	}
	if code := login(opToken); code != http.StatusSeeOther {
		t.Errorf("the operator's login after a flood of other guesses: %d, want 303", code)
	}
	if code := api(opToken); code != http.StatusOK {
		t.Errorf("the operator's bearer after a flood of other guesses: %d, want 200", code)
	}
	// Guesses that start like the operator's token, as bearer.
	for i := range auththrottle.Failures {
		api(opToken[:auththrottle.PrefixBytes] + fmt.Sprint(i))
	}
	if code := api(opToken[:auththrottle.PrefixBytes] + "more"); code != http.StatusTooManyRequests {
		t.Errorf("a guess after %d failures with its start: %d, want 429", auththrottle.Failures, code)
	}
	if code := login(opToken); code != http.StatusTooManyRequests {
		t.Errorf("the right token, blocked: %d, want 429 (a right guess among wrong ones must not pass)", code)
	}
	now = now.Add(auththrottle.Window)
	if code := api(opToken); code != http.StatusOK {
		t.Errorf("after the window: %d, want 200", code)
	}
}

// The login cookie is Secure on a TLS request, and on every request with
// SecureCookies (a TLS proxy in front: serve.public_url), never otherwise.
func TestLoginCookieSecure(t *testing.T) {
	for _, secure := range []bool{false, true} {
		c := New(&fakeBackend{}, NewTokenAuth(map[string]string{opToken: "ops"}, nil), &Options{SecureCookies: secure})
		req := httptest.NewRequest("POST", "http://127.0.0.1/ui/login", strings.NewReader(url.Values{"token": {opToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		c.ServeHTTP(w, req)
		c.Close()
		cks := w.Result().Cookies()
		if w.Code != http.StatusSeeOther || len(cks) != 1 || cks[0].Secure != secure {
			t.Errorf("SecureCookies %v: %d %+v", secure, w.Code, cks)
		}
	}
}

// TestSessionsPage: the MCP sessions the server reports are listed by
// caller with their id's start, ages and what is in flight, escaped; the
// JSON endpoint has them too; without a source the page says so (issue
// 26, item 1: no page showed sessions).
func TestSessionsPage(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	list := []Session{{Caller: "<alice>", ID: "ABCDEFGH…", Opened: now.Add(-90 * time.Second), LastActive: now.Add(-5 * time.Second), InFlight: 2}}
	c := New(&fakeBackend{}, NewTokenAuth(map[string]string{opToken: "ops"}, nil),
		&Options{Now: func() time.Time { return now }, Sessions: func() []Session { return list }})
	srv := httptest.NewServer(c)
	t.Cleanup(func() { c.Close(); srv.Close() })
	resp, body := do(t, noRedirect(), "GET", srv.URL+"/ui/sessions", opToken, nil, nil)
	for _, want := range []string{"&lt;alice&gt;", "ABCDEFGH…", "1m30s ago", "5s ago", `<td class="num">2</td>`} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("sessions page (%d) lacks %q:\n%s", resp.StatusCode, want, body)
		}
	}
	if strings.Contains(body, "<alice>") {
		t.Error("a caller's name reached the page unescaped")
	}
	resp, body = do(t, noRedirect(), "GET", srv.URL+"/ui/api/sessions", opToken, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"in_flight": 2`) || !strings.Contains(body, `"id_prefix": "ABCDEFGH…"`) {
		t.Errorf("/ui/api/sessions: %d %s", resp.StatusCode, body)
	}
	_, _, plain := newTestConsole(t)
	if _, body := do(t, noRedirect(), "GET", plain.URL+"/ui/sessions", opToken, nil, nil); !strings.Contains(body, "not tracked") {
		t.Errorf("without a source the page does not say sessions are not tracked:\n%s", body)
	}
}

// The upstreams page says which server is down, and the tools and
// upstreams pages name, per server, the tools its validator refuses, the
// keywords and the line that accepts them (issue 25).
func TestUpstreamsAndRefusedTools(t *testing.T) {
	fb, _, srv := newTestConsole(t)
	rs := &RefusedServer{Server: "fs", Line: "backplane.yaml:12", Validator: "subset", Tools: 3,
		Refused: []RefusedTool{{Name: "fs.read_file", Keywords: []string{"$schema", "format"}, OtherAccepts: true}},
		Fix:     "validator: draft2020-12", FixAccepts: 1}
	fb.upstreams = []Upstream{{Name: "fs", Up: false, Error: "exit status 1", Tools: 3, Refused: rs, Phase: "restarting"},
		{Name: "mem", Up: true, Required: true, Phase: "up", Protocol: "2026-07-28"},
		{Name: "late", Up: false, Error: "not started: connection refused", Phase: "starting"}}
	_, body := do(t, http.DefaultClient, "GET", srv.URL+"/ui/upstreams", opToken, nil, nil)
	for _, want := range []string{`id="upstream-fs" data-state="down" data-phase="restarting"`, "exit status 1", `<span class="badge warn">restarting</span>`,
		`id="upstream-mem" data-state="up" data-phase="up"`, "required", "<code>2026-07-28</code>",
		`id="upstream-late" data-state="down" data-phase="starting"`, `<span class="badge warn">starting</span>`, "never connected yet",
		"fs.read_file", "$schema, format", "backplane.yaml:12", "validator: draft2020-12"} {
		if !strings.Contains(body, want) {
			t.Errorf("the upstreams page lacks %q", want)
		}
	}
	fb.calls = nil
	_, body = do(t, http.DefaultClient, "GET", srv.URL+"/ui/tools", opToken, nil, nil)
	for _, want := range []string{`id="refused-fs"`, "1 of 3 tools refused by validator <code>subset</code>", "$schema, format", "validator: draft2020-12"} {
		if !strings.Contains(body, want) {
			t.Errorf("the tools page lacks %q", want)
		}
	}
}
