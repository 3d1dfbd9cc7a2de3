package main

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/backend/builtin"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/internal/termtext"
	"github.com/agentbackplane/backplane/policy"
	"github.com/agentbackplane/backplane/tool"
)

func newPolicyCmd() *cobra.Command {
	cmd := groupCmd("policy", "Explain and check the configured policy",
		`policy explains how the configured policy decides a call, and checks it for
rules that can never decide.`)
	cmd.AddCommand(newPolicyExplainCmd(), newPolicyCheckCmd())
	return cmd
}

// explainReport is the --json answer of "policy explain".
type explainReport struct {
	Caller   string        `json:"caller"`
	Session  string        `json:"session,omitempty"`
	Tool     string        `json:"tool"`
	Decision string        `json:"decision"` // allow, approve, deny, invalid
	Rule     string        `json:"rule,omitempty"`
	Reason   string        `json:"reason"`
	Parts    []policy.Part `json:"parts,omitempty"`
}

func newPolicyExplainCmd() *cobra.Command {
	var (
		configPath, caller, session string
		asJSON                      bool
	)
	cmd := &cobra.Command{
		Use:   "explain --caller NAME [--session S] TOOL ARGS|-",
		Short: "Say how the policy decides one call, and which rule decides it",
		Long: `explain decides TOOL with the arguments ARGS (JSON text, or "-" for stdin) as
the configured policy would for the caller, and prints the decision (allow,
approve, deny), the rule that decided it (file:line) and why; for a shell
command, each simple command with its own decision. The arguments are not
validated against the tool's schema and nothing runs: only the policy is asked.
A path of a built-in tool is resolved in the workspace, as serve does, and
decided on the file it leads to as well as on its text.

Exit 0 when the call would be allowed (perhaps after an approval), 1 when it
would be refused, 2 for a usage or configuration error.

It also notes, not as findings, the servers whose validator refuses some
of their tools (each refused tool, the keywords at fault, and the line that
accepts them), since a policy that allows them will see every call fail.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if caller == "" {
				return errors.New("--caller is required")
			}
			cfg, err := findConfig(configPath)
			if err != nil {
				return err
			}
			rules, err := cfg.CompilePolicy()
			if err != nil {
				return &inputError{err}
			}
			data := []byte(args[1])
			if args[1] == "-" {
				if data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxCallInput+1)); err != nil {
					return inputErrorf("reading stdin: %v", err)
				}
			}
			v, err := jsonstrict.Decode(data, &jsonstrict.Options{MaxBytes: cfg.Limits.MaxArgumentBytes})
			if err != nil {
				return inputErrorf("ARGS: %v", err)
			}
			d := rules.Decide(policy.Request{Caller: caller, Session: session, Tool: args[0], Args: v,
				RealPath: explainRealPath(cfg, args[0], data)})
			rep := explainReport{Caller: caller, Session: session, Tool: args[0], Decision: string(d.Effect),
				Rule: d.Source, Reason: d.Reason, Parts: d.Parts}
			if d.Err != nil {
				rep.Decision, rep.Reason = "invalid", d.Err.Error()
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSONLine(out, rep); err != nil {
					return err
				}
			} else {
				L := termtext.Line
				fmt.Fprintf(out, "%s: %s\n", rep.Decision, L(rep.Reason))
				if rep.Rule != "" {
					fmt.Fprintf(out, "  rule: %s\n", L(rep.Rule))
				}
				for _, p := range rep.Parts {
					fmt.Fprintf(out, "  %-8s %s  (%s)\n", p.Effect, L(p.Text), L(p.Reason))
				}
			}
			if !d.Allow {
				return errNegative
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configPath, "config", "", configFlagHelp)
	fl.StringVar(&caller, "caller", "", "who calls (the policy's caller name) (required)")
	fl.StringVar(&session, "session", "", "the session id (CEL rules see it)")
	fl.BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

func newPolicyCheckCmd() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Lint the policy against the tools the gateway registers",
		Long: `check opens the configured gateway (its tools, the upstream servers' tools
included) and lists policy entries that can never decide or will not do what
they seem to:

  shadowed_by_deny      an allow or approve whose every call a deny refuses
  unknown_tool          an entry that no registered tool matches
  allow_needs_approval  an allow on a tool whose safety flags demand an
                        approval anyway (requires_approval)

  no_operator           an approve entry no one may decide: no configured
                        operator is among its approvers and it does not
                        set self_approve
  path_matched_as_text  a pattern on a path-like argument (path, file, dir,
                        ...) matched as text (main_arg match: text): it
                        decides the spelling, not the file

Exit 0 when nothing is found, 1 when something is, 2 for a usage or
configuration error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.open(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			rules, err := s.rt.Config.CompilePolicy()
			if err != nil {
				return &inputError{err}
			}
			tools := s.rt.Gateway.Tools()
			names := make([]string, 0, len(tools))
			asks := map[string]bool{}
			for _, t := range tools {
				names = append(names, t.Name)
				asks[t.Name] = t.Safety.RequiresApproval
			}
			slices.Sort(names)
			found := rules.Lint(policy.LintOptions{
				Tools:            names,
				RequiresApproval: func(t string) bool { return asks[t] },
				CanDecide:        canDecide(rules, s.rt.Config.OperatorNames()),
			})
			out := cmd.OutOrStdout()
			if f.asJSON {
				if found == nil {
					found = []policy.Finding{}
				}
				m := map[string]any{"ok": len(found) == 0, "findings": found}
				if r := refusedServers(s.rt); r != nil {
					m["refused_by_server"] = r
				}
				if err := writeJSONLine(out, m); err != nil {
					return err
				}
			} else {
				for _, fd := range found {
					fmt.Fprintf(out, "%s: %s: %s\n", termtext.Line(fd.Rule), fd.Kind, termtext.Line(fd.Message))
				}
				if len(found) == 0 {
					fmt.Fprintf(out, "ok: %s, checked against %s\n", plural(len(s.rt.Config.Policy), "policy rule"), plural(len(names), "tool"))
				}
				// Not findings (the policy is not at fault), but what a
				// policy that allows these tools will meet.
				printRefused(out, "note: ", refusedServers(s.rt))
			}
			if len(found) > 0 {
				return errNegative
			}
			return nil
		},
	}
	addGatewayFlags(cmd, &f)
	return cmd
}

