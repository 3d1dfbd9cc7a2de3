package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbackplane/backplane/internal/auththrottle"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/store"
)

// Console serves the web console. Create it with New; it is an
// http.Handler for the paths under Prefix.
type Console struct {
	b        Backend
	auth     Auth
	log      *slog.Logger
	hosts    map[string]struct{}
	origins  []string
	anyHost  bool
	poll     time.Duration
	now      func() time.Time
	sessions *sessions
	secure   bool // cookies are Secure whatever the request
	handler  http.Handler
	// mcpSessions lists the gateway's MCP sessions (Options.Sessions);
	// sessions above are the console's own logins.
	mcpSessions func() []Session

	// wake tells live streams to read pending approvals now (a decision
	// was made here); done ends them (Close).
	mu      sync.Mutex
	wakers  map[chan struct{}]struct{}
	done    chan struct{}
	closeMu sync.Once
}

// New returns a console over b, letting in the operators auth knows. It
// panics when b or auth is nil: that is a wiring mistake.
func New(b Backend, auth Auth, opts *Options) *Console {
	if b == nil || auth == nil {
		panic("console.New: a Backend and an Auth are required")
	}
	if opts == nil {
		opts = &Options{}
	}
	c := &Console{
		b:           b,
		auth:        auth,
		log:         opts.Logger,
		hosts:       map[string]struct{}{},
		poll:        opts.PollInterval,
		now:         opts.Now,
		wakers:      map[chan struct{}]struct{}{},
		done:        make(chan struct{}),
		mcpSessions: opts.Sessions,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.poll <= 0 {
		c.poll = DefaultPollInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	hosts := opts.AllowedHosts
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	c.origins = opts.TrustedOrigins
	for _, o := range opts.TrustedOrigins {
		if u, err := url.Parse(o); err == nil && u.Hostname() != "" {
			hosts = append(hosts, u.Hostname())
		}
	}
	for _, h := range hosts {
		if h == "*" {
			c.anyHost = true
		}
		c.hosts[strings.ToLower(h)] = struct{}{}
	}
	ttl, maxS := opts.SessionTTL, opts.MaxSessions
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	if maxS <= 0 {
		maxS = DefaultMaxSessions
	}
	c.sessions = &sessions{m: map[string]*session{}, ttl: ttl, max: maxS, now: c.now}
	c.secure = opts.SecureCookies
	c.handler = c.routes()
	return c
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Close ends the live event streams, so that an HTTP server shutting down
// is not held by them. The console keeps serving pages.
func (c *Console) Close() {
	c.closeMu.Do(func() { close(c.done) })
}

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	p := Prefix
	op := func(h http.HandlerFunc) http.Handler { return c.requireOperator(h) }

	mux.Handle("GET "+p+"/static/", http.StripPrefix(p+"/static/", staticHandler()))
	mux.HandleFunc("GET "+p+"/login", c.loginPage)
	mux.HandleFunc("POST "+p+"/login", c.login)
	mux.HandleFunc("POST "+p+"/logout", c.logout)

	home := op(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, p+"/overview", http.StatusSeeOther)
	})
	mux.Handle("GET "+p, home)
	mux.Handle("GET "+p+"/{$}", home)
	mux.Handle("GET "+p+"/overview", op(c.overviewPage))
	mux.Handle("GET "+p+"/upstreams", op(c.upstreamsPage))
	mux.Handle("POST "+p+"/journal/{id}/resolve", op(c.resolve))
	mux.Handle("GET "+p+"/approvals", op(c.approvalsPage))
	mux.Handle("GET "+p+"/approvals/{id}", op(c.approvalPage))
	mux.Handle("POST "+p+"/approvals/{id}/decide", op(c.decide))
	mux.Handle("GET "+p+"/journal", op(c.journalPage))
	mux.Handle("GET "+p+"/journal/{id}", op(c.callPage))
	mux.Handle("GET "+p+"/budgets", op(c.budgetsPage))
	mux.Handle("GET "+p+"/tools", op(c.toolsPage))
	mux.Handle("POST "+p+"/tools/accept", op(c.accept))
	mux.Handle("GET "+p+"/health", op(c.healthPage))
	mux.Handle("GET "+p+"/sessions", op(c.sessionsPage))
	mux.Handle("GET "+p+"/connections", op(c.connectionsPage))
	mux.Handle("POST "+p+"/connections/revoke", op(c.revokeConnection))
	mux.Handle("POST "+p+"/connections/connect", op(c.connect))
	mux.Handle("GET "+p+"/events", op(c.events))

	mux.Handle("GET "+p+"/api/approvals", op(c.apiApprovals))
	mux.Handle("GET "+p+"/api/approvals/{id}", op(c.apiApproval))
	mux.Handle("POST "+p+"/api/approvals/{id}/decide", op(c.decide))
	mux.Handle("GET "+p+"/api/journal", op(c.apiJournal))
	mux.Handle("GET "+p+"/api/journal/{id}", op(c.apiCall))
	mux.Handle("GET "+p+"/api/budgets", op(c.apiBudgets))
	mux.Handle("GET "+p+"/api/tools", op(c.apiTools))
	mux.Handle("POST "+p+"/api/tools/accept", op(c.accept))
	mux.Handle("GET "+p+"/api/health", op(c.apiHealth))
	mux.Handle("GET "+p+"/api/sessions", op(c.apiSessions))
	mux.Handle("GET "+p+"/api/connections", op(c.apiConnections))
	mux.Handle("POST "+p+"/api/connections/revoke", op(c.revokeConnection))
	mux.Handle("POST "+p+"/api/connections/connect", op(c.connect))
	mux.Handle("GET "+p+"/api/overview", op(c.apiOverview))
	mux.Handle("GET "+p+"/api/upstreams", op(c.apiUpstreams))
	mux.Handle("POST "+p+"/api/journal/{id}/resolve", op(c.resolve))

	// Every other path under the prefix, and every other method, needs an
	// operator too, so that probing says nothing to anyone else.
	mux.Handle(p+"/", op(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "no such page")
	}))

	cop := http.NewCrossOriginProtection()
	for _, o := range c.origins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			c.log.Warn("console: a trusted origin is malformed and is ignored", "origin", o, "error", err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.log.Warn("console: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		c.fail(w, r, http.StatusForbidden, "cross-origin request refused")
	}))
	return c.checkHost(securityHeaders(cop.Handler(mux)))
}

