// Command backplane is the command line of the Backplane execution gateway:
// serve the gateway over MCP, make one call through its pipeline, read and
// resolve its journal, decide approvals, show budgets, review pinned
// upstream tools, and check schemas and arguments as the gateway does.
//
// Exit codes: 0 when the answer is yes (or, for a batch, when every line was
// processed), 1 when the verdict is negative, 2 for a usage or I/O error,
// with a message on stderr.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/internal/sandbox"
	"github.com/agentbackplane/backplane/internal/termtext"
)

// Exit codes of every verb.
const (
	exitOK       = 0
	exitNegative = 1
	exitUsage    = 2
)

func main() {
	// The sandbox launcher: when this process was started as one, it
	// confines itself and executes a tool, never returning.
	sandbox.Main()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// errNegative is returned by a verb that has already printed a negative
// verdict: nothing more to say, exit 1.
var errNegative = errors.New("negative verdict")

// run executes one command line and returns its exit code; tests call it
// in-process as well as through the built binary.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdin, stdout, stderr)
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errNegative):
		return exitNegative
	}
	var blocked *hookBlocked
	if errors.As(err, &blocked) {
		return exitUsage // the hook said why, escaped, on stderr
	}
	// Errors quote what callers, upstreams and files said.
	fmt.Fprintf(stderr, "backplane: %s\n", termtext.Block(err.Error()))
	var ioErr *inputError
	if !errors.As(err, &ioErr) && cmd != nil {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return exitUsage
}

// inputError is an I/O or input-format problem (a file that cannot be read,
// a catalog that is not JSON): exit 2, but no usage hint, the command line
// itself was fine.
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

func inputErrorf(format string, a ...any) error {
	return &inputError{fmt.Errorf(format, a...)}
}

const rootLong = `backplane is the Backplane execution gateway for AI-agent tool calls. Every
call passes one pipeline: tool lookup, validation of the arguments against the
tool's input schema, authorization (default deny), approval where policy
demands it, budget reservation, a durable intent synced to disk, and only then
the tool. A call whose outcome is unknown is never re-run.

  serve        serve the gateway over MCP (stdio or streamable HTTP)
  call         run one call through the whole pipeline
  journal      list, show and resolve call intents
  approvals    list, approve and deny approval requests
  budget       show budget used per scope
  tools        list tools and accept changed upstream definitions
  servers      add an upstream MCP server, having looked at its tools
  policy       explain how the policy decides a call; check it
  reload       make a running serve re-read its policy
  hook         decide a coding agent's tool use (Claude Code, Codex, Gemini CLI hooks)
  schema       check schemas and arguments against the subset

The gateway verbs read one configuration file: --config FILE, else
$BACKPLANE_CONFIG, else ~/.config/backplane/backplane.yaml ($XDG_CONFIG_HOME);
never one found in the working folder, which an agent's tools may write.

The gateway validates arguments against a strict, fail-closed subset of JSON
Schema: type (object, array, string, integer, number, boolean), properties,
required, additionalProperties (boolean), description, minimum, items (one
schema) and oneOf. Anything else ($ref, enum, default, $schema, pattern, ...)
is refused with class unsupported_capability, never ignored; a malformed
schema or arguments that break a constraint fail with class validation.

Use "backplane schema lint" on an MCP tools/list result to see which tools the
gateway will accept, "schema check" for one schema, and "schema validate" to
validate arguments (one call, or JSON Lines with --batch).

Exit codes: 0 yes / valid / processed, 1 negative verdict, 2 usage or I/O error.`

// newRootCmd builds the whole command tree writing to the given streams.
func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "backplane",
		Short:         "The Backplane execution gateway for AI-agent tool calls",
		Long:          rootLong,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	// `backplane --version` prints what `backplane version` prints.
	root.Version = readVersion().Version
	root.SetVersionTemplate("{{with .Root}}{{end}}" + readVersion().String() + "\n")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newSchemaCmd(), newVersionCmd())
	root.AddCommand(newCallCmd(), newJournalCmd(), newApprovalsCmd(), newBudgetCmd())
	root.AddCommand(newServeCmd())
	root.AddCommand(newToolsCmd())
	root.AddCommand(newPolicyCmd(), newReloadCmd())
	root.AddCommand(newCompletionCmd(), newInitCmd(), newServersCmd(), newConnectionsCmd(), newSecretsCmd())
	root.AddCommand(newHookCmd())
	return root
}
