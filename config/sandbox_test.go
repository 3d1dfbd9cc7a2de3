package config

import (
	"errors"
	"strings"
	"testing"
)

func TestSandboxSectionParses(t *testing.T) {
	src := `workspace: ../ws
sandbox:
  enable: required
  read: [ro]
  write: [/scratch]
  network: [443, 443, 80]
  limits: {cpu: 90s, memory: 1073741824, processes: 32, file_size: 1048576}
tools:
  - name: t
    input_schema: {type: object}
    command: ["true"]
    sandbox: {enable: false, network: true}
builtin:
  bash: {sandbox: {write: [cache]}}
servers:
  - name: s
    command: [srv]
    sandbox: {}
`
	c, err := Parse([]byte(src), "/srv/state/backplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sandbox
	if s.Enable != SandboxRequired || s.Read[0] != "/srv/state/ro" || s.Write[0] != "/scratch" {
		t.Errorf("top-level: %+v", s)
	}
	if s.Network == nil || s.Network.All || len(s.Network.Ports) != 2 || s.Network.Ports[0] != 443 || s.Network.Ports[1] != 80 {
		t.Errorf("network: %+v", s.Network)
	}
	if s.Limits != (SandboxLimits{CPUSeconds: 90, AddressSpace: 1 << 30, Processes: 32, FileSize: 1 << 20}) {
		t.Errorf("limits: %+v", s.Limits)
	}
	if o := c.Tools[0].Sandbox; o == nil || o.Enable != SandboxOff || !o.Network.All {
		t.Errorf("tool override: %+v", o)
	}
	if o := c.Builtin.BashSandbox; o == nil || o.Write[0] != "/srv/state/cache" {
		t.Errorf("bash override: %+v", o)
	}
	if c.Servers[0].Sandbox == nil {
		t.Error("the server's empty sandbox section (an opt-in) was lost")
	}
}

func TestSandboxSectionErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"sandbox: {enable: maybe}", "true, false, auto or required"},
		{"sandbox: {network: [0]}", "ports are 1 to 65535"},
		{"sandbox: {network: [70000]}", "ports are 1 to 65535"},
		{"sandbox: {network: yes please}", "true, false or a list"},
		{"sandbox: {limits: {cpu: 10ms}}", "at least 1s"},
		{"sandbox: {limits: {processes: 0}}", "between 1 and"},
		{"sandbox: {limits: {memory: -1}}", "positive"},
		{"sandbox: {limits: {threads: 3}}", `unknown key "threads"`},
		{"sandbox: {read: ['']}", "an empty path"},
		{"sandbox: {colour: red}", `unknown key "colour"`},
		{"servers: [{name: s, url: 'http://127.0.0.1:1/mcp', sandbox: {}}]", "sandbox applies to a command"},
	} {
		_, err := Parse([]byte(tc.yaml), "backplane.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "backplane.yaml:1") {
			t.Errorf("%s: error %v, want one at line 1 saying %q", tc.yaml, err, tc.want)
		}
	}
}

// FuzzSandboxSection: any sandbox section parses or is refused with a
// line, never a panic.
func FuzzSandboxSection(f *testing.F) {
	for _, s := range []string{
		"{enable: required, read: [a], write: [/b], network: [443], limits: {cpu: 1s, memory: 1, processes: 1, file_size: 1}}",
		"{network: true}", "{network: [0, 65536]}", "{enable: 1}", "[]", "{limits: {cpu: -1s}}", "{read: [&a x, *a]}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse([]byte("sandbox: "+s), "backplane.yaml")
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		if n := c.Sandbox.Network; n != nil {
			for _, p := range n.Ports {
				if p == 0 {
					t.Fatalf("port 0 accepted: %q", s)
				}
			}
		}
	})
}

// TestStoreUnixSocket: which PostgreSQL URLs reach the store over a Unix
// socket.
func TestStoreUnixSocket(t *testing.T) {
	t.Setenv("PGHOST", "")
	for store, unix := range map[string]bool{
		"postgres://u@db.internal:5432/bp":                     false,
		"postgres://127.0.0.1/bp?sslmode=disable":              false,
		"postgres:///bp":                                       true,
		"postgresql://u:pw@/bp":                                true,
		"postgres://u@/bp?host=/var/run/postgresql":            true,
		"postgres://%2Fvar%2Frun%2Fpostgresql/bp":              true,
		"postgres://db1,%2Ftmp/bp":                             true,
		"postgres://localhost/bp?host=%2Fvar%2Frun%2Fpostgres": true,
		"postgres://localhost/bp?host=db2":                     false,
		"/srv/state/.backplane":                                false,
	} {
		c := &Config{Store: store}
		if got := c.StoreUnixSocket() != ""; got != unix {
			t.Errorf("%s: over a Unix socket %v, want %v (%q)", store, got, unix, c.StoreUnixSocket())
		}
	}
	t.Setenv("PGHOST", "db.internal")
	if s := (&Config{Store: "postgres:///bp"}).StoreUnixSocket(); s != "" {
		t.Errorf("no host, PGHOST a TCP host: %q, want none", s)
	}
}