// securityHeaders: no framing, no inline script, nothing cached, no
// referrer leaving the console.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: with no-referrer, browsers send
		// "Origin: null" on the console's own form posts.
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

func wantsJSON(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, Prefix+"/api/") {
		return true
	}
	acc := r.Header.Get("Accept")
	return strings.Contains(acc, "application/json") && !strings.Contains(acc, "text/html")
}

// fail answers an error as JSON ({"error": msg}) or as a page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if wantsJSON(r) || r.Header.Get("Authorization") != "" {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	c.render(w, r, status, "error", "Error", "", map[string]any{"Status": status, "StatusText": http.StatusText(status), "Message": msg})
}

// backendError answers an error from the backend: its kind decides the
// status; an unexpected error is logged and not shown.
func (c *Console) backendError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrConflict):
		c.fail(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, ErrForbidden):
		c.fail(w, r, http.StatusForbidden, err.Error())
	case errors.Is(err, context.Canceled):
		// the browser went away
	default:
		c.log.Error("console: backend error", "path", r.URL.Path, "error", err)
		c.fail(w, r, http.StatusInternalServerError, "internal error (see the server's log)")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	// The same value, with DEL, C1 and format characters as JSON escapes:
	// an operator may read it with curl on a terminal.
	w.Write(termtext.JSON(b.Bytes()))
}

