package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentbackplane/backplane/assemble"
	"github.com/agentbackplane/backplane/internal/termtext"
)

// "backplane reload" asks a running serve, through the control socket in
// its store folder (package assemble: ControlSocket, RequestReload), to
// re-read its configuration's policy. serve itself reloads on SIGHUP too
// (serve.go).

func newReloadCmd() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "reload [--config F]",
		Short: "Make a running local serve re-read its configuration's policy",
		Long: `reload asks the serve running on this configuration's store folder (through
the socket serve.sock there) to re-read the configuration file and put its
policy in force. An invalid file is refused with the line at fault and the
running policy stays. Calls already authorized keep their decision. Only the
policy takes effect: changes to tools, servers, budgets or the store need a
restart. SIGHUP to the serve process does the same.

Exit 0 when the new policy is in force, 1 when serve refused the file, 2 when
there is no serve to ask or the file cannot be read here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := findConfig(configPath)
			if err != nil {
				return fmt.Errorf("%w (no serve was asked: its policy stays)", err)
			}
			err = assemble.RequestReload(cfg)
			out := cmd.OutOrStdout()
			var refused *assemble.ReloadRefusedError
			if errors.As(err, &refused) {
				fmt.Fprintf(out, "refused: %s\nthe running policy stays\n", termtext.Block(refused.Reason))
				return errNegative
			}
			if err != nil {
				return &inputError{err}
			}
			fmt.Fprintln(out, "ok: the policy of", cfg.Path, "is in force")
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", configFlagHelp)
	return cmd
}
