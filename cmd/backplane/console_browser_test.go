package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// consoleConfig serves the built-in tools to alice (write, edit and bash
// need an approval, as by default) and lets the operator ops into the
// console.
const consoleConfig = `operators:
  - name: ops
    token: "ops-secret"
policy:
  - caller: alice
    allow: ["*"]
budgets:
  - scope: caller
    quota: 100
serve:
  tokens: {"alice-token": alice}
  approval_wait: 45s
`

const (
	opsToken   = "ops-secret"
	aliceToken = "alice-token"
)

// chromiumPath finds Debian's chromium (or another Chrome); the browser
// tests skip, saying why, only when there is none.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install -y chromium; scripts/test installs it when run as root): the console's browser tests need a real browser")
	return ""
}

// newBrowser starts headless Chromium with a fresh profile and nothing
// that reaches beyond loopback on its own (no background networking,
// component updates, sync or QUIC).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 860),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

func uiDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func uiText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// uiPoll polls a JavaScript expression in the page until it is truthy
// and returns its value. A navigation under way destroys the page's
// JavaScript context: the poll starts again in the new page.
func uiPoll[T any](ctx context.Context, js string) (T, error) {
	deadline := time.Now().Add(40 * time.Second)
	for {
		v, err := chromedp.Run(ctx, chromedp.Poll[T](js, chromedp.WithPollingInterval(100*time.Millisecond),
			chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil ||
			!(strings.Contains(err.Error(), "context") || strings.Contains(err.Error(), "navigated")) {
			return v, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// uiWaitFor waits for a JavaScript predicate to hold in the page.
func uiWaitFor(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	if _, err := uiPoll[chromedp.Void](ctx, js); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, body)
	}
}

// login fills in the login form the console redirects to.
func uiLogin(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	uiDo(t, ctx, "log in",
		chromedp.Navigate(base+"/ui/approvals"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")),
	)
}

// waitingCall is a write made by alice through the Go SDK client, which
// cannot be asked (no elicitation) and so waits for an operator.
type waitingCall struct {
	done chan struct{}
	res  *mcp.CallToolResult
	err  error
}

func startWrite(t *testing.T, base, path, content string) *waitingCall {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "console-test", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: tokenTransport(aliceToken)},
	}, sessionEra)
	if err != nil {
		cancel()
		t.Fatalf("connect: %v", err)
	}
	w := &waitingCall{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.res, w.err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": path, "content": content}})
	}()
	t.Cleanup(func() { cancel(); <-w.done; cs.Close() })
	return w
}

func (w *waitingCall) wait(t *testing.T, p *serveProc) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(40 * time.Second):
		t.Fatalf("the call did not end within 40s of the decision:\n%s", p.log())
	}
	if w.err != nil {
		t.Fatalf("the call: %v", w.err)
	}
}

func (w *waitingCall) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// apiGet reads a console JSON endpoint as the operator.
func uiAPIGet(t *testing.T, base, path string) map[string]any {
	t.Helper()
	code, body := httpGet(t, base+path, opsToken)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return m
}

// newPendingCard waits for the card of a new pending request to appear
// on the open approvals page (live, without a reload) and returns its id.
func newPendingCard(t *testing.T, ctx context.Context, p *serveProc, seen map[string]bool) string {
	base := p.base
	t.Helper()
	known := []string{}
	for id := range seen {
		known = append(known, id)
	}
	js := fmt.Sprintf(`(function(){ var known = %s;
		var cards = document.querySelectorAll('#pending article.approval');
		for (var i = 0; i < cards.length; i++) { if (known.indexOf(cards[i].dataset.id) < 0) return cards[i].dataset.id; }
		return false; })()`, uiJSON(known))
	id, err := uiPoll[string](ctx, js)
	if err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		_, pending := httpGet(t, base+"/ui/api/approvals?status=pending", opsToken)
		t.Fatalf("no new pending approval appeared on the page: %v\npage:\n%s\npending: %s\nserve log:\n%s", err, body, pending, p.log())
	}
	seen[id] = true
	return id
}

func uiJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestConsoleInBrowser(t *testing.T) {
	chromiumPath(t)
	g := newGWDir(t, consoleConfig)
	if err := os.WriteFile(filepath.Join(g.dir, "notes.txt"), []byte("hello from the workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, g)
	base := p.base
	ctx := newBrowser(t)
	seen := map[string]bool{}

	t.Run("log in", func(t *testing.T) {
		uiLogin(t, ctx, base, opsToken)
		uiWaitFor(t, ctx, "the approvals page", `location.pathname === '/ui/approvals'`)
		if who := uiText(t, ctx, ".who"); who != "ops" {
			t.Errorf("logged in as %q, want ops", who)
		}
		// The session cookie is HttpOnly: the page's script cannot read it.
		if c, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); c != "" {
			t.Errorf("document.cookie = %q: the session cookie is readable by scripts", c)
		}
	})

	t.Run("approve a waiting call with a click", func(t *testing.T) {
		// The page is open, its live stream connected, before the call
		// asks: the request must appear without a reload.
		uiWaitFor(t, ctx, "the live stream", `document.getElementById('live-status').textContent === 'live'`)
		call := startWrite(t, base, "notes.txt", "hello from the console\n")
		id := newPendingCard(t, ctx, p, seen)
		card := fmt.Sprintf(`article[data-id=%q]`, id)
		body := uiText(t, ctx, card)
		for _, want := range []string{"write", "alice", "-hello from the workspace", "+hello from the console"} {
			if !strings.Contains(body, want) {
				t.Errorf("the card lacks %q:\n%s", want, body)
			}
		}
		if call.ended() {
			t.Fatal("the call ended before anyone decided")
		}
		uiDo(t, ctx, "approve", chromedp.Click(chromedp.CSS(card+" button.approve")))
		call.wait(t, p)
		if call.res.IsError {
			t.Fatalf("the approved call failed: %+v", call.res)
		}
		data, err := os.ReadFile(filepath.Join(g.dir, "notes.txt"))
		if err != nil || string(data) != "hello from the console\n" {
			t.Errorf("notes.txt after the approved write: %q %v", data, err)
		}
		uiWaitFor(t, ctx, "the decided request's page", `document.querySelector('.badge.status-approved') !== null`)
		a := uiAPIGet(t, base, "/ui/api/approvals/"+id)
		if a["status"] != "approved" || a["decided_by"] != "ops" || a["consumed_by"] == nil {
			t.Errorf("the request after the call: %v", a)
		}
		// The call is in the journal, succeeded, with its result.
		calls := uiAPIGet(t, base, "/ui/api/journal?tool=write")["calls"].([]any)
		if len(calls) == 0 || calls[0].(map[string]any)["status"] != "succeeded" {
			t.Errorf("journal: %v", calls)
		}
	})

	t.Run("deny with a reason", func(t *testing.T) {
		uiDo(t, ctx, "open the approvals", chromedp.Navigate(base+"/ui/approvals"))
		uiWaitFor(t, ctx, "the live stream", `document.getElementById('live-status').textContent === 'live'`)
		call := startWrite(t, base, "denied.txt", "must not be written\n")
		id := newPendingCard(t, ctx, p, seen)
		card := fmt.Sprintf(`article[data-id=%q]`, id)
		uiDo(t, ctx, "deny",
			chromedp.SendKeys(chromedp.CSS(card+` input[name=reason]`), "not today"),
			chromedp.Click(chromedp.CSS(card+" button.deny")),
		)
		call.wait(t, p)
		if !call.res.IsError {
			t.Fatalf("the denied call succeeded: %+v", call.res)
		}
		if _, err := os.Stat(filepath.Join(g.dir, "denied.txt")); !os.IsNotExist(err) {
			t.Errorf("denied.txt exists after a denial: %v", err)
		}
		a := uiAPIGet(t, base, "/ui/api/approvals/"+id)
		if a["status"] != "denied" || a["decided_by"] != "ops" {
			t.Errorf("the request after the denial: %v", a)
		}
		uiWaitFor(t, ctx, "the denied request's page", `document.querySelector('.badge.status-denied') !== null`)
	})

	t.Run("a cross-site POST is refused", func(t *testing.T) {
		uiDo(t, ctx, "open the approvals", chromedp.Navigate(base+"/ui/approvals"))
		uiWaitFor(t, ctx, "the live stream", `document.getElementById('live-status').textContent === 'live'`)
		call := startWrite(t, base, "forged.txt", "forged\n")
		id := newPendingCard(t, ctx, p, seen)
		// Another origin (another port of 127.0.0.1: same site, so the
		// SameSite cookie alone would not stop it) serves a form that
		// posts an approval to the console.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/ui/approvals/%s/decide">
				<input type="hidden" name="decision" value="approve"><button id="go">win a prize</button></form>`, base, id)
		}))
		defer evil.Close()
		uiDo(t, ctx, "submit the forged form",
			chromedp.Navigate(evil.URL),
			chromedp.Click(chromedp.CSS("#go")),
		)
		// Refused by the server's Origin check or, behind it, the
		// console's cross-origin protection (tested alone in console/).
		uiWaitFor(t, ctx, "the refusal", `document.body && /origin/i.test(document.body.innerText) && /forbidden|refused/i.test(document.body.innerText)`)
		a := uiAPIGet(t, base, "/ui/api/approvals/"+id)
		if a["status"] != "pending" {
			t.Errorf("after a cross-site POST the request is %v, want pending", a["status"])
		}
		if call.ended() {
			t.Errorf("the call ended after a cross-site POST: %+v %v", call.res, call.err)
		}
		if _, err := os.Stat(filepath.Join(g.dir, "forged.txt")); !os.IsNotExist(err) {
			t.Errorf("forged.txt exists: %v", err)
		}
		// Deny it through the JSON endpoint, as a script with the token would.
		req, _ := http.NewRequest("POST", base+"/ui/api/approvals/"+id+"/decide", strings.NewReader(`{"approve":false,"reason":"forged"}`))
		req.Header.Set("Authorization", "Bearer "+opsToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("deny through the API: %d", resp.StatusCode)
		}
		call.wait(t, p)
	})

	t.Run("a caller token is refused", func(t *testing.T) {
		// A fresh browser: no session.
		cctx := newBrowser(t)
		uiLogin(t, cctx, base, aliceToken)
		uiWaitFor(t, cctx, "the refusal", `document.body && document.body.innerText.indexOf("caller's token") >= 0`)
		uiDo(t, cctx, "open the journal", chromedp.Navigate(base+"/ui/journal"))
		uiWaitFor(t, cctx, "the login form", `location.pathname === '/ui/login'`)
		// As a bearer token on every request.
		if _, err := chromedp.Call(cctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(cctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": "Bearer " + aliceToken},
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := chromedp.RunResponse(cctx, chromedp.Navigate(base+"/ui/approvals"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusForbidden {
			t.Errorf("a caller's bearer token: %d, want 403", resp.Status)
		}
		// The same over plain HTTP, for the JSON endpoints too.
		for _, path := range []string{"/ui/approvals", "/ui/api/approvals", "/ui/api/journal"} {
			if code, _ := httpGet(t, base+path, aliceToken); code != http.StatusForbidden {
				t.Errorf("GET %s with alice's token: %d, want 403", path, code)
			}
		}
	})
}

// screenshotConfig is consoleConfig with a command-free set-up that
// returns approval_required at once, so that requests stay pending.
const screenshotConfig = `operators:
  - name: ops
    token: "ops-secret"
policy:
  - caller: alice
    allow: ["*"]
  - caller: bob
    allow: [read, ls, grep, glob]
budgets:
  - scope: caller
    quota: 100
    per: 24h
    cost: {default: 1, write: 5, bash: 10}
  - scope: session
    quota: 20
serve:
  tokens: {"alice-token": alice, "bob-token": bob}
  approval_wait: 0s
`

// TestConsoleScreenshots regenerates docs/console/*.png: one screenshot
// of each page, over a gateway with some history. It runs only from
// scripts/screenshots, which sets BACKPLANE_SCREENSHOTS to the folder.
func TestConsoleScreenshots(t *testing.T) {
	out := os.Getenv("BACKPLANE_SCREENSHOTS")
	if out == "" {
		t.Skip("BACKPLANE_SCREENSHOTS is not set: scripts/screenshots sets it to regenerate docs/console")
	}
	// With one upstream server, for the upstreams page.
	server := mcpTestServer(t)
	g := newGWDir(t, screenshotConfig+"servers:\n  - name: docs\n    command: ["+jsonString(server)+"]\n")
	files := map[string]string{
		"notes.txt":     "Backplane notes\n\n- approvals are decided by operators\n- the journal keeps every call\n",
		"src/main.go":   "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n",
		"docs/plan.txt": "1. ship the console\n2. write the docs\n",
	}
	for name, content := range files {
		path := filepath.Join(g.dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startServe(t, g)
	base := p.base

	// Some history, through the MCP server as the agents would make it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(token string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: tokenTransport(token)}}, sessionEra)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	alice, bob := connect(aliceToken), connect("bob-token")
	callTool := func(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	callTool(alice, "read", map[string]any{"path": "notes.txt"})
	callTool(bob, "ls", map[string]any{"path": "."})
	callTool(bob, "grep", map[string]any{"pattern": "console", "path": "."})
	callTool(alice, "read", map[string]any{"path": "missing.txt"}) // the tool reports an error
	// Refused: bob may not write, nor read past his budget of the session.
	if _, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"path": "x", "content": "y"}}); err == nil {
		t.Fatal("bob's write was not refused")
	}
	bob.CallTool(ctx, &mcp.CallToolParams{Name: "grep", Arguments: map[string]any{"pattern": 7, "path": "."}}) // invalid arguments: refused either way
	// A write approved from the console, then retried by the agent.
	writeArgs := map[string]any{"path": "docs/plan.txt", "content": "1. ship the console\n2. write the docs\n3. take screenshots\n"}
	callTool(alice, "write", writeArgs)
	pending := uiAPIGet(t, base, "/ui/api/approvals?status=pending")["approvals"].([]any)
	if len(pending) != 1 {
		t.Fatalf("pending: %v", pending)
	}
	decide := func(id string, approve bool, reason string) {
		req, _ := http.NewRequest("POST", base+"/ui/api/approvals/"+id+"/decide", strings.NewReader(uiJSON(map[string]any{"approve": approve, "reason": reason})))
		req.Header.Set("Authorization", "Bearer "+opsToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("decide %s: %d", id, resp.StatusCode)
		}
	}
	decide(pending[0].(map[string]any)["id"].(string), true, "planned work")
	callTool(alice, "write", writeArgs)
	callTool(alice, "bash", map[string]any{"command": "rm -rf build && make release"})
	denied := uiAPIGet(t, base, "/ui/api/approvals?status=pending")["approvals"].([]any)[0].(map[string]any)["id"].(string)
	decide(denied, false, "not on a Friday")
	// Left pending: an edit (with its diff) and a bash command.
	callTool(alice, "edit", map[string]any{"path": "src/main.go", "old_content": "\tprintln(\"hello\")\n", "content": "\tprintln(\"hello, operators\")\n\tprintln(\"bye\")\n"})
	callTool(alice, "bash", map[string]any{"command": "go test ./... && git push origin main"})
	var editID, readErrID string
	for _, v := range uiAPIGet(t, base, "/ui/api/approvals?status=pending")["approvals"].([]any) {
		if a := v.(map[string]any); a["tool"] == "edit" {
			editID = a["id"].(string)
		}
	}
	for _, v := range uiAPIGet(t, base, "/ui/api/journal?status=tool_error")["calls"].([]any) {
		readErrID = v.(map[string]any)["call_id"].(string)
	}
	if editID == "" || readErrID == "" {
		t.Fatalf("the history is not as planned: edit %q, read error %q", editID, readErrID)
	}

	bctx := newBrowser(t)
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(out, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s.png: %d bytes", name, len(png))
	}
	uiDo(t, bctx, "open the login form", chromedp.Navigate(base+"/ui/approvals"), chromedp.WaitVisible(chromedp.CSS("#token")))
	shoot("login")
	uiLogin(t, bctx, base, opsToken)
	waitHTTP(t, base+"/healthz", "", 200, `"docs":"up"`)
	uiDo(t, bctx, "open the overview", chromedp.Navigate(base+"/ui/overview?range=15m"), chromedp.WaitVisible(chromedp.CSS("#chart-calls")))
	shoot("overview")
	uiDo(t, bctx, "open the approvals", chromedp.Navigate(base+"/ui/approvals"))
	uiWaitFor(t, bctx, "the live approvals", `document.getElementById('live-status') && document.getElementById('live-status').textContent === 'live'`)
	shoot("approvals")
	for _, pg := range []struct{ name, path, ready string }{
		{"approval", "/ui/approvals/" + editID, "pre.diff"},
		{"journal", "/ui/journal", "table.journal"},
		{"call", "/ui/journal/" + readErrID, "pre.result"},
		{"budgets", "/ui/budgets", "table"},
		{"sessions", "/ui/sessions", "main"},
		{"upstreams", "/ui/upstreams", "table.upstreams"},
		{"tools", "/ui/tools", "table.tools"},
		{"health", "/ui/health", "table"},
	} {
		uiDo(t, bctx, "open "+pg.path, chromedp.Navigate(base+pg.path), chromedp.WaitVisible(chromedp.CSS(pg.ready)))
		shoot(pg.name)
	}
}