// ---- login

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if _, res := c.authenticate(r); res == authOK {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", "Log in", "", map[string]any{"Next": next})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "the form could not be read")
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	next := safeNext(r.PostForm.Get("next"))
	// Throttled by what the token starts with, not by the address: every
	// local process shares 127.0.0.1 (see internal/auththrottle).
	if _, blocked := c.auth.Blocked(tok); blocked {
		c.log.Warn("console: login refused: too many failures with tokens that start like it", "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", strconv.Itoa(int(auththrottle.Window/time.Second)))
		c.render(w, r, http.StatusTooManyRequests, "login", "Log in", "", map[string]any{"Next": next,
			"Error": "too many wrong tokens that start like this one: wait and try again"})
		return
	}
	name, ok := c.auth.Operator(tok)
	if !ok {
		status, msg := http.StatusUnauthorized, "this is not an operator's token"
		if c.auth.IsCaller(tok) {
			status, msg = http.StatusForbidden, "this is a caller's token: the console is for operators only"
		} else {
			c.auth.Fail(tok)
		}
		c.log.Warn("console: login refused", "status", status, "remote", r.RemoteAddr)
		c.render(w, r, status, "login", "Log in", "", map[string]any{"Next": next, "Error": msg})
		return
	}
	id, err := c.sessions.create(name)
	if err != nil {
		c.log.Error("console: session id", "error", err)
		c.fail(w, r, http.StatusInternalServerError, "internal error")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: id, Path: Prefix,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure || r.TLS != nil,
		MaxAge: int(c.sessions.ttl / time.Second),
	})
	c.log.Info("console: operator logged in", "operator", name)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.drop(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure || r.TLS != nil})
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// ---- approvals

// recentDecisions is how many decided requests the approvals page lists.
const recentDecisions = 20

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request) {
	page := 0
	if p := r.URL.Query().Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > maxPendingListed/pendingPage {
			c.fail(w, r, http.StatusBadRequest, "page must be a small number")
			return
		}
		page = n
	}
	all, err := c.b.ListApprovals(r.Context(), "pending", maxPendingListed)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	total := len(all)
	lo, hi := min(page*pendingPage, total), min((page+1)*pendingPage, total)
	pending, err := c.detailed(r.Context(), all[lo:hi])
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	decided, err := c.b.ListApprovals(r.Context(), "", 100)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	var recent []Approval
	for _, a := range decided {
		if a.Status != "pending" && len(recent) < recentDecisions {
			recent = append(recent, a)
		}
	}
	data := map[string]any{
		"Pending": pending, "PendingTotal": total, "Recent": recent, "Live": page == 0,
		// A few requests are shown whole; more are one line each, opened
		// on selection.
		"OpenAll": total <= openPending,
	}
	if page > 0 {
		data["PrevPage"] = fmt.Sprintf("%s/approvals?page=%d", Prefix, page-1)
	}
	if hi < total {
		data["NextPage"] = fmt.Sprintf("%s/approvals?page=%d", Prefix, page+1)
	}
	c.render(w, r, http.StatusOK, "approvals", "Approvals", "approvals", data)
}

const (
	// pendingPage is how many pending requests a page lists, each read
	// whole (its preview may read a file).
	pendingPage = 20
	// maxPendingListed bounds the pending requests paged through.
	maxPendingListed = 1000
	// openPending: up to this many pending requests are shown open.
	openPending = 3
)

// detailed reads each request whole (arguments, preview, why).
func (c *Console) detailed(ctx context.Context, pending []Approval) ([]Approval, error) {
	out := slices.Clone(pending)
	for i := range out {
		a, err := c.b.GetApproval(ctx, out[i].ID)
		switch {
		case err == nil:
			out[i] = *a
		case errors.Is(err, store.ErrNotFound):
		default:
			return nil, err
		}
	}
	return out, nil
}

