package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/server"
	"github.com/agentbackplane/backplane/store"
)

func hookPost(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHookEndpoint(t *testing.T) {
	f := newFixture(t)
	ws := t.TempDir()
	opts := &server.Options{Tokens: map[string]string{"tok-bob": "bob", "tok-alice": "alice"}}
	if code, _ := hookPost(t, httpServer(t, server.New(f.g, opts)).URL+"/hooks/claude-code", "tok-bob", "{}"); code != http.StatusNotFound {
		t.Errorf("without Options.Hooks: %d, want 404", code)
	}
	opts.Hooks = &server.HookOptions{Workspace: ws, MCPTool: func(s, tool string) (string, bool) { return tool, s == "demo" }}
	base := httpServer(t, server.New(f.g, opts)).URL
	input := func(tool, args string) string {
		return `{"session_id":"s1","cwd":"` + ws + `","hook_event_name":"PreToolUse","tool_name":"` + tool + `","tool_input":` + args + `}`
	}
	decision := func(body string) (d, reason string) {
		var o struct {
			H map[string]string `json:"hookSpecificOutput"`
		}
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			t.Fatalf("answer %q: %v", body, err)
		}
		return o.H["permissionDecision"], o.H["permissionDecisionReason"]
	}

	code, body := hookPost(t, base+"/hooks/claude-code", "tok-bob", input("mcp__demo__echo", `{"text":"hi"}`))
	if d, _ := decision(body); code != http.StatusOK || d != "allow" {
		t.Fatalf("bob's echo: %d %s, want 200 allow", code, body)
	}
	if n := f.echoes.Load(); n != 0 {
		t.Errorf("the endpoint ran the tool %d times", n)
	}
	in, err := f.st.ListIntents(context.Background(), store.IntentFilter{Caller: "bob"})
	if err != nil || len(in) != 1 || in[0].ErrorClass != gateway.DecisionOnly || in[0].Session != "s1" {
		t.Errorf("journal %+v, %v; want one decision-only entry of session s1", in, err)
	}
	// The caller is the token's: bob may not call danger (unknown to him).
	code, body = hookPost(t, base+"/hooks/claude-code", "tok-bob", input("mcp__demo__danger", `{"target":"x"}`))
	if d, _ := decision(body); code != http.StatusOK || d != "deny" {
		t.Errorf("bob's danger: %d %s, want deny", code, body)
	}
	code, body = hookPost(t, base+"/hooks/codex?pending=ask", "tok-alice", input("mcp__demo__danger", `{"target":"x"}`))
	if d, reason := decision(body); code != http.StatusOK || d != "deny" || !strings.Contains(reason, "apr_") {
		t.Errorf("alice's danger for codex: %d %s, want deny naming the request", code, body)
	}

	for name, tc := range map[string]struct {
		method, path, token, body string
		want                      int
	}{
		"no token":      {http.MethodPost, "/hooks/claude-code", "", input("Bash", `{"command":"ls"}`), http.StatusUnauthorized},
		"GET":           {http.MethodGet, "/hooks/claude-code", "tok-bob", "", http.StatusMethodNotAllowed},
		"unknown agent": {http.MethodPost, "/hooks/vim", "tok-bob", input("Bash", `{"command":"ls"}`), http.StatusNotFound},
		"bad input":     {http.MethodPost, "/hooks/claude-code", "tok-bob", "{", http.StatusBadRequest},
		"bad wait":      {http.MethodPost, "/hooks/claude-code?wait=soon", "tok-bob", input("Bash", `{"command":"ls"}`), http.StatusBadRequest},
		"web page":      {http.MethodPost, "/hooks/claude-code", "tok-bob", input("mcp__demo__echo", `{"text":"hi"}`), http.StatusForbidden},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if name == "web page" {
			req.Header.Set("Origin", "https://evil.example")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", name, resp.StatusCode, tc.want)
		}
	}
}
