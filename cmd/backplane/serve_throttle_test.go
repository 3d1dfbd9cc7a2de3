package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Through the built serve (issue 22, finding 13): wrong bearer tokens on
// /mcp and /ui/api are throttled by what they start with, so a flood of
// guesses from the operator's own address locks out neither the operator's
// login nor a caller's token, while guesses that start like a token block
// it (429); and with serve.public_url https the login cookie is Secure
// though serve itself speaks plain HTTP (a TLS proxy in front).
func TestServeThrottlesWrongTokens(t *testing.T) {
	// Tokens as backplane init makes them: a public start, then random.
	const (
		opTok    = "bp_operator_QZ4TJ7KXM2HRW5NCPB6VLEYAD3"
		aliceTok = "bp_caller_8GF2KD7QXW4MZT5JRN6PHVBC3A"
	)
	g := newGWDir(t, `operators:
  - {name: ops, token: `+opTok+`}
policy:
  - caller: alice
    allow: ["*"]
serve:
  tokens: {"`+aliceTok+`": alice}
  public_url: https://backplane.example
`)
	p := startServe(t, g)
	if !strings.Contains(p.log(), "console: https://backplane.example/ui") || !strings.Contains(p.log(), "listening on "+p.base) {
		t.Errorf("serve does not print the console under public_url:\n%s", p.log())
	}
	status := func(method, path, token, body string) (int, *http.Response) {
		t.Helper()
		req, _ := http.NewRequest(method, p.base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if method == http.MethodPost && path == "/mcp" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		if path == "/ui/login" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp
	}
	const initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	// A flood of guesses, sharing the tokens' public starts.
	for i := range 30 {
		if code, _ := status("POST", "/mcp", fmt.Sprintf("bp_caller_%03d%023d", i, 0), initialize); code != http.StatusUnauthorized {
			t.Fatalf("/mcp guess %d: %d, want 401", i, code)
		}
		if code, _ := status("GET", "/ui/api/health", fmt.Sprintf("bp_operator_%03d%023d", i, 0), ""); code != http.StatusUnauthorized {
			t.Fatalf("/ui/api guess %d: %d, want 401", i, code)
		}
		status("POST", "/ui/login", "", url.Values{"token": {fmt.Sprintf("bp_operator_%03d%023d", i, 0)}}.Encode())
	}
	if code, _ := status("POST", "/mcp", aliceTok, initialize); code != http.StatusOK {
		t.Errorf("alice's token after a flood of guesses: %d, want 200", code)
	}
	code, resp := status("POST", "/ui/login", "", url.Values{"token": {opTok}}.Encode())
	cks := resp.Cookies()
	if code != http.StatusSeeOther || len(cks) != 1 || !cks[0].Secure {
		t.Errorf("the operator's login after a flood of guesses: %d %+v, want 303 and a Secure cookie", code, cks)
	}
	// Guesses that share the first half of alice's token (someone knows
	// it) block it on /mcp.
	alike := func(tok string, i int) string { return tok[:len(tok)-2] + fmt.Sprintf("%02d", i) }
	for i := range 10 {
		status("POST", "/mcp", alike(aliceTok, i), initialize)
	}
	if code, resp := status("POST", "/mcp", aliceTok, initialize); code != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a token whose first half failed 10 times: %d, want 429 with Retry-After", code)
	}
	// And the operator's, at the console as bearer.
	for i := range 10 {
		status("GET", "/ui/api/health", alike(opTok, i), "")
	}
	if code, _ := status("GET", "/ui/api/health", opTok, ""); code != http.StatusTooManyRequests {
		t.Errorf("the operator's bearer after 10 failures with its first half: %d, want 429", code)
	}
}