func (c *Console) approvalPage(w http.ResponseWriter, r *http.Request) {
	a, err := c.b.GetApproval(r.Context(), r.PathValue("id"))
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "approval", "Approval "+a.ID, "approvals", map[string]any{"A": a})
}

// decideBody is the JSON form of a decision.
type decideBody struct {
	Approve *bool  `json:"approve"`
	Reason  string `json:"reason"`
}

// decide records a decision, from the form (decision=approve|deny,
// reason) or JSON ({"approve": bool, "reason": "..."}).
func (c *Console) decide(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var approve bool
	var reason string
	isJSON := strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if isJSON {
		var body decideBody
		if err := decodeJSON(r.Body, &body); err != nil {
			c.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if body.Approve == nil {
			c.fail(w, r, http.StatusBadRequest, `"approve" (true or false) is required`)
			return
		}
		approve, reason = *body.Approve, body.Reason
	} else {
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, http.StatusBadRequest, "the form could not be read")
			return
		}
		switch r.PostForm.Get("decision") {
		case "approve":
			approve = true
		case "deny":
		default:
			c.fail(w, r, http.StatusBadRequest, `decision must be "approve" or "deny"`)
			return
		}
		reason = r.PostForm.Get("reason")
	}
	reason = strings.TrimSpace(reason)
	if len(reason) > maxReason {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("the reason is longer than %d bytes", maxReason))
		return
	}
	operator := operatorOf(r.Context())
	if err := c.b.DecideApproval(r.Context(), id, approve, operator, reason); err != nil {
		c.backendError(w, r, err)
		return
	}
	verdict := "denied"
	if approve {
		verdict = "approved"
	}
	c.log.Info("console: approval decided", "id", id, "decision", verdict, "operator", operator)
	c.wake()
	if isJSON || wantsJSON(r) {
		a, err := c.b.GetApproval(r.Context(), id)
		if err != nil {
			writeJSON(w, http.StatusOK, map[string]string{"id": id, "status": verdict})
			return
		}
		writeJSON(w, http.StatusOK, a)
		return
	}
	http.Redirect(w, r, Prefix+"/approvals/"+url.PathEscape(id), http.StatusSeeOther)
}

func decodeJSON(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if err := jsonstrict.Valid(data, nil); err != nil {
		return fmt.Errorf("the body is not valid JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body does not have the expected fields: %w", err)
	}
	return nil
}

// ---- journal

// callQuery reads the journal's filters from the URL.
func (c *Console) callQuery(r *http.Request) (CallQuery, error) {
	q := r.URL.Query()
	cq := CallQuery{Caller: q.Get("caller"), Tool: q.Get("tool"), Status: q.Get("status"),
		Class: q.Get("class"), Text: q.Get("q"), Limit: PageSize}
	for _, v := range []string{cq.Caller, cq.Tool, cq.Status, cq.Class, cq.Text} {
		if len(v) > 200 {
			return cq, errors.New("a filter is longer than 200 bytes")
		}
	}
	for _, p := range []string{cq.Caller, cq.Tool} {
		if _, err := path.Match(p, ""); err != nil {
			return cq, fmt.Errorf("the pattern %q is malformed: %v", p, err)
		}
	}
	var err error
	if cq.Since, err = c.parseWhen(q.Get("since")); err != nil {
		return cq, fmt.Errorf("since: %w", err)
	}
	if cq.Until, err = c.parseWhen(q.Get("until")); err != nil {
		return cq, fmt.Errorf("until: %w", err)
	}
	if s := q.Get("offset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxOffset {
			return cq, fmt.Errorf("offset must be a number from 0 to %d", maxOffset)
		}
		cq.Offset = n
	}
	return cq, nil
}

