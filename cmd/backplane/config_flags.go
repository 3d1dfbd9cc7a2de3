package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/config"
	"github.com/spf13/cobra"
)

// The gateway verbs (call, journal, approvals, budget) share these flags and
// one way of opening the configured gateway. Opening the store runs its
// recovery, so any of them, even a read-only "journal list", turns the
// started intents of dead processes into uncertain ones.

// defaultConfigFile is looked up in the working directory.
const defaultConfigFile = "backplane.yaml"

// auditLogName is the file, in the store folder, that receives the audit
// events when neither --audit-log nor the configuration's log.file names
// one: stdout stays the verb's answer, and stderr stays for problems.
const auditLogName = "audit.log"

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
	// storeOnly marks verbs that work on the store alone (journal,
	// approvals, budget): they do not start the MCP upstreams.
	storeOnly bool
}

// addGatewayFlags registers the shared flags on a verb or a verb group (as
// persistent flags, so that "journal list --json" and "journal --json list"
// both work).
func addGatewayFlags(cmd *cobra.Command, f *gatewayFlags) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.configPath, "config", defaultConfigFile, "the configuration file (YAML)")
	pf.BoolVar(&f.asJSON, "json", false, "print JSON instead of text")
	pf.StringVar(&f.auditLog, "audit-log", "",
		`where audit events go, as JSON lines: a file (appended) or "-" for stderr (default: audit.log in the store folder)`)
}

// gatewaySession is an opened configuration: the runtime (gateway and
// store) and the audit logger, closed together.
type gatewaySession struct {
	rt       *config.Runtime
	audit    *slog.Logger
	closeLog func() error
}

// open loads the configuration and opens its runtime. A configuration that
// cannot be loaded, or whose store cannot be opened, is an input error
// (exit 2, the message naming the file and line, no usage hint).
func (f *gatewayFlags) open(ctx context.Context, cmd *cobra.Command) (*gatewaySession, error) {
	cfg, err := config.Load(f.configPath)
	if err != nil {
		return nil, &inputError{err}
	}
	logger, closeLog, err := f.auditLogger(cmd.ErrOrStderr(), cfg)
	if err != nil {
		return nil, &inputError{err}
	}
	opts := &config.OpenOptions{Logger: logger, SkipServers: f.storeOnly}
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
		asker, closeTTY := openTerminalAsker()
		opts.Asker = asker
		closeLog = chainClose(closeLog, closeTTY)
	}
	rt, err := cfg.Open(ctx, opts)
	if err != nil {
		closeLog()
		return nil, &inputError{fmt.Errorf("opening %s: %w", f.configPath, err)}
	}
	return &gatewaySession{rt: rt, audit: logger, closeLog: closeLog}, nil
}

func chainClose(first func() error, then func()) func() error {
	return func() error {
		err := first()
		then()
		return err
	}
}

// Close closes the store first (it may still log), then the audit log.
func (s *gatewaySession) Close() error {
	return errors.Join(s.rt.Close(), s.closeLog())
}

// auditLogger opens the audit log: --audit-log, else the configuration's
// log.file, else audit.log in the store folder (created if need be, as the
// store would create it). A store that is not a folder (a postgres:// URL)
// sends the events to stderr. The configuration's log.level applies.
func (f *gatewayFlags) auditLogger(stderr io.Writer, cfg *config.Config) (*slog.Logger, func() error, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Log.Level)); err != nil {
		return nil, nil, fmt.Errorf("%s: log level: %w", cfg.Path, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	path := f.auditLog
	if path == "" {
		path = cfg.Log.File
	}
	if path == "" {
		dir := stateDir(cfg)
		if dir == "" {
			path = "-"
		} else {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, nil, fmt.Errorf("audit log: %w", err)
			}
			path = filepath.Join(dir, auditLogName)
		}
	}
	if path == "-" {
		return slog.New(slog.NewJSONHandler(stderr, opts)), func() error { return nil }, nil
	}
	// O_APPEND: concurrent processes append whole records (each event is
	// one write), never overwrite each other.
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	return slog.New(slog.NewJSONHandler(file, opts)), file.Close, nil
}

// stateDir is the folder of the configured store (absolute: the
// configuration resolves it), or "" when the store is not a folder.
func stateDir(cfg *config.Config) string {
	if strings.Contains(cfg.Store, "://") {
		return ""
	}
	return cfg.Store
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
