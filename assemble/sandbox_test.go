package assemble

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/config"
	"github.com/agentbackplane/backplane/internal/sandbox"
)

// The state inside the workspace: auto runs unsandboxed and says why,
// true refuses to start; the state beside it: sandboxed.
func TestSandboxStateInsideTheWorkspace(t *testing.T) {
	if st := sandbox.Probe(); !st.Available {
		t.Skip("the kernel cannot sandbox: " + st.Reason)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		yaml      string
		sandboxed bool
		refused   bool
	}{
		{"workspace: .", false, false},
		{"workspace: .\nsandbox: {enable: true}", false, true},
		{"workspace: .\nsandbox: {enable: required}", false, true},
		{"workspace: ws", true, false}, // ws is below the state folder: its grant holds no state
		{"workspace: ws\nsandbox: {write: [.]}", false, false},
		{"workspace: ws\nsandbox: {enable: true, read: [.backplane]}", false, true},
	} {
		c, err := config.Parse([]byte(tc.yaml), filepath.Join(dir, "backplane.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		d, err := sandboxFor(c, kindBash, nil)
		switch {
		case tc.refused:
			if !errors.Is(err, sandbox.ErrStateInside) {
				t.Errorf("%q: %v, want a refusal", tc.yaml, err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.sandboxed:
			if d.Policy == nil {
				t.Errorf("%q: unsandboxed (%s), want sandboxed", tc.yaml, d.Note)
			}
		case d.Policy != nil || !strings.Contains(d.Note, "inside"):
			t.Errorf("%q: %+v, want unsandboxed with the reason", tc.yaml, d)
		}
	}
}

// TestSandboxRequiredUnixSocketStore: where the kernel cannot keep
// sandboxed tools from Unix sockets, `required` with a store behind one
// refuses to start unless the operator accepts it; where it can, it
// starts.
func TestSandboxRequiredUnixSocketStore(t *testing.T) {
	base := `store: postgres:///bp?host=/var/run/postgresql
workspace: /srv/ws
sandbox:
  enable: required
`
	noFilter := sandbox.Status{ABI: 7, Available: true, UnixReason: "no seccomp here"}
	filter := sandbox.Status{ABI: 7, Available: true, UnixSockets: true}
	for _, tc := range []struct {
		extra   string
		st      sandbox.Status
		refused bool
	}{
		{"", noFilter, true},
		{"  allow_unix_sockets: true\n", noFilter, false},
		{"", filter, false},
	} {
		c, err := config.Parse([]byte(base+tc.extra), "/srv/state/backplane.yaml")
		if err != nil {
			t.Fatal(err)
		}
		d, err := decideSandbox(c, kindBash, nil, tc.st)
		if refused := err != nil; refused != tc.refused {
			t.Errorf("%q %+v: %v, want refused=%v", tc.extra, tc.st, err, tc.refused)
		}
		if err != nil && (!strings.Contains(err.Error(), "allow_unix_sockets") || !strings.Contains(err.Error(), "no seccomp here")) {
			t.Errorf("the refusal does not say why or how to accept: %v", err)
		}
		if err == nil && d.Policy == nil {
			t.Errorf("%q: not sandboxed: %s", tc.extra, d.Note)
		}
	}
	// The setting is the top level's alone.
	c, err := config.Parse([]byte(base+"tools:\n  - name: t\n    input_schema: {type: object}\n    command: [\"true\"]\n    sandbox: {allow_unix_sockets: true}\n"), "/srv/state/backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decideSandbox(c, kindCommand, c.Tools[0].Sandbox, filter); err == nil || !strings.Contains(err.Error(), "top-level") {
		t.Errorf("a tool's allow_unix_sockets: %v, want a refusal", err)
	}
}
