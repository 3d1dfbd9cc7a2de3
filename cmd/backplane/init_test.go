package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/config"
)

// firstHour is a fresh user's environment: a home of its own, no
// BACKPLANE_CONFIG, and a workspace folder.
type firstHour struct {
	home, cfgHome, ws string
}

func newFirstHour(t *testing.T) *firstHour {
	t.Helper()
	root := t.TempDir()
	f := &firstHour{home: filepath.Join(root, "home"), cfgHome: filepath.Join(root, "home", ".config"), ws: filepath.Join(root, "project")}
	for _, d := range []string{f.home, f.ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.ws, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *firstHour) cmd(args ...string) *exec.Cmd {
	c := exec.Command(binary, args...)
	c.Dir = f.ws
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "BACKPLANE_CONFIG" && k != "XDG_CONFIG_HOME" && k != "HOME" && k != "BACKPLANE_OPERATOR_TOKEN" {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, "HOME="+f.home, "XDG_CONFIG_HOME="+f.cfgHome)
	return c
}

func (f *firstHour) run(t *testing.T, args ...string) result {
	t.Helper()
	c := f.cmd(args...)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// init, then serve, then a call: in a new folder, with nothing else.
func TestInitThenServeThenCall(t *testing.T) {
	f := newFirstHour(t)

	// Before init: the missing configuration names where it looked and
	// what to do.
	r := f.run(t, "call", "--caller", "agent", "ls")
	r.wantCode(t, 2)
	for _, want := range []string{"--config", "backplane init", filepath.Join(f.cfgHome, "backplane", "backplane.yaml")} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("missing configuration: %q does not say %q", r.stderr, want)
		}
	}

	r = f.run(t, "init")
	r.wantCode(t, 0)
	file := filepath.Join(f.cfgHome, "backplane", "backplane.yaml")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatalf("init wrote no %s: %v\n%s", file, err, r.stderr)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600 (it holds tokens)", file, fi.Mode().Perm())
	}
	if !strings.Contains(r.stdout, "backplane serve") || !strings.Contains(r.stdout, "backplane call") {
		t.Errorf("init does not print the next commands:\n%s", r.stdout)
	}
	written, _ := os.ReadFile(file)

	// A second init never overwrites.
	f.run(t, "init").wantCode(t, 2)
	if again, _ := os.ReadFile(file); !bytes.Equal(again, written) {
		t.Error("a second init changed the file")
	}

	// A call without ARGS: {} is assumed; the file is found without --config.
	r = f.run(t, "call", "--caller", "agent", "--json", "ls")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, `"README"`) {
		t.Errorf("ls of the workspace: %s %s", r.stdout, r.stderr)
	}
	// A typo gets the closest name the caller may call.
	r = f.run(t, "call", "--caller", "agent", "lss")
	r.wantCode(t, 1)
	if !strings.Contains(r.stdout, "did you mean ls?") {
		t.Errorf("unknown tool: %s", r.stdout)
	}
	// write needs an operator's approval (the safe default).
	r = f.run(t, "call", "--caller", "agent", "--json", "write", `{"path":"x.txt","content":"x"}`)
	r.wantCode(t, 1)
	if !strings.Contains(r.stdout, `"approval_required"`) {
		t.Errorf("write without approval: %s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "x.txt")); err == nil {
		t.Error("write ran without an approval")
	}

	// serve accepts the file as written.
	c := f.cmd("serve", "--http", "127.0.0.1:0")
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	timeout := time.After(60 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited before serving:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, "serving MCP over streamable HTTP") {
				break wait
			}
		case <-timeout:
			t.Fatalf("serve did not start:\n%s", strings.Join(seen, "\n"))
		}
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("serve exited with %v after SIGTERM", err)
	}
}

func TestInitRefusesAFolderInsideTheWorkspace(t *testing.T) {
	f := newFirstHour(t)
	r := f.run(t, "init", "--dir", filepath.Join(f.ws, "conf"))
	r.wantCode(t, 2)
	if !strings.Contains(r.stderr, "inside the workspace") {
		t.Errorf("init --dir inside the workspace: %s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "conf", "backplane.yaml")); err == nil {
		t.Error("a configuration was written inside the workspace")
	}
}

// TestInitExampleServersChooseDraft2020: the starter configuration's
// example servers (commented out: they need npx and a download) say
// validator: draft2020-12 and what it means; uncommented, they load with
// that validator.
func TestInitExampleServersChooseDraft2020(t *testing.T) {
	f := newFirstHour(t)
	f.run(t, "init").wantCode(t, 0)
	file := filepath.Join(f.cfgHome, "backplane", "backplane.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, want := range []string{"# validator: draft2020-12 checks", "refuses every call", "backplane servers add"} {
		if !strings.Contains(text, want) {
			t.Errorf("the starter configuration does not say %q", want)
		}
	}
	// Uncomment the example block.
	var lines []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if l == "# servers:" {
			in = true
		}
		if in && strings.HasPrefix(l, "# ") {
			l = strings.TrimPrefix(l, "# ")
		}
		lines = append(lines, l)
	}
	if !in {
		t.Fatalf("no example servers:\n%s", text)
	}
	cfg, err := config.Parse([]byte(strings.Join(lines, "\n")), file)
	if err != nil {
		t.Fatalf("the example servers, uncommented: %v", err)
	}
	if len(cfg.Servers) != 2 {
		t.Fatalf("%d example servers, want 2", len(cfg.Servers))
	}
	for _, s := range cfg.Servers {
		if s.Validator != "draft2020-12" {
			t.Errorf("example server %s: validator %q, want draft2020-12", s.Name, s.Validator)
		}
	}
}
