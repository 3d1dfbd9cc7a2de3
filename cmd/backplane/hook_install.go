package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/hook"
	"github.com/spf13/cobra"
)

func newHookInstallCmd() *cobra.Command {
	var (
		file, configPath, caller, gwURL, tokenFile string
		check                                      bool
	)
	cmd := &cobra.Command{
		Use:   "install AGENT [--file FILE] [--caller NAME | --url URL] [--check]",
		Short: "Add the Backplane PreToolUse hook to an agent's hook configuration",
		Long: `Install adds a PreToolUse command hook running "backplane hook AGENT" to the
agent's hook configuration, keeping everything else in it, and says what it
changed: Claude Code's ~/.claude/settings.json, Codex's ~/.codex/hooks.json
($CODEX_HOME), Cursor's ~/.cursor/hooks.json (its beforeShellExecution,
beforeReadFile and beforeMCPExecution events, with failClosed), or --file. The hook's command names this binary by its full
path and the configuration by its absolute path (--config, as every verb),
with --caller NAME, or --url URL to ask a running serve (the caller's token
then comes from $` + callerTokenEnv + ` or --token-file, in the agent's environment).
A file that already has exactly this hook is left as it is.

Codex runs a new or changed hook only once it is trusted: install records
the hook's trust hash in the config.toml beside the hooks file
([hooks.state], as Codex's /hooks review does), or says to trust it from
/hooks where that file cannot be edited safely. Claude Code ignores a settings file that fails
validation, and every hook in it.

With --check nothing is written: the file is checked (a JSON object, every
PreToolUse group well formed, a hook running "backplane hook AGENT" under a
matcher that matches the governed tools), each problem printed; exit 1 when
there is one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			agent, err := hook.ParseAgent(args[0])
			if err != nil {
				return err
			}
			if file == "" {
				if file, err = agentHookFile(agent); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			data, err := os.ReadFile(file)
			if err != nil && !(errors.Is(err, os.ErrNotExist) && !check) {
				return &inputError{err}
			}
			if check {
				problems := hook.Check(agent, data)
				for _, p := range problems {
					fmt.Fprintf(out, "%s: %s\n", escapeControl(file), escapeControl(p.Error()))
				}
				if len(problems) > 0 {
					return errNegative
				}
				fmt.Fprintf(out, "%s: ok\n", escapeControl(file))
				return nil
			}
			command, err := hookCommand(agent, configPath, caller, gwURL, tokenFile)
			if err != nil {
				return err
			}
			updated, changed, err := hook.Install(agent, data, command)
			if err != nil {
				return &inputError{fmt.Errorf("%s: %w", file, err)}
			}
			if !changed {
				fmt.Fprintf(out, "%s already runs this hook; nothing changed\n", escapeControl(file))
				return nil
			}
			if err := writeFileAtomic(file, updated); err != nil {
				return &inputError{err}
			}
			if agent == hook.Cursor {
				fmt.Fprintf(out, "added to %s: a %s hook (failClosed) running\n  %s\n", escapeControl(file), strings.Join(hook.CursorEvents, ", "), escapeControl(command))
			} else {
				fmt.Fprintf(out, "added to %s: a PreToolUse hook for %q running\n  %s\n", escapeControl(file), hook.Matchers[agent], escapeControl(command))
			}
			if agent == hook.Codex {
				return trustCodexHook(out, file, updated, command)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&file, "file", "", "the agent's hook configuration file (default: the agent's user file)")
	fl.StringVar(&configPath, "config", "", configFlagHelp)
	fl.StringVar(&caller, "caller", "", "the caller the hook decides as")
	fl.StringVar(&gwURL, "url", "", "the running gateway the hook asks (instead of deciding from the configuration)")
	fl.StringVar(&tokenFile, "token-file", "", "with --url: the file holding the caller's token")
	fl.BoolVar(&check, "check", false, "check the file instead of changing it")
	return cmd
}

// trustCodexHook records the installed hook as trusted in the config.toml
// beside the hooks file (Codex's $CODEX_HOME), as Codex's own /hooks
// review does: Codex skips an untrusted user hook, silently in codex exec.
// Where the file cannot be edited safely it says how to trust it instead.
func trustCodexHook(out io.Writer, hooksFile string, hooksJSON []byte, command string) error {
	abs, err := filepath.Abs(hooksFile)
	if err != nil {
		return err
	}
	key, hash, err := hook.CodexTrust(abs, hooksJSON, command)
	if err != nil {
		return &inputError{err}
	}
	conf := filepath.Join(filepath.Dir(abs), "config.toml")
	existing, err := os.ReadFile(conf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return &inputError{err}
	}
	updated, changed, err := hook.TrustCodexConfig(existing, key, hash)
	if err != nil {
		fmt.Fprintf(out, "%s: %s\nCodex runs the hook once it is trusted: open /hooks in Codex and trust it.\n", escapeControl(conf), escapeControl(err.Error()))
		return nil
	}
	if changed {
		if err := writeFileAtomic(conf, updated); err != nil {
			return &inputError{err}
		}
	}
	fmt.Fprintf(out, "trusted in %s (hooks.state %s), as Codex's /hooks review would\n", escapeControl(conf), escapeControl(key))
	return nil
}

// agentHookFile is the agent's user-level hook configuration.
func agentHookFile(agent hook.Agent) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home folder to find the agent's configuration in (name it with --file): %w", err)
	}
	if agent == hook.Cursor {
		return filepath.Join(home, ".cursor", "hooks.json"), nil
	}
	if agent == hook.Codex {
		if ch := os.Getenv("CODEX_HOME"); ch != "" {
			return filepath.Join(ch, "hooks.json"), nil
		}
		return filepath.Join(home, ".codex", "hooks.json"), nil
	}
	return filepath.Join(home, ".claude", "settings.json"), nil
}

// hookCommand is the command line the agent runs: this binary and the
// configuration by absolute paths, since an agent's hooks may run with
// another working folder and environment.
func hookCommand(agent hook.Agent, configPath, caller, gwURL, tokenFile string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	words := []string{exe, "hook", string(agent)}
	switch {
	case gwURL != "" && caller != "":
		return "", errors.New("--caller and --url exclude each other: with --url the token names the caller")
	case gwURL != "":
		words = append(words, "--url", gwURL)
		if tokenFile != "" {
			abs, err := filepath.Abs(tokenFile)
			if err != nil {
				return "", err
			}
			words = append(words, "--token-file", abs)
		}
	case caller != "":
		path, _, err := config.Find(configPath)
		if err != nil {
			return "", &inputError{err}
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", err
		}
		words = append(words, "--config", abs, "--caller", caller)
	default:
		return "", errors.New("--caller NAME (decide from the configuration) or --url URL (ask a running serve) is required")
	}
	for i, w := range words {
		words[i] = hook.ShellQuote(w)
	}
	return strings.Join(words, " "), nil
}

// writeFileAtomic replaces path with data through a file in the same
// folder renamed over it: an agent reading its settings meanwhile sees the
// old file or the new one, never half of one. The mode of an existing
// file is kept; a new one is 0600 in a folder made 0700.
func writeFileAtomic(path string, data []byte) error {
	mode := os.FileMode(0o600)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
