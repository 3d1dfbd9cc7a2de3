package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindNeverSearchesTheWorkingFolder: with neither --config nor
// $BACKPLANE_CONFIG, only the user's file is found; a backplane.yaml in the
// working folder is never loaded, and the error says where it looked and
// how to name or create one (issue 12, finding 2).
func TestFindNeverSearchesTheWorkingFolder(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	if err := os.WriteFile(filepath.Join(wd, DefaultFile), []byte("policy: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	t.Setenv(EnvConfig, "")

	_, _, err := Find("")
	var nf *NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, ErrNoConfig) {
		t.Fatalf("Find = %v, want a NotFoundError", err)
	}
	user := filepath.Join(xdg, "backplane", DefaultFile)
	for _, want := range []string{"--config", "$" + EnvConfig, user, "backplane init"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not mention %s", err, want)
		}
	}

	// The user's file.
	if err := os.MkdirAll(filepath.Dir(user), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(user, []byte("policy: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, from, err := Find(""); err != nil || p != user || from != FromUserDir {
		t.Errorf("Find = %q %q %v, want the user's file", p, from, err)
	}
	// The environment, then the flag, come first.
	t.Setenv(EnvConfig, "/named/by/env.yaml")
	if p, from, err := Find(""); err != nil || p != "/named/by/env.yaml" || from != FromEnv {
		t.Errorf("Find = %q %q %v, want $%s", p, from, err, EnvConfig)
	}
	if p, from, err := Find("flag.yaml"); err != nil || p != "flag.yaml" || from != FromFlag {
		t.Errorf("Find = %q %q %v, want the flag", p, from, err)
	}
	// A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
	t.Setenv(EnvConfig, "")
	t.Setenv("XDG_CONFIG_HOME", "rel")
	t.Setenv("HOME", xdg)
	if got, want := UserFile(), filepath.Join(xdg, ".config", "backplane", DefaultFile); got != want {
		t.Errorf("UserFile = %q, want %q", got, want)
	}
}

// TestCheckFoundRefusesAFileInsideItsWorkspace: a file that was found (the
// user's) and lies inside the workspace it names is refused, since the
// tools may have written it; named with --config or $BACKPLANE_CONFIG it
// is accepted; outside its workspace it is accepted either way.
func TestCheckFoundRefusesAFileInsideItsWorkspace(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	inside, err := Parse([]byte("workspace: ..\n"), filepath.Join(ws, "conf", DefaultFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := inside.CheckFound(FromUserDir); err == nil || !strings.Contains(err.Error(), "inside its own workspace") ||
		!strings.Contains(err.Error(), "--config") {
		t.Errorf("CheckFound(found) = %v, want a refusal naming --config", err)
	}
	// The default workspace is the file's own folder: inside too.
	def, err := Parse([]byte("policy: []\n"), filepath.Join(dir, DefaultFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := def.CheckFound(FromUserDir); err == nil {
		t.Error("a found file with the default workspace (its own folder) was accepted")
	}
	for _, from := range []string{FromFlag, FromEnv} {
		if err := inside.CheckFound(from); err != nil {
			t.Errorf("CheckFound(%s) = %v, want the named file accepted", from, err)
		}
	}
	outside, err := Parse([]byte("workspace: "+ws+"\n"), filepath.Join(dir, "cfg", DefaultFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := outside.CheckFound(FromUserDir); err != nil {
		t.Errorf("CheckFound for a file outside its workspace: %v", err)
	}
	// Through a symbolic link to the workspace: still inside.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	viaLink, err := Parse([]byte("workspace: "+link+"\n"), filepath.Join(ws, "conf", DefaultFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := viaLink.CheckFound(FromUserDir); err == nil {
		t.Error("a workspace named through a link hid that the file lies inside it")
	}
}

// TestToolsRunInTheWorkspace: a tool's program and an upstream server run
// in the workspace unless the tool's dir says otherwise, not in the
// configuration's folder (finding 2).
func TestToolsRunInTheWorkspace(t *testing.T) {
	c, err := Parse([]byte(`
workspace: /srv/ws
builtin: {enable: []}
tools:
  - name: a
    input_schema: {type: object}
    command: [pwd]
  - name: b
    input_schema: {type: object}
    command: [pwd]
    dir: sub
`), "/etc/bp/backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Tools[0].Dir != "/srv/ws" || c.Tools[1].Dir != "/etc/bp/sub" {
		t.Errorf("tool dirs %q %q, want the workspace and the named dir", c.Tools[0].Dir, c.Tools[1].Dir)
	}
}
