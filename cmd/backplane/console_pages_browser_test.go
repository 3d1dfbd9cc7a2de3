package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// pagesConfig is a gateway with history to show on every page: alice may
// call everything (bash needs an approval, as by default), bob only ls;
// hang outlives its timeout (an uncertain call); up is the test MCP
// server, run only while a flag file exists.
func pagesConfig(t *testing.T) (g *gwDir, flag, pidLog string) {
	t.Helper()
	server := mcpTestServer(t)
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		t.Skip("/bin/sh is missing: the upstream's wrapper cannot run: " + err.Error())
	}
	dir := t.TempDir()
	flag, pidLog = filepath.Join(dir, "may-start"), filepath.Join(dir, "server.log")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	g = newGWDir(t, `operators:
  - name: ops
    token: "ops-secret"
policy:
  - caller: alice
    allow: ["*", "bash(ls *)"]
    approve: ["bash(git push *)"]
  - caller: bob
    allow: [ls]
budgets:
  - scope: caller
    quota: 100
builtin: {enable: [read, ls, grep, write, bash]}
tools:
  - name: hang
    description: Outlives its timeout, so that its outcome is unknown.
    input_schema: {type: object}
    command: [sleep, "30"]
    timeout: 1s
    safety: {read_only: true}
servers:
  - name: up
    command: [`+jsonString(sh)+`, "-c", "test -f \"$0\" || exit 1; exec \"$1\"", `+jsonString(flag)+`, `+jsonString(server)+`]
    env: [MCPTEST_LOG]
serve:
  tokens: {"alice-token": alice, "bob-token": bob}
  approval_wait: 0s
`)
	g.setEnv("MCPTEST_LOG", pidLog)
	return g, flag, pidLog
}

// mcpSession connects as token's caller.
func mcpSession(t *testing.T, base, token string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "pages-test", Version: "v0"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: tokenTransport(token)}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// chartTotal is what the overview's calls chart counts: the sum of its
// bars' counts (0 when it has none).
func chartTotal(t *testing.T, ctx context.Context) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(function(){ var s = 0;
		document.querySelectorAll('#chart-calls rect.bar').forEach(function (r) { s += parseInt(r.dataset.count, 10); });
		return s; })()`))
	if err != nil {
		t.Fatalf("counting the chart's bars: %v", err)
	}
	return n
}

// axeSource is axe-core's script, from testdata/axe (npm ci); "" when it
// is not installed.
func axeSource(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		return ""
	}
	return string(data)
}

// axeViolations runs axe-core in the open page for WCAG 2.0 and 2.1, A
// and AA, and returns each violation as "rule: help (targets)".
func axeViolations(t *testing.T, ctx context.Context, src string) []string {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](src+"\n;void 0")); err != nil {
		t.Fatalf("injecting axe-core: %v", err)
	}
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
		.then(function (r) { return JSON.stringify(r.violations.map(function (v) {
			return v.id + ': ' + v.help + ' (' + v.nodes.map(function (n) { return n.target.join(' '); }).slice(0, 5).join(', ') + ')'; })); })`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("running axe-core: %v", err)
	}
	var vs []string
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatalf("axe-core's answer %q: %v", out, err)
	}
	return vs
}

