package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newCompletionCmd prints a shell completion script. Cobra's default
// completion command is replaced by this one so that its help names the
// shells Backplane supports and how to load each.
func newCompletionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: `Print a shell completion script for backplane.

  bash:  source <(backplane completion bash)
  zsh:   backplane completion zsh > "${fpath[1]}/_backplane"
  fish:  backplane completion fish | source`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"bash", "zsh", "fish"},
		RunE: func(cmd *cobra.Command, args []string) error {
			root, out := cmd.Root(), cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			}
			return fmt.Errorf("unsupported shell %q: choose bash, zsh or fish", args[0])
		},
	}
}