// parseWhen reads a time filter: "" (none), a duration before now ("15m",
// "2h", "7d"), a local date and time as a datetime-local field sends it
// (taken as UTC), or RFC 3339.
func (c *Console) parseWhen(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, ok := parseAgo(s); ok {
		return c.now().Add(-d), nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration before now (15m, 2h, 7d) nor a time (2006-01-02T15:04, UTC)", s)
}

// parseAgo reads "15m", "2h", "7d" (days are 24h), at most 400 days.
func parseAgo(s string) (time.Duration, bool) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		k, err := strconv.Atoi(n)
		if err != nil || k < 0 || k > 400 {
			return 0, false
		}
		d = time.Duration(k) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 || d > 400*24*time.Hour {
			return 0, false
		}
	}
	return d, true
}

// Statuses the journal filter offers.
var journalStatuses = []string{"refused", "started", "succeeded", "tool_error", "failed", "uncertain", "executed", "not_executed"}

// journalRanges are the time ranges the journal filter offers.
var journalRanges = []struct{ Value, Label string }{
	{"", "any time"}, {"15m", "last 15 min"}, {"1h", "last hour"}, {"6h", "last 6 hours"}, {"24h", "last 24 hours"}, {"7d", "last 7 days"},
}

func (c *Console) journalPage(w http.ResponseWriter, r *http.Request) {
	q, err := c.callQuery(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	calls, more, err := c.b.ListCalls(r.Context(), q)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	page := func(offset int) string {
		v := url.Values{}
		for _, k := range []string{"caller", "tool", "status", "class", "q", "since", "until", "live"} {
			if s := r.URL.Query().Get(k); s != "" {
				v.Set(k, s)
			}
		}
		if offset > 0 {
			v.Set("offset", strconv.Itoa(offset))
		}
		if len(v) == 0 {
			return Prefix + "/journal"
		}
		return Prefix + "/journal?" + v.Encode()
	}
	uq := r.URL.Query()
	data := map[string]any{"Q": q, "Calls": calls, "Statuses": journalStatuses, "Ranges": journalRanges,
		"Since": uq.Get("since"), "Until": uq.Get("until"), "Live": uq.Get("live") != "",
		"First": q.Offset + 1, "Last": q.Offset + len(calls), "Now": c.now()}
	if q.Offset > 0 {
		data["Prev"] = page(max(0, q.Offset-q.Limit))
	}
	if more && q.Offset+q.Limit <= maxOffset {
		data["Next"] = page(q.Offset + q.Limit)
	}
	c.render(w, r, http.StatusOK, "journal", "Journal", "journal", data)
}

func (c *Console) callPage(w http.ResponseWriter, r *http.Request) {
	call, err := c.b.GetCall(r.Context(), r.PathValue("id"))
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "call", "Call "+call.ID, "journal", map[string]any{"C": call, "Now": c.now()})
}

// resolveBody is the JSON form of resolving an uncertain call.
type resolveBody struct {
	Executed *bool  `json:"executed"`
	Reason   string `json:"reason"`
}

// resolve records an operator's verdict on an uncertain call, from the
// form (outcome=executed|not_executed, reason) or JSON ({"executed":
// bool, "reason": "..."}). A reason is required: whoever reads the
// journal later needs to know how the operator knew.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var executed bool
	var reason string
	isJSON := strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if isJSON {
		var body resolveBody
		if err := decodeJSON(r.Body, &body); err != nil {
			c.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if body.Executed == nil {
			c.fail(w, r, http.StatusBadRequest, `"executed" (true or false) is required`)
			return
		}
		executed, reason = *body.Executed, body.Reason
	} else {
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, http.StatusBadRequest, "the form could not be read")
			return
		}
		switch r.PostForm.Get("outcome") {
		case "executed":
			executed = true
		case "not_executed":
		default:
			c.fail(w, r, http.StatusBadRequest, `outcome must be "executed" or "not_executed"`)
			return
		}
		reason = r.PostForm.Get("reason")
	}
	reason = strings.TrimSpace(reason)
	if reason == "" {
		c.fail(w, r, http.StatusBadRequest, "a reason is required: say how you know whether the call ran")
		return
	}
	if len(reason) > maxReason {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("the reason is longer than %d bytes", maxReason))
		return
	}
	operator := operatorOf(r.Context())
	if err := c.b.ResolveCall(r.Context(), id, executed, operator, reason); err != nil {
		c.backendError(w, r, err)
		return
	}
	c.log.Info("console: uncertain call resolved", "call_id", id, "executed", executed, "operator", operator)
	if isJSON || wantsJSON(r) {
		call, err := c.b.GetCall(r.Context(), id)
		if err != nil {
			writeJSON(w, http.StatusOK, map[string]any{"call_id": id, "executed": executed})
			return
		}
		writeJSON(w, http.StatusOK, call)
		return
	}
	http.Redirect(w, r, Prefix+"/journal/"+url.PathEscape(id), http.StatusSeeOther)
}

