package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoFile reads a file of the repository by its path from the root.
func repoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeploySystemdUnit: deploy/systemd/backplane.service passes
// systemd-analyze verify with nothing to say (unknown keys and bad values
// are warnings there, so any output fails), its offline security review
// rates it at most 3.0 of 10, and it keeps what the sandbox needs.
func TestDeploySystemdUnit(t *testing.T) {
	unit := repoFile(t, "deploy/systemd/backplane.service")
	// What the sandbox needs, whether or not systemd is here to check it.
	for _, want := range []string{
		"\nSystemCallFilter=@system-service landlock_create_ruleset landlock_add_rule landlock_restrict_self seccomp\n",
		"\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n",
		"\nNoNewPrivileges=yes\n", "\nCapabilityBoundingSet=\n", "\nProtectSystem=strict\n",
		"\nReadWritePaths=/var/lib/backplane\n", "\nKillMode=mixed\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit is not verified (apt-get install systemd)")
	}
	// verify checks that ExecStart's program exists: the binary under
	// test stands in for /usr/local/bin/backplane.
	dir := t.TempDir()
	path := filepath.Join(dir, "backplane.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/backplane", binary)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=true", path).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for backplane\.service: (\d+\.\d)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v, no exposure level in:\n%s", err, out)
	}
	if string(m[1]) > "3.0" || len(m[1]) != 3 {
		t.Errorf("exposure level %s, want at most 3.0:\n%s", m[1], out)
	}
}
