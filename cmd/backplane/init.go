package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"github.com/agentbackplane/backplane/config"
	"github.com/spf13/cobra"
)

// initTemplate is the starter configuration: loopback only, default deny,
// the read-only built-in tools allowed, writes and the shell behind an
// operator's approval, the state beside the file and outside the workspace.
var initTemplate = template.Must(template.New("init").Parse(`# Backplane configuration, written by "backplane init".
# Every key is described in the README ("Command line" and the keys block).
# This file holds secrets (the tokens below): keep it private (mode 0600).

# The built-in tools (read, write, edit, ls, glob, grep, bash, url_fetch,
# ask_user_question) are confined to this folder.
workspace: {{.Workspace}}

# Journal, approvals and budgets (SQLite), beside this file: outside the
# workspace, so that no tool can reach or plant them.
store: {{.Store}}

serve:
  http: 127.0.0.1:8787               # loopback only; MCP at http://127.0.0.1:8787/mcp
  tokens: {"{{.CallerToken}}": {{.Caller}}}   # bearer token -> caller
  stdio_caller: {{.Caller}}          # the caller of "backplane serve --stdio"

# Operators decide approvals, resolve uncertain calls, accept changed tool
# definitions, read /metrics and use the console (/ui). Separate from callers.
operators:
  - name: {{.Operator}}
    token: "{{.OperatorToken}}"      # or token_env: NAME, or token_file: PATH

# Default deny: a caller may call only what is listed. Writes and the shell
# need an operator's approval first.
policy:
  - caller: {{.Caller}}
    allow: [read, ls, glob, grep, ask_user_question, write, edit, bash]
    approve: [write, edit, bash]
    approvers: [{{.Operator}}]

approvals:
  expire: 10m                        # an undecided request closes after this

budgets:
  - scope: caller
    quota: 1000                      # per caller and day; a bash call costs 5
    per: 24h                         # fixed windows; without per: never resets
    cost: {default: 1, bash: 5}

# MCP servers Backplane is a client of (their tools are NAME.TOOL; allow
# them in the policy above). Uncomment to use, or let
# "backplane servers add NAME -- COMMAND ARGS..." write the entry.
# validator: draft2020-12 checks a server's input and output schemas with
# JSON Schema 2020-12 in full, as real servers write them ($schema, enum,
# format, ...); without it, the default (subset) accepts only Backplane's
# small subset and refuses every call of a tool whose schema goes beyond
# it ("backplane tools list" names them). Either way nothing is ignored:
# what the validator cannot check is refused.
# servers:
#   - name: files
#     command: [npx, -y, "@modelcontextprotocol/server-filesystem", {{.Workspace}}]
#     validator: draft2020-12
#   - name: memory
#     command: [npx, -y, "@modelcontextprotocol/server-memory"]
#     validator: draft2020-12
`))

// initNames are the names a starter configuration uses: plain words, so
// that they need no quoting in YAML.
var initName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

