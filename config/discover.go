package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Finding the configuration. Whatever a tool can write must never become
// configuration, nor be executed, without the operator naming it: a
// backplane.yaml written at the root of a workspace by an agent's write
// call, with a servers: command, would otherwise run as the operator the
// next time any verb runs there. So the working folder is never searched.
// The file is, in this order:
//
//  1. the one named with --config;
//  2. the one named by $BACKPLANE_CONFIG;
//  3. the user's: $XDG_CONFIG_HOME/backplane/backplane.yaml, by default
//     ~/.config/backplane/backplane.yaml ([UserFile]).
//
// The first two are named by the operator (a tool cannot change the
// environment of the operator's later commands); the third is found, and
// is refused when it lies inside the workspace it configures, where the
// tools could have written it (see [CheckFound]).

// EnvConfig is the environment variable that names the configuration file.
const EnvConfig = "BACKPLANE_CONFIG"

// How a configuration file was found.
const (
	FromFlag    = "--config"
	FromEnv     = "$" + EnvConfig
	FromUserDir = "user configuration folder"
)

// ErrNoConfig is wrapped by the error of [Find] when there is no file to
// load.
var ErrNoConfig = errors.New("no configuration file")

// NotFoundError says where the configuration was looked for.
type NotFoundError struct {
	// Looked lists the places searched, in order, each with why it was not
	// used.
	Looked []string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no configuration file: looked for %s; name one with --config FILE or %s=FILE, or create %s with `backplane init`",
		strings.Join(e.Looked, ", then "), EnvConfig, userFileOr("~/.config/backplane/backplane.yaml"))
}

func (e *NotFoundError) Unwrap() error { return ErrNoConfig }

// UserFile is the user's configuration file:
// $XDG_CONFIG_HOME/backplane/backplane.yaml when XDG_CONFIG_HOME is an
// absolute path, else ~/.config/backplane/backplane.yaml. It is "" when
// neither folder is known.
func UserFile() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "backplane", DefaultFile)
}

func userFileOr(def string) string {
	if f := UserFile(); f != "" {
		return f
	}
	return def
}

// Find returns the configuration file to load and how it was found
// ([FromFlag], [FromEnv] or [FromUserDir]): flag when it is not empty,
// else $BACKPLANE_CONFIG, else [UserFile] when it exists. The working
// folder is never searched. With none, the error is a [*NotFoundError].
func Find(flag string) (path, from string, err error) {
	if flag != "" {
		return flag, FromFlag, nil
	}
	if env := os.Getenv(EnvConfig); env != "" {
		return env, FromEnv, nil
	}
	looked := []string{"--config (not given)", "$" + EnvConfig + " (not set)"}
	user := UserFile()
	if user == "" {
		return "", "", &NotFoundError{Looked: append(looked, "the user configuration folder (neither $XDG_CONFIG_HOME nor $HOME is set)")}
	}
	if _, err := os.Stat(user); err != nil {
		why := "absent"
		if !errors.Is(err, fs.ErrNotExist) {
			why = err.Error()
		}
		return "", "", &NotFoundError{Looked: append(looked, user+" ("+why+")")}
	}
	return user, FromUserDir, nil
}

// CheckFound refuses a configuration that was found rather than named
// (from is [FromUserDir]) and lies inside the workspace it configures:
// the tools may write there, so the file may be theirs. A file named with
// --config or $BACKPLANE_CONFIG is the operator's choice and is accepted
// (the README's examples/serve.yaml inside the repository it serves).
func (c *Config) CheckFound(from string) error {
	if from != FromUserDir {
		return nil
	}
	file := filepath.Join(c.Dir, filepath.Base(c.Path))
	if within(realOrSelf(file), realOrSelf(c.Workspace)) {
		return &Error{File: c.Path, Msg: fmt.Sprintf(
			"this configuration lies inside its own workspace (%s), where the tools can write, so it is not loaded without being named: "+
				"set workspace: to the folder the tools work in, or name the file with --config or %s", c.Workspace, EnvConfig)}
	}
	return nil
}

// realOrSelf is p with its symbolic links resolved, or p when that fails.
func realOrSelf(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// within reports whether p is dir or lies inside it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator))
}
