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
	g := newGWDir(t, serveConfig+"  public_url: https://backplane.example\n")
	p := startServe(t, g)
	if !strings.Contains(p.log(), "console: https://backplane.example/ui") {
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
	for i := range 30 {
		if code, _ := status("POST", "/mcp", fmt.Sprintf("%03d-guess", i), initialize); code != http.StatusUnauthorized {
			t.Fatalf("/mcp guess %d: %d, want 401", i, code)
		}
		if code, _ := status("GET", "/ui/api/health", fmt.Sprintf("%03d-guess", i), ""); code != http.StatusUnauthorized {
			t.Fatalf("/ui/api guess %d: %d, want 401", i, code)
		}
		status("POST", "/ui/login", "", url.Values{"token": {fmt.Sprintf("%03d-guess", i)}}.Encode())
	}
	if code, _ := status("POST", "/mcp", "alice-token", initialize); code != http.StatusOK {
		t.Errorf("alice's token after a flood of guesses: %d, want 200", code)
	}
	code, resp := status("POST", "/ui/login", "", url.Values{"token": {"ops-token"}}.Encode())
	cks := resp.Cookies()
	if code != http.StatusSeeOther || len(cks) != 1 || !cks[0].Secure {
		t.Errorf("the operator's login after a flood of guesses: %d %+v, want 303 and a Secure cookie", code, cks)
	}
	// Guesses that start like alice's token block it on /mcp.
	for i := range 10 {
		status("POST", "/mcp", "alice-to"+fmt.Sprint(i), initialize)
	}
	if code, resp := status("POST", "/mcp", "alice-token", initialize); code != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a token whose start failed 10 times: %d, want 429 with Retry-After", code)
	}
	// And ops-token's start, at the console as bearer.
	for i := range 10 {
		status("GET", "/ui/api/health", "ops-toke"+fmt.Sprint(i), "")
	}
	if code, _ := status("GET", "/ui/api/health", "ops-token", ""); code != http.StatusTooManyRequests {
		t.Errorf("the operator's bearer after 10 failures with its start: %d, want 429", code)
	}
}