func newInitCmd() *cobra.Command {
	var dir, workspace, caller, operator string
	cmd := &cobra.Command{
		Use:   "init [--dir DIR] [--workspace DIR]",
		Short: "Write a starter configuration (safe defaults, fresh tokens)",
		Long: `Init writes DIR/backplane.yaml, a commented starter configuration that
"backplane serve" accepts as it is: the built-in tools confined to the
workspace (default: the current folder), the state beside the file and
outside the workspace, a generated caller token and operator token, loopback
only, default deny, and approval for write, edit and bash. DIR defaults to
the user's configuration folder ($XDG_CONFIG_HOME/backplane, else
~/.config/backplane), where every verb finds the file without --config.

Init never overwrites a file, and refuses a DIR inside the workspace (the
tools could rewrite the configuration there).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runInit(cmd, dir, workspace, caller, operator)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "dir", "", "the folder to write backplane.yaml in (default: the user's configuration folder)")
	fl.StringVar(&workspace, "workspace", "", "the folder the built-in tools are confined to (default: the current folder)")
	fl.StringVar(&caller, "caller", "agent", "the name of the caller the token belongs to")
	fl.StringVar(&operator, "operator", "", "the operator's name (default: your login name)")
	return cmd
}

func runInit(cmd *cobra.Command, dir, workspace, caller, operator string) error {
	if dir == "" {
		uf := config.UserFile()
		if uf == "" {
			return errors.New("no home folder or XDG_CONFIG_HOME to put the configuration in: name one with --dir")
		}
		dir = filepath.Dir(uf)
	}
	if workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return inputErrorf("the current folder: %v", err)
		}
		workspace = wd
	}
	if operator == "" {
		operator = "operator"
		if u, err := user.Current(); err == nil && initName.MatchString(u.Username) {
			operator = u.Username
		}
	}
	for _, n := range []struct{ flag, v string }{{"--caller", caller}, {"--operator", operator}} {
		if !initName.MatchString(n.v) {
			return fmt.Errorf("%s %q: use a plain name (a letter, then letters, digits, '_', '.', '-')", n.flag, n.v)
		}
	}
	if caller == operator {
		return fmt.Errorf("--caller and --operator are both %q: a caller must not decide its own approvals", caller)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return inputErrorf("--dir: %v", err)
	}
	workspace, err = filepath.Abs(workspace)
	if err != nil {
		return inputErrorf("--workspace: %v", err)
	}
	if fi, err := os.Stat(workspace); err != nil || !fi.IsDir() {
		return inputErrorf("the workspace %s is not a folder", workspace)
	}
	if insideDir(resolved(dir), resolved(workspace)) {
		return inputErrorf("%s lies inside the workspace %s, where the tools can write: choose a --dir outside it (the default is the user's configuration folder) or a narrower --workspace", dir, workspace)
	}
	file := filepath.Join(dir, config.DefaultFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return inputErrorf("creating %s: %v", dir, err)
	}
	var b strings.Builder
	if err := initTemplate.Execute(&b, map[string]string{
		"Workspace":     yamlQuote(workspace),
		"Store":         yamlQuote(filepath.Join(dir, "state")),
		"Caller":        caller,
		"Operator":      operator,
		"CallerToken":   "bp_caller_" + rand.Text(),
		"OperatorToken": "bp_operator_" + rand.Text(),
	}); err != nil {
		return err
	}
	// O_EXCL: never overwrite, even a file created a moment ago.
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return inputErrorf("%s exists already: init never overwrites a configuration (edit it, or choose another --dir)", file)
	}
	if err != nil {
		return inputErrorf("writing %s: %v", file, err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return inputErrorf("writing %s: %v", file, err)
	}
	if err := f.Close(); err != nil {
		return inputErrorf("writing %s: %v", file, err)
	}
	// The file must load as written: a starter that serve refuses is a bug.
	if _, err := config.Load(file); err != nil {
		return fmt.Errorf("the configuration written does not load (a bug in init): %w", err)
	}

	flag := ""
	if uf := config.UserFile(); uf == "" || resolved(uf) != resolved(file) {
		flag = " --config " + file
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Wrote %s (mode 0600: it holds the tokens).\n\n", file)
	fmt.Fprintf(out, "Next:\n")
	next := [][2]string{
		{"backplane serve" + flag, "MCP at http://127.0.0.1:8787/mcp, console at /ui"},
		{"backplane call" + flag + " --caller " + caller + " ls", "one call through the pipeline"},
		{"backplane approvals list" + flag, "what waits for " + operator + "'s decision"},
	}
	width := 0
	for _, n := range next {
		width = max(width, len(n[0]))
	}
	for _, n := range next {
		fmt.Fprintf(out, "  %-*s  # %s\n", width, n[0], n[1])
	}
	fmt.Fprintf(out, "\nDecide approvals as %s with the operator token (under operators in %s):\n", operator, file)
	fmt.Fprintf(out, "  export BACKPLANE_OPERATOR_TOKEN=<that token>   # or --operator-token-file FILE\n")
	fmt.Fprintf(out, "\nConnect an agent to http://127.0.0.1:8787/mcp with the header\n")
	fmt.Fprintf(out, "  Authorization: Bearer <the token under serve.tokens in %s>\n", file)
	return nil
}

// resolved is p with its symbolic links resolved as far as they exist.
func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if parent := filepath.Dir(p); parent != p {
		return filepath.Join(resolved(parent), filepath.Base(p))
	}
	return p
}

// insideDir reports whether p is dir or lies below it.
func insideDir(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// yamlQuote quotes a path for YAML (double quotes, JSON escapes).
func yamlQuote(s string) string {
	return fmt.Sprintf("%q", s)
}
