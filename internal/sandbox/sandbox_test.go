package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestCheckState(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	state := filepath.Join(dir, "state")
	for _, tc := range []struct {
		write, read []string
		state       string
		inside      bool
	}{
		{[]string{ws}, nil, filepath.Join(state, ".backplane"), false},
		{[]string{dir}, nil, filepath.Join(state, ".backplane"), true},
		{[]string{ws}, []string{state}, filepath.Join(state, "backplane.yaml"), true},
		{[]string{ws}, nil, filepath.Join(ws, "audit.log"), true},
		{[]string{ws}, nil, ws + "-sibling/audit.log", false}, // a prefix is not a parent
		{[]string{ws}, nil, "/usr/local/etc/backplane.yaml", true},
	} {
		err := CheckState(&Policy{Write: tc.write, Read: tc.read}, []string{tc.state})
		if got := errors.Is(err, ErrStateInside); got != tc.inside {
			t.Errorf("write %v read %v state %s: %v, want inside=%v", tc.write, tc.read, tc.state, err, tc.inside)
		}
	}
}

func TestNetworkString(t *testing.T) {
	for _, tc := range []struct {
		n    Network
		want string
	}{
		{Network{}, "none"},
		{Network{All: true}, "all"},
		{Network{Ports: []uint16{443, 80}}, "tcp connect 443,80"},
	} {
		if got := tc.n.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.n, got, tc.want)
		}
	}
}

// The launcher refuses a spec it cannot read with its own exit status and
// a message, before anything runs.
func TestLauncherRefusesABadSpec(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the launcher is Linux only")
	}
	for _, spec := range []string{`{bad`, `{"policy":{"colour":"red"},"path":"/bin/true","argv":["true"]}`, `{"path":"/bin/true"}`} {
		f, err := os.CreateTemp(t.TempDir(), "spec")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(spec); err != nil {
			t.Fatal(err)
		}
		f.Seek(0, 0)
		cmd := exec.Command(os.Args[0], LauncherArg, "3")
		cmd.ExtraFiles = []*os.File{f}
		out, err := cmd.CombinedOutput()
		f.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitLauncher || !strings.HasPrefix(string(out), "backplane sandbox: launcher: policy:") {
			t.Errorf("spec %s: %v %q, want exit %d with the reason", spec, err, out, ExitLauncher)
		}
	}
	// A spec in argv (as before) is not read: the argument is a descriptor.
	out, err := exec.Command(os.Args[0], LauncherArg, `{"path":"/bin/true","argv":["true"]}`).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "descriptor") {
		t.Errorf("a spec in argv: %v %q, want a refusal", err, out)
	}
}
