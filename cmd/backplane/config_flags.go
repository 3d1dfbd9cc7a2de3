package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/config"
	"github.com/spf13/cobra"
)

// The gateway verbs (call, journal, approvals, budget) share these flags and
// one way of opening the configured gateway. Opening the store runs its
// recovery, so any of them, even a read-only "journal list", turns the
// started intents of dead processes into uncertain ones.

// configFlagHelp describes --config: the working folder is never searched
// (see config.Find).
const configFlagHelp = "the configuration file (YAML; default: $" + config.EnvConfig +
	", else $XDG_CONFIG_HOME/backplane/backplane.yaml, i.e. ~/.config/backplane/backplane.yaml; never the working folder)"

// gatewayFlags are the flags every gateway verb takes.
type gatewayFlags struct {
	configPath string
	auditLog   string
	asJSON     bool
	// interactive gives ask_user_question the terminal, when there is one.
	interactive bool
	// consoleURL, when set (by serve, once it listens), is the console's
	// base URL, added to the ways to decide an approval.
	consoleURL func() string
	// serving marks serve, whose operational log is its stderr; other
	// verbs write theirs to backplane.log beside the audit log, keeping
	// their stderr for their own messages.
	serving bool
	// storeOnly marks verbs that work on the store alone (journal,
	// approvals, budget): they do not start the MCP upstreams.
	storeOnly bool
}

// addGatewayFlags registers the shared flags on a verb or a verb group (as
// persistent flags, so that "journal list --json" and "journal --json list"
// both work).
func addGatewayFlags(cmd *cobra.Command, f *gatewayFlags) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.configPath, "config", "", configFlagHelp)
	pf.BoolVar(&f.asJSON, "json", false, "print JSON instead of text")
	pf.StringVar(&f.auditLog, "audit-log", "",
		`where audit events go, as JSON lines: a file (appended) or "-" for stderr (default: audit.log in the store folder)`)
}

// gatewaySession is an opened configuration: the runtime (gateway, store
// and audit logger), closed together with the terminal, if one was opened.
type gatewaySession struct {
	rt       *assemble.Runtime
	audit    *slog.Logger
	closeTTY func()
}

// open loads the configuration and opens its runtime. A configuration that
// cannot be loaded, or whose store cannot be opened, is an input error
// (exit 2, the message naming the file and line, no usage hint).
func (f *gatewayFlags) open(ctx context.Context, cmd *cobra.Command) (*gatewaySession, error) {
	path, from, err := config.Find(f.configPath)
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
	f.configPath = path
	// The audit log: --audit-log, else the configuration's log.file, else
	// audit.log in the store folder (stderr for a store that is not a
	// folder); see package assemble.
	opts := &assemble.Options{AuditLog: f.auditLog, Stderr: cmd.ErrOrStderr(), NoUpstreams: f.storeOnly, Version: readVersion().Version,
		OperationalLogFile: !f.serving}
	closeTTY := func() {}
	if f.consoleURL != nil {
		opts.ApprovalHints = func(id string) []string {
			hints := cfg.ApprovalCommands(id)
			if base := f.consoleURL(); base != "" {
				hints = append(hints, base+"/ui/approvals/"+id)
			}
			return hints
		}
	}
	if f.interactive {
		opts.Asker, closeTTY = openTerminalAsker()
	}
	rt, err := assemble.Open(ctx, cfg, opts)
	if err != nil {
		closeTTY()
		return nil, &inputError{fmt.Errorf("opening %s: %w", f.configPath, err)}
	}
	return &gatewaySession{rt: rt, audit: rt.Audit, closeTTY: closeTTY}, nil
}

// Close closes the runtime (the store first, the audit log last), then the
// terminal.
func (s *gatewaySession) Close() error {
	err := s.rt.Close()
	s.closeTTY()
	return err
}

// operatorName is who an operator's decision is recorded as when --as is
// not given: the login name.
func operatorName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// groupCmd returns a verb group that refuses unknown verbs (exit 2) instead
// of printing help with exit 0.
func groupCmd(use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
}

// operatorTokenEnv names the environment variable holding an operator's
// token: the CLI then acts as that operator.
const operatorTokenEnv = "BACKPLANE_OPERATOR_TOKEN"

// operator is who an operator verb acts as: the owner of
// BACKPLANE_OPERATOR_TOKEN (as, if given, must be the same), else as, else
// the login name. When the configuration lists operators, the name must be
// one of them (an input error otherwise, before anything is done).
func (s *gatewaySession) operator(as string) (string, error) {
	cfg := s.rt.Config
	if tok := os.Getenv(operatorTokenEnv); tok != "" {
		name, ok := cfg.OperatorTokens()[tok]
		if !ok {
			return "", &inputError{fmt.Errorf("%s is set but is no operator's token in %s", operatorTokenEnv, cfg.Path)}
		}
		if as != "" && as != name {
			return "", &inputError{fmt.Errorf("--as %s, but %s belongs to operator %s", as, operatorTokenEnv, name)}
		}
		return name, nil
	}
	if as == "" {
		as = operatorName()
	}
	if as == "" {
		return "", &inputError{errors.New("--as OPERATOR is required (no login name to default to): the decision records who made it")}
	}
	if names := cfg.OperatorNames(); len(names) > 0 && !slices.Contains(names, as) {
		return "", &inputError{fmt.Errorf("%q is not an operator of %s (operators: %s); name one with --as or set %s",
			as, cfg.Path, strings.Join(names, ", "), operatorTokenEnv)}
	}
	return as, nil
}