// findConfig finds and loads the configuration as the gateway verbs do
// (see config.Find), without opening it.
func findConfig(flag string) (*config.Config, error) {
	path, from, err := config.Find(flag)
	if err != nil {
		return nil, &inputError{err}
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, &inputError{err}
	}
	if err := cfg.CheckFound(from); err != nil {
		return nil, &inputError{err}
	}
	return cfg, nil
}

// canDecide reports whether someone may decide the approvals of caller
// (a rule's caller, perhaps a glob) calling tool: the caller's own person
// where a rule sets self_approve, else a configured operator among the
// approvers. With no operators configured any name is an operator, so an
// approve entry can always be decided.
func canDecide(rules *policy.Rules, operators []string) func(caller, tool string) bool {
	return func(caller, tool string) bool {
		a := rules.ApproverRule(caller, tool)
		if a.SelfApprove || len(operators) == 0 {
			return true
		}
		for _, op := range operators {
			if op != caller && a.MayApprove(op) {
				return true
			}
		}
		return false
	}
}

// explainRealPath resolves the path argument of an enabled built-in tool in
// the workspace, as the gateway does before it decides, so that explain
// says what a call would get; "" (the text alone) when the tool is not a
// path-taking built-in or the path cannot be resolved (the tool would
// refuse it).
func explainRealPath(cfg *config.Config, name string, args []byte) string {
	if ma, ok := policy.BuiltinMainArgs[name]; !ok || ma.Kind != policy.KindPath || !slices.Contains(cfg.Builtin.Enable, name) {
		return ""
	}
	set, err := builtin.New(&builtin.Options{Workspace: cfg.Workspace, Hide: cfg.PrivatePaths()})
	if err != nil {
		return ""
	}
	defer set.Close()
	t, ok := set.Tool(name)
	if !ok {
		return ""
	}
	pr, ok := t.Backend.(tool.PathResolver)
	if !ok {
		return ""
	}
	rp, err := pr.ResolvePath(args)
	if err != nil {
		return ""
	}
	return rp.Real
}
