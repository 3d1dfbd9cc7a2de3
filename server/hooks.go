package server

// POST /hooks/AGENT: a coding agent's PreToolUse hook decided by the
// running gateway (package hook), for `backplane hook AGENT --url` and for
// agents whose hooks can post to a URL themselves (Claude Code's http hook
// type, which runs the tool when the request fails: see docs/agents.md).

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/hook"
	"io"
	"net/http"
	"strings"
	"time"
)

// PathHooks is the prefix of the hook endpoints: PathHooks + AGENT.
const PathHooks = "/hooks/"

// HookOptions enable the hook endpoints (Options.Hooks).
type HookOptions struct {
	// Workspace and MCPTool are as in hook.MapOptions.
	Workspace string
	MCPTool   func(server, tool string) (string, bool)
	// MCPServer is as in hook.MapOptions (Cursor's MCP tool uses).
	MCPServer func(url, command string) (string, bool)
	// Timeout bounds one decision beside its approval wait. Default 20s.
	Timeout time.Duration
}

// serveHooks mounts the hook endpoints when Options.Hooks is set. The
// caller is the bearer token's, as for /mcp, and so is the Origin check: a
// web page must not make decisions (create approvals, consume them) as the
// anonymous loopback caller. An approval wait (?wait=) has no write
// deadline to outlast.
func (s *Server) serveHooks(mux *http.ServeMux) {
	if s.opts.Hooks == nil {
		return
	}
	mux.Handle(PathHooks, s.streamDeadlines(s.checkOrigin(s.requireToken(s.rateLimitHTTP(http.HandlerFunc(s.hookDecide)))), true))
}

// hookDecide answers POST /hooks/AGENT?wait=DURATION&pending=deny|ask|defer
// with exactly what the hook command prints on stdout (200; an empty body
// for a Codex allow), or a plain-text error with status 400 (bad input),
// 404 (unknown agent), 405 or 503 (the decision failed): a client must
// block on anything but 200.
func (s *Server) hookDecide(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST the agent's hook input", http.StatusMethodNotAllowed)
		return
	}
	agent, err := hook.ParseAgent(strings.TrimPrefix(r.URL.Path, PathHooks))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	id, _ := identFrom(r.Context())
	q := r.URL.Query()
	pending, err := hook.ParsePending(q.Get("pending"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 {
			http.Error(w, fmt.Sprintf("wait %q: want a duration such as 10s", v), http.StatusBadRequest)
			return
		}
		wait = min(wait, gateway.MaxApprovalWait)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, hook.MaxInput+1))
	if err != nil || len(data) > hook.MaxInput {
		http.Error(w, fmt.Sprintf("the hook input cannot be read or is over %d bytes", hook.MaxInput), http.StatusBadRequest)
		return
	}
	ho := s.opts.Hooks
	timeout := ho.Timeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout+wait)
	defer cancel()
	v, err := hook.Evaluate(ctx, agent, data, s.g, &hook.Options{
		Caller: id.caller, Wait: wait,
		MapOptions: hook.MapOptions{Workspace: ho.Workspace, MCPTool: ho.MCPTool, MCPServer: ho.MCPServer},
	})
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, hook.ErrDecide) {
			status = http.StatusServiceUnavailable
		}
		http.Error(w, v.Reason, status)
		return
	}
	out, err := hook.Output(agent, v, pending)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}