// ---- overview, upstreams

// overviewRanges are the ranges the overview offers.
var overviewRanges = []struct {
	Value, Label string
	D            time.Duration
}{
	{"15m", "15 min", 15 * time.Minute}, {"1h", "1 hour", time.Hour}, {"6h", "6 hours", 6 * time.Hour},
	{"24h", "24 hours", 24 * time.Hour}, {"7d", "7 days", 7 * 24 * time.Hour},
}

func (c *Console) overview(r *http.Request) (*Overview, string, error) {
	sel := r.URL.Query().Get("range")
	d := time.Hour
	found := false
	for _, rg := range overviewRanges {
		if rg.Value == sel {
			d, found = rg.D, true
		}
	}
	if !found {
		sel = "1h"
	}
	now := c.now()
	o, err := c.b.Overview(r.Context(), now.Add(-d), now)
	return o, sel, err
}

func (c *Console) overviewPage(w http.ResponseWriter, r *http.Request) {
	o, sel, err := c.overview(r)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", "Overview", "overview", map[string]any{
		"O": o, "Range": sel, "Ranges": overviewRanges, "Calls": callsChart(o), "Refused": refusedChart(o), "Now": c.now()})
}

func (c *Console) apiOverview(w http.ResponseWriter, r *http.Request) {
	o, _, err := c.overview(r)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (c *Console) upstreamsPage(w http.ResponseWriter, r *http.Request) {
	us := c.b.Upstreams(r.Context())
	down := 0
	for _, u := range us {
		if !u.Up {
			down++
		}
	}
	c.render(w, r, http.StatusOK, "upstreams", "Upstreams", "upstreams", map[string]any{"Upstreams": us, "Down": down, "Live": true})
}

func (c *Console) apiUpstreams(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"upstreams": nonNil(c.b.Upstreams(r.Context()))})
}

// ---- sessions, budgets, tools, health

// listSessions is the server's list, or none when serve gave no source.
func (c *Console) listSessions() []Session {
	if c.mcpSessions == nil {
		return nil
	}
	return c.mcpSessions()
}

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "sessions", "Sessions", "sessions", map[string]any{
		"Sessions": c.listSessions(), "Tracked": c.mcpSessions != nil, "Now": c.now()})
}

func (c *Console) apiSessions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"sessions": nonNil(c.listSessions())})
}

func (c *Console) budgetsPage(w http.ResponseWriter, r *http.Request) {
	bs, err := c.b.Budgets(r.Context())
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "budgets", "Budgets", "budgets", map[string]any{"Budgets": bs})
}

func (c *Console) toolsPage(w http.ResponseWriter, r *http.Request) {
	ts, err := c.b.Tools(r.Context())
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	held, down := 0, 0
	for _, t := range ts {
		if t.Pin.Held() {
			held++
		}
		if t.Down != "" {
			down++
		}
	}
	// Per server, the tools its validator refuses (issue: a new user's
	// upstream tools all failing with unsupported_capability, and nothing
	// saying which line accepts them).
	var refused []*RefusedServer
	keywords := map[string]string{}
	for _, u := range c.b.Upstreams(r.Context()) {
		if u.Refused != nil {
			refused = append(refused, u.Refused)
			for _, t := range u.Refused.Refused {
				keywords[t.Name] = strings.Join(t.Keywords, ", ")
			}
		}
	}
	c.render(w, r, http.StatusOK, "tools", "Tools", "tools", map[string]any{"Tools": ts, "Held": held, "Down": down,
		"Refused": refused, "Keywords": keywords})
}