// TestConsolePagesInBrowser drives the pages of issue 26 in headless
// Chromium: the overview's charts count the calls made; a refused call is
// in the journal; an uncertain call is resolved from its page; an
// approval card shows the parsed parts of a shell command with their
// decisions; a killed upstream is down on the upstreams page within
// seconds and up once back; and axe-core finds no WCAG A or AA violation
// on any page.
func TestConsolePagesInBrowser(t *testing.T) {
	chromiumPath(t)
	g, flag, pidLog := pagesConfig(t)
	if err := os.WriteFile(filepath.Join(g.dir, "notes.txt"), []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, g)
	base := p.base
	waitHTTP(t, base+"/healthz", "", 200, `"up":"up"`)
	ctx := newBrowser(t)
	uiLogin(t, ctx, base, opsToken)
	uiWaitFor(t, ctx, "the approvals page", `location.pathname === '/ui/approvals'`)
	uiDo(t, ctx, "open the console's first page", chromedp.Navigate(base+"/ui/"))
	uiWaitFor(t, ctx, "the overview, the first page", `location.pathname === '/ui/overview'`)
	alice, bob := mcpSession(t, base, aliceToken), mcpSession(t, base, "bob-token")

	t.Run("the overview's charts count the calls", func(t *testing.T) {
		uiDo(t, ctx, "open the overview", chromedp.Navigate(base+"/ui/overview?range=15m"))
		before := chartTotal(t, ctx)
		mcpCall(t, alice, "read", map[string]any{"path": "notes.txt"})
		mcpCall(t, alice, "ls", map[string]any{"path": "."})
		// Refused: bob may not read (an unknown tool to him: a protocol error).
		if _, err := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "notes.txt"}}); err == nil {
			t.Error("bob's read was not refused")
		}
		uiDo(t, ctx, "reload the overview", chromedp.Navigate(base+"/ui/overview?range=15m"))
		if after := chartTotal(t, ctx); after != before+3 {
			t.Errorf("the calls chart counts %d calls after 3 more, before %d", after, before)
		}
		refused, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#chart-refused rect.bar').length`))
		if err != nil || refused == 0 {
			t.Errorf("the refused chart has %d bars (%v)", refused, err)
		}
	})

	t.Run("a refused call is in the journal", func(t *testing.T) {
		uiDo(t, ctx, "open the journal", chromedp.Navigate(base+"/ui/journal?status=refused&tool=re*"))
		uiWaitFor(t, ctx, "bob's refused read", `Array.from(document.querySelectorAll('table.journal tr.refused')).some(function (tr) {
			return /bob/.test(tr.textContent) && /read/.test(tr.textContent) && /not_found/.test(tr.textContent); })`)
		title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('table.journal time').title`))
		if err != nil || !strings.HasSuffix(title, " UTC") {
			t.Errorf("a relative time's title is %q (%v), want the absolute time", title, err)
		}
	})

	t.Run("an uncertain call resolved from the console", func(t *testing.T) {
		res := mcpCall(t, alice, "hang", map[string]any{})
		if !res.IsError {
			t.Fatalf("hang did not fail: %+v", res)
		}
		calls := uiAPIGet(t, base, "/ui/api/journal?status=uncertain&tool=hang")["calls"].([]any)
		if len(calls) != 1 {
			t.Fatalf("uncertain hang calls: %v\n%s", calls, p.log())
		}
		id := calls[0].(map[string]any)["call_id"].(string)
		uiDo(t, ctx, "open the call and resolve it",
			chromedp.Navigate(base+"/ui/journal/"+id),
			chromedp.WaitVisible(chromedp.CSS("#resolve-reason")),
			chromedp.SendKeys(chromedp.CSS("#resolve-reason"), "sleep never wrote anything"),
			chromedp.Click(chromedp.CSS(`form.resolve button[value=not_executed]`)),
		)
		uiWaitFor(t, ctx, "the resolved call", `document.querySelector('.badge.status-not_executed') !== null`)
		c := uiAPIGet(t, base, "/ui/api/journal/"+id)
		if c["status"] != "not_executed" || c["resolved_by"] != "ops" {
			t.Errorf("the call after its resolution: %v", c)
		}
	})

	t.Run("an approval card shows the shell command's parts", func(t *testing.T) {
		mcpCall(t, alice, "bash", map[string]any{"command": "ls -la && git push origin main"})
		uiDo(t, ctx, "open the approvals", chromedp.Navigate(base+"/ui/approvals"))
		uiWaitFor(t, ctx, "the card's parts", `document.querySelectorAll('#pending article.approval table.parts tbody tr').length === 2`)
		parts := uiText(t, ctx, "#pending article.approval table.parts")
		for _, want := range []string{"ls -la", "git push origin main", "Rule"} {
			if !strings.Contains(parts, want) {
				t.Errorf("the parts table lacks %q:\n%s", want, parts)
			}
		}
		why := strings.ToLower(uiText(t, ctx, "#pending article.approval .why")) // headings are shown in capitals
		// The sandbox line says "network none" where the kernel sandboxes
		// bash, "Not sandboxed" where it cannot: either way it is said.
		for _, want := range []string{"why it asks", "approve", "where it runs", "who may decide", "ops"} {
			if !strings.Contains(why, want) {
				t.Errorf("the card's why lacks %q:\n%s", want, why)
			}
		}
	})

	t.Run("a killed upstream is down, then up", func(t *testing.T) {
		uiDo(t, ctx, "open the upstreams", chromedp.Navigate(base+"/ui/upstreams"))
		uiWaitFor(t, ctx, "up is up", `document.querySelector('#upstream-up') && document.querySelector('#upstream-up').dataset.state === 'up'`)
		// The test server declares tools the subset refuses (issue 25): the
		// page names them, their keywords and the line that accepts them.
		refused := uiText(t, ctx, "#upstream-up .refused")
		for _, want := range []string{"refused by validator subset", "up.remote_ref", "$ref", "backplane.yaml:", "validator: draft2020-12"} {
			if !strings.Contains(refused, want) {
				t.Errorf("the upstreams page's refused report lacks %q:\n%s", want, refused)
			}
		}
		if err := os.Remove(flag); err != nil {
			t.Fatal(err)
		}
		killUpstream(t, pidLog)
		// The page reads itself again every few seconds: no reload.
		uiWaitFor(t, ctx, "up is down, restarting", `document.querySelector('#upstream-up').dataset.state === 'down' && document.querySelector('#upstream-up').dataset.phase === 'restarting'`)
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		uiWaitFor(t, ctx, "up is back", `document.querySelector('#upstream-up').dataset.state === 'up' && document.querySelector('#upstream-up').dataset.phase === 'up'`)
		// The revision the connection speaks: the Go SDK test server
		// offers 2026-07-28.
		if row := uiText(t, ctx, "#upstream-up"); !strings.Contains(row, "2026-07-28") {
			t.Errorf("the upstream's row does not name the MCP revision it speaks:\n%s", row)
		}
	})

	t.Run("no accessibility violation on any page", func(t *testing.T) {
		src := axeSource(t)
		if src == "" {
			t.Skip("axe-core is not installed (npm ci in testdata/axe; scripts/test runs it)")
		}
		// First, a page with known violations (no lang, an image without
		// alt text, an unlabelled field): the check must see them.
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<!doctype html><html><head><title>bad</title></head><body><main><img src="x.png"><input type="text"></main></body></html>`)
		}))
		defer bad.Close()
		uiDo(t, ctx, "open a page with violations", chromedp.Navigate(bad.URL), chromedp.WaitReady(chromedp.CSS("main")))
		if vs := axeViolations(t, ctx, src); len(vs) < 3 {
			t.Fatalf("axe-core found %d violations on a page with 3: %v", len(vs), vs)
		}
		// Every page with something on it: a call, a pending request.
		mcpCall(t, alice, "read", map[string]any{"path": "notes.txt"})
		mcpCall(t, alice, "bash", map[string]any{"command": "git push origin a11y"})
		var pending string
		for _, v := range uiAPIGet(t, base, "/ui/api/approvals?status=pending")["approvals"].([]any) {
			pending = v.(map[string]any)["id"].(string)
		}
		call := uiAPIGet(t, base, "/ui/api/journal?tool=read")["calls"].([]any)[0].(map[string]any)["call_id"].(string)
		for _, path := range []string{"/ui/overview", "/ui/approvals", "/ui/approvals/" + pending, "/ui/journal",
			"/ui/journal/" + call, "/ui/budgets", "/ui/sessions", "/ui/upstreams", "/ui/tools", "/ui/health"} {
			uiDo(t, ctx, "open "+path, chromedp.Navigate(base+path), chromedp.WaitReady(chromedp.CSS("main")))
			if vs := axeViolations(t, ctx, src); len(vs) > 0 {
				t.Errorf("%s: %d accessibility violation(s):\n  %s", path, len(vs), strings.Join(vs, "\n  "))
			}
		}
		// The login form, logged out.
		lctx := newBrowser(t)
		uiDo(t, lctx, "open the login form", chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible(chromedp.CSS("#token")))
		if vs := axeViolations(t, lctx, src); len(vs) > 0 {
			t.Errorf("/ui/login: %d accessibility violation(s):\n  %s", len(vs), strings.Join(vs, "\n  "))
		}
	})
}
