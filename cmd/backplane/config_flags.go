package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/opauth"
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
	// serving marks serve, whose operational log is its stderr; other
	// verbs write theirs to backplane.log beside the audit log, keeping
	// their stderr for their own messages.
	serving bool
	// storeOnly marks verbs that work on the store alone (journal,
	// approvals, budget): they do not start the MCP upstreams.
	storeOnly bool
	// operatorTokenFile is --operator-token-file of the operator verbs.
	operatorTokenFile string
}

// addOperatorFlags registers what an operator verb (one that decides,
// resolves, accepts, resets or prunes) takes besides the gateway flags:
// --as, whose help is asHelp, and --operator-token-file.
func addOperatorFlags(cmd *cobra.Command, f *gatewayFlags, as *string, asHelp string) {
	fl := cmd.Flags()
	fl.StringVar(as, "as", "", asHelp)
	fl.StringVar(&f.operatorTokenFile, "operator-token-file", "",
		"a file holding the operator's token (instead of $"+operatorTokenEnv+"); needed when the configuration lists operators")
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
	// operatorTokenFile is --operator-token-file, for operator.
	operatorTokenFile string
}

// open loads the configuration and opens its runtime. A configuration that
// cannot be loaded, or whose store cannot be opened, is an input error
// (exit 2, the message naming the file and line, no usage hint).
func (f *gatewayFlags) open(ctx context.Context, cmd *cobra.Command) (*gatewaySession, error) {
	cfg, opts, closeTTY, err := f.load(cmd)
	if err != nil {
		return nil, err
	}
	rt, err := assemble.Open(ctx, cfg, opts)
	if err != nil {
		closeTTY()
		return nil, &inputError{fmt.Errorf("opening %s: %w", f.configPath, err)}
	}
	return &gatewaySession{rt: rt, audit: rt.Audit, closeTTY: closeTTY, operatorTokenFile: f.operatorTokenFile}, nil
}

// load finds and loads the configuration and says how to open its runtime
// (serve opens it through assemble.OpenServer); closeTTY closes the
// terminal opened for ask_user_question, if one was.
func (f *gatewayFlags) load(cmd *cobra.Command) (_ *config.Config, _ *assemble.Options, closeTTY func(), _ error) {
	path, from, err := config.Find(f.configPath)
	if err != nil {
		return nil, nil, nil, &inputError{err}
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, nil, &inputError{err}
	}
	if err := cfg.CheckFound(from); err != nil {
		return nil, nil, nil, &inputError{err}
	}
	f.configPath = path
	// The audit log: --audit-log, else the configuration's log.file, else
	// audit.log in the store folder (stderr for a store that is not a
	// folder); see package assemble.
	opts := &assemble.Options{AuditLog: f.auditLog, Stderr: cmd.ErrOrStderr(), NoUpstreams: f.storeOnly, Version: readVersion().Version,
		OperationalLogFile: !f.serving, Degraded: f.serving}
	if !f.serving {
		// Who ran the command, whoever it claims to act as: the account
		// is what the operating system vouches for.
		opts.AuditWith = osUserAttrs()
	}
	closeTTY = func() {}
	if f.interactive {
		opts.Asker, closeTTY = openTerminalAsker()
	}
	return cfg, opts, closeTTY, nil
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

// maxTokenFile bounds what --operator-token-file reads: a token is short,
// and a wrong path must not read a large file into memory.
const maxTokenFile = 4 << 10

// operator is who an operator verb acts as.
//
// When the configuration lists operators, the operator's token is
// required (BACKPLANE_OPERATOR_TOKEN, or --operator-token-file), compared
// in constant time with every configured operator's: the name is the
// token's owner, never a claim (--as, if given, must be the same). --as
// alone is refused there: anyone who can run the CLI could type any name
// (finding 15 of issue 22). Without operators, a token is refused and the
// name is --as, else the login name.
func (s *gatewaySession) operator(as string) (string, error) {
	cfg := s.rt.Config
	tok, from, err := s.operatorToken()
	if err != nil {
		return "", &inputError{err}
	}
	if len(cfg.Operators) == 0 {
		if tok != "" {
			return "", &inputError{fmt.Errorf("%s is given but %s lists no operators", from, cfg.Path)}
		}
		if as == "" {
			as = operatorName()
		}
		if as == "" {
			return "", &inputError{errors.New("--as OPERATOR is required (no login name to default to): the decision records who made it")}
		}
		return as, nil
	}
	if tok == "" {
		return "", &inputError{fmt.Errorf("%s lists operators: an operator action needs the operator's token, in $%s or a file named by --operator-token-file (--as alone is a name anyone can type)",
			cfg.Path, operatorTokenEnv)}
	}
	name, ok := operatorOfToken(cfg.Operators, tok)
	if !ok {
		return "", &inputError{fmt.Errorf("%s is no operator's token in %s", from, cfg.Path)}
	}
	if as != "" && as != name {
		return "", &inputError{fmt.Errorf("--as %s, but %s belongs to operator %s", as, from, name)}
	}
	return name, nil
}

// operatorToken is the token the operator gave: the file of
// --operator-token-file (trimmed), else $BACKPLANE_OPERATOR_TOKEN; from
// says which, for messages (never the token).
func (s *gatewaySession) operatorToken() (tok, from string, err error) {
	if s.operatorTokenFile != "" {
		f, err := os.Open(s.operatorTokenFile)
		if err != nil {
			return "", "", fmt.Errorf("--operator-token-file: %w", err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
		if err != nil {
			return "", "", fmt.Errorf("--operator-token-file: %w", err)
		}
		if len(b) > maxTokenFile {
			return "", "", fmt.Errorf("--operator-token-file %s: over %d bytes, not a token", s.operatorTokenFile, maxTokenFile)
		}
		tok = strings.TrimSpace(string(b))
		if tok == "" {
			return "", "", fmt.Errorf("--operator-token-file %s is empty", s.operatorTokenFile)
		}
		return tok, "the token of --operator-token-file " + s.operatorTokenFile, nil
	}
	if tok := os.Getenv(operatorTokenEnv); tok != "" {
		return tok, operatorTokenEnv, nil
	}
	return "", "", nil
}

// operatorOfToken is the operator whose token tok is, by the one
// authenticator of operators' tokens (internal/opauth: the server's and
// the console's too). An operator without a token cannot act through the
// CLI.
func operatorOfToken(ops []config.Operator, tok string) (string, bool) {
	tokens := map[string]string{}
	for _, o := range ops {
		tokens[o.Token] = o.Name
	}
	return opauth.New(tokens, nil, nil).Operator(tok)
}

// osUserAttrs are the audit attributes naming the OS account that runs
// this process: its login name (when the system knows it) and uid.
func osUserAttrs() []any {
	attrs := []any{"os_uid", strconv.Itoa(os.Getuid())}
	if u, err := user.Current(); err == nil && u.Username != "" {
		attrs = append(attrs, "os_user", u.Username)
	}
	return attrs
}
