package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/hook"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/spf13/cobra"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// watchdogSlack is how long past --timeout and --wait the hook lets its
// own deadlines act before it exits blocking.
const watchdogSlack = 3 * time.Second

// callerTokenEnv holds a caller's bearer token: the hook's caller is its
// owner in serve.tokens.
const callerTokenEnv = "BACKPLANE_TOKEN"

// hookBlocked is returned once the hook has said on stderr why it
// blocks: exit 2 (run prints nothing more for it).
type hookBlocked struct{ err error }

func (e *hookBlocked) Error() string { return e.err.Error() }
func (e *hookBlocked) Unwrap() error { return e.err }

func newHookCmd() *cobra.Command {
	var (
		f         gatewayFlags
		caller    string
		tokenFile string
		pending   string
		gwURL     string
		wait      time.Duration
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "hook AGENT",
		Short: "Decide a coding agent's tool use from its PreToolUse hook (claude-code, codex, gemini, cursor)",
		Long: `Hook is a coding agent's PreToolUse command hook: it reads the agent's hook
input (JSON) on stdin, maps the tool use onto the policy's tools (Bash to
bash, Write to write, Edit and MultiEdit to edit, Read to read, Codex's
apply_patch to edit on every file it touches, mcp__SERVER__TOOL to that
server's tool behind Backplane; docs/agents.md has the table), decides it
through the gateway's pipeline without running anything, and prints the
agent's answer. AGENT is claude-code, codex, gemini (Gemini CLI's
BeforeTool hook) or cursor (Cursor's beforeShellExecution, beforeReadFile
and beforeMCPExecution hooks).

It decides from the configuration (--config, as every verb) and its store,
or with --url asks the running gateway (POST /hooks/AGENT on serve, with the
caller's token from $` + callerTokenEnv + ` or --token-file); either way
each allowed tool use is a decision-only journal entry, with its budget
reserved and its audit event. A tool use that needs an approval creates
the request (backplane approvals list, the console) and waits --wait for an
operator (default 0: not at all); while it is pending the answer is deny,
naming the request, or for Claude Code --pending ask (Claude Code's own
prompt decides) or defer (a -p run stops, resumable). The same tool use
after the approval is allowed once.

The caller is --caller, or the owner of the token in $` + callerTokenEnv + ` (or
--token-file) in serve.tokens.

It fails closed: any error (bad input, a configuration or store that cannot
be opened, a gateway that cannot be reached or answers an error, a timeout,
a stdin never closed) blocks the tool with exit 2 and the reason on stderr,
since both agents run the tool when a hook fails otherwise. A decision,
allow or deny, exits 0 with the agent's JSON on stdout (nothing for a Codex
allow).

"backplane hook install AGENT" adds this hook to the agent's settings.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// An agent runs the tool when its hook outlives the agent's own
			// timeout, so a hook that cannot answer in time (a stdin never
			// closed, a store that does not answer) blocks first, whatever
			// it is stuck in.
			stderr := cmd.ErrOrStderr()
			limit := timeout + min(max(wait, 0), gateway.MaxApprovalWait) + watchdogSlack
			watchdog := time.AfterFunc(limit, func() {
				fmt.Fprintf(stderr, "backplane hook: blocked: no decision within %v\n", limit)
				os.Exit(exitUsage)
			})
			defer watchdog.Stop()
			err := runHook(cmd, &f, args[0], caller, tokenFile, pending, gwURL, wait, timeout)
			if err != nil {
				// The agent shows stderr to the model or the user: one line,
				// control characters escaped.
				fmt.Fprintf(cmd.ErrOrStderr(), "backplane hook: blocked: %s\n", escapeControl(err.Error()))
				return &hookBlocked{err}
			}
			return nil
		},
	}
	cmd.AddCommand(newHookInstallCmd())
	addGatewayFlags(cmd, &f)
	fl := cmd.Flags()
	fl.StringVar(&caller, "caller", "", "who calls (the policy's caller name); default: the owner of $"+callerTokenEnv)
	fl.StringVar(&tokenFile, "token-file", "", "a file holding the caller's token (instead of $"+callerTokenEnv+")")
	fl.StringVar(&gwURL, "url", "", "ask the running gateway at this URL (serve's, e.g. http://127.0.0.1:8787) instead of deciding from the configuration")
	fl.StringVar(&pending, "pending", "deny", "Claude Code's answer while an approval is pending: deny, ask or defer")
	fl.DurationVar(&wait, "wait", 0, "how long to wait for an operator's approval (at most 50s)")
	fl.DurationVar(&timeout, "timeout", 20*time.Second, "how long reading the input and deciding may take, beside --wait, before the hook blocks (set the agent's hook timeout above both)")
	return cmd
}

func runHook(cmd *cobra.Command, f *gatewayFlags, agentName, caller, tokenFile, pendingName, gwURL string, wait, timeout time.Duration) error {
	agent, err := hook.ParseAgent(agentName)
	if err != nil {
		return err
	}
	pending, err := hook.ParsePending(pendingName)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), hook.MaxInput+1))
	if err != nil {
		return fmt.Errorf("reading the hook input: %w", err)
	}
	if len(data) > hook.MaxInput {
		return fmt.Errorf("%w: the hook input is over %d bytes", hook.ErrBadInput, hook.MaxInput)
	}
	// The MCP servers are started only for a tool use that names one of
	// theirs: a hook runs for every Bash and Edit of the agent.
	in, err := hook.Parse(agent, data)
	if err != nil {
		return err
	}
	f.storeOnly = !in.NamesMCPTool()

	ctx, cancel := context.WithTimeout(cmd.Context(), timeout+wait)
	defer cancel()
	if gwURL != "" {
		if caller != "" {
			return errors.New("--caller cannot be used with --url: the token names the caller")
		}
		out, err := askGateway(ctx, gwURL, agent, tokenFile, pending, wait, data)
		if err != nil {
			return err
		}
		_, err = cmd.OutOrStdout().Write(out)
		return err
	}
	s, err := f.open(ctx, cmd)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := s.rt.Config
	if caller == "" {
		if caller, err = callerFromToken(cfg, tokenFile); err != nil {
			return err
		}
	}
	opts := &hook.Options{Caller: caller, Wait: wait, MapOptions: hook.MapOptions{
		Workspace: cfg.Workspace,
		MCPTool:   cfg.MCPToolOf,
		MCPServer: cfg.MCPServerOf,
	}}
	v, err := hook.Evaluate(ctx, agent, data, s.rt.Gateway, opts)
	if err != nil {
		return err
	}
	out, err := hook.Output(agent, v, pending)
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(out)
	return err
}

// callerFromToken is the owner, in serve.tokens, of the token in
// tokenFile or else $BACKPLANE_TOKEN.
func callerFromToken(cfg *config.Config, tokenFile string) (string, error) {
	tok, err := readToken(tokenFile)
	if err != nil {
		return "", err
	}
	name, ok := cfg.Serve.Tokens[tok]
	if !ok {
		return "", fmt.Errorf("the caller's token is not in serve.tokens of %s", cfg.Path)
	}
	return name, nil
}

// readToken is the caller's token: the content of tokenFile, else
// $BACKPLANE_TOKEN.
func readToken(tokenFile string) (string, error) {
	tok := os.Getenv(callerTokenEnv)
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		tok = string(bytes.TrimSpace(b))
	}
	if tok == "" {
		return "", errors.New("no caller: pass --caller NAME, or a caller's token in $" + callerTokenEnv + " or --token-file")
	}
	return tok, nil
}

// maxGatewayAnswer bounds what is read of the gateway's answer.
const maxGatewayAnswer = 1 << 20

// askGateway posts the hook input to the running gateway's hook endpoint
// and returns what to print. Anything but a 200 with an answer the agent
// can read is an error: the hook then blocks.
func askGateway(ctx context.Context, base string, agent hook.Agent, tokenFile string, pending hook.Pending, wait time.Duration, data []byte) ([]byte, error) {
	tok, err := readToken(tokenFile)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: want the gateway's http(s) URL, such as http://127.0.0.1:8787", base)
	}
	if !strings.HasSuffix(u.Path, "/hooks/"+string(agent)) {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/hooks/" + string(agent)
	}
	q := url.Values{"pending": {string(pending)}}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the gateway at %s cannot be reached: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxGatewayAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("reading the gateway's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the gateway answered %s: %s", resp.Status, strings.TrimSpace(string(body[:min(len(body), 2000)])))
	}
	if len(body) > maxGatewayAnswer {
		return nil, errors.New("the gateway's answer is too long")
	}
	// Print only an answer the agent will read as one: a decision.
	if len(bytes.TrimSpace(body)) == 0 && agent == hook.Codex {
		return nil, nil // a Codex allow
	}
	var o struct {
		H *struct {
			Decision string `json:"permissionDecision"`
		} `json:"hookSpecificOutput"`
		Decision   string `json:"decision"`   // Gemini CLI's
		Permission string `json:"permission"` // Cursor's
	}
	if json.Unmarshal(body, &o) != nil {
		return nil, errors.New("the gateway's answer is not a hook decision")
	}
	decision := ""
	switch agent {
	case hook.Gemini:
		decision = o.Decision
	case hook.Cursor:
		decision = o.Permission
	default:
		if o.H != nil {
			decision = o.H.Decision
		}
	}
	if decision == "" {
		return nil, errors.New("the gateway's answer is not a hook decision")
	}
	return body, nil
}

// escapeControl is s as one line of plain text (termtext.Line): the
// agent shows the hook's stderr to the model or its user, and what a
// hook prints quotes commands and paths the model chose.
func escapeControl(s string) string { return termtext.Line(s) }
