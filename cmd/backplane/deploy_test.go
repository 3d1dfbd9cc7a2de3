package main

import (
	"bufio"
	"debug/elf"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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

// TestDeployStaticBinary: the binary the image holds builds with
// CGO_ENABLED=0 into an executable with no loader and no shared
// libraries (scratch has neither), and that binary serves the example
// configuration and answers /healthz.
func TestDeployStaticBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "backplane-static")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the static build names a program interpreter (dynamic loader)")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the static build needs shared libraries %v", libs)
	}
	f.Close()
	if ldd, err := exec.LookPath("ldd"); err == nil {
		out, _ := exec.Command(ldd, bin).CombinedOutput()
		if !strings.Contains(string(out), "not a dynamic executable") && !strings.Contains(string(out), "statically linked") {
			t.Errorf("ldd %s: %s", bin, out)
		}
	}

	// examples/serve.yaml, where its relative paths (workspace .., the
	// state ../../backplane-example-state) land inside the test's folder.
	ex := filepath.Join(dir, "repo", "examples")
	if err := os.MkdirAll(ex, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ex, "serve.yaml"), []byte(repoFile(t, "examples/serve.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	g := newGWDir(t, "")
	g.dir = filepath.Join(dir, "repo")
	cmd := exec.Command(bin, "serve", "--config", filepath.Join(ex, "serve.yaml"), "--http", "127.0.0.1:0")
	cmd.Env, cmd.Dir = g.env, g.dir
	p := startProc(t, cmd, listenLine, "http://")
	code, body := httpGet(t, p.base+"/healthz", "")
	if code != http.StatusOK || !strings.Contains(body, `"ok":true`) {
		t.Errorf("/healthz of the static build: %d %s\n%s", code, body, p.log())
	}
	if err := p.stop(t); err != nil {
		t.Errorf("serve's exit: %v\n%s", err, p.log())
	}
}

// startProc starts cmd, a serve, and waits for the line re matches (the
// listener's address, its first group): base is scheme+address.
func startProc(t *testing.T, cmd *exec.Cmd, re *regexp.Regexp, scheme string) *serveProc {
	t.Helper()
	p := &serveProc{cmd: cmd, exited: make(chan struct{})}
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
	})
	select {
	case a := <-addr:
		p.base = scheme + a
	case <-p.exited:
		t.Fatalf("serve exited before listening:\n%s", p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not say where it listens:\n%s", p.log())
	}
	return p
}