// readAction reads an operator action's body, at most maxFormBytes: JSON
// into body, else the form, whose values form copies into it. isJSON says
// which it was (the answer takes the same form); when the body cannot be
// read it has answered 400 and ok is false.
func (c *Console) readAction(w http.ResponseWriter, r *http.Request, body any, form func(url.Values)) (isJSON, ok bool) {
	isJSON = strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if isJSON {
		if err := decodeJSON(r.Body, body); err != nil {
			c.fail(w, r, http.StatusBadRequest, err.Error())
			return true, false
		}
		return true, true
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "the form could not be read")
		return false, false
	}
	form(r.PostForm)
	return false, true
}

// acceptBody is the JSON form of accepting a definition.
type acceptBody struct {
	Tool string `json:"tool"`
	Hash string `json:"hash"`
}

func (c *Console) accept(w http.ResponseWriter, r *http.Request) {
	var body acceptBody
	isJSON, ok := c.readAction(w, r, &body, func(f url.Values) { body.Tool, body.Hash = f.Get("tool"), f.Get("hash") })
	if !ok {
		return
	}
	if body.Tool == "" || body.Hash == "" {
		c.fail(w, r, http.StatusBadRequest, "tool and hash are required")
		return
	}
	operator := operatorOf(r.Context())
	if err := c.b.AcceptDefinition(r.Context(), body.Tool, body.Hash, operator); err != nil {
		c.backendError(w, r, err)
		return
	}
	c.log.Info("console: definition accepted", "tool", body.Tool, "hash", body.Hash, "operator", operator)
	if isJSON || wantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]string{"tool": body.Tool, "accepted_hash": body.Hash})
		return
	}
	http.Redirect(w, r, Prefix+"/tools#tool-"+url.PathEscape(body.Tool), http.StatusSeeOther)
}

func (c *Console) healthPage(w http.ResponseWriter, r *http.Request) {
	h := c.b.Health(r.Context())
	status := http.StatusOK
	if !h.OK {
		status = http.StatusServiceUnavailable
	}
	c.render(w, r, status, "health", "Health", "health", map[string]any{"H": h})
}

// ---- JSON

func (c *Console) apiApprovals(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	as, err := c.b.ListApprovals(r.Context(), status, 200)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": nonNil(as)})
}

func (c *Console) apiApproval(w http.ResponseWriter, r *http.Request) {
	a, err := c.b.GetApproval(r.Context(), r.PathValue("id"))
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (c *Console) apiJournal(w http.ResponseWriter, r *http.Request) {
	q, err := c.callQuery(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	calls, more, err := c.b.ListCalls(r.Context(), q)
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	out := map[string]any{"calls": nonNil(calls), "offset": q.Offset}
	if more {
		out["next_offset"] = q.Offset + q.Limit
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Console) apiCall(w http.ResponseWriter, r *http.Request) {
	call, err := c.b.GetCall(r.Context(), r.PathValue("id"))
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, call)
}

func (c *Console) apiBudgets(w http.ResponseWriter, r *http.Request) {
	bs, err := c.b.Budgets(r.Context())
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"budgets": nonNil(bs)})
}

func (c *Console) apiTools(w http.ResponseWriter, r *http.Request) {
	ts, err := c.b.Tools(r.Context())
	if err != nil {
		c.backendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": nonNil(ts)})
}

func (c *Console) apiHealth(w http.ResponseWriter, r *http.Request) {
	h := c.b.Health(r.Context())
	status := http.StatusOK
	if !h.OK {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
