package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/internal/sandbox"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
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

// TestDeployContainerImage builds the image with scripts/image and runs
// it as docs/deploy.md says: the default configuration, a TLS pair made
// by the test's CA mounted at /etc/backplane/tls, tokens in the
// environment, the state in a named volume, with what the Helm chart's
// securityContext imposes too (a read-only root, no capabilities,
// no_new_privs). /readyz answers, a tools/call over https succeeds, the
// process runs as uid 65532, and the journal survives a restart of the
// container.
//
// Podman runs with a store of the test's own (--root, --runroot and
// --tmpdir in a temp folder, the vfs driver, which needs no mounts), so
// that concurrent runs (two CI runs on one machine) do not share images,
// containers or locks; cgroupfs, as no systemd runs here; events in a
// file, as there is no journald. BACKPLANE_TEST_PODMAN adds flags before
// the verb, BACKPLANE_TEST_PODMAN_RUN flags of podman run. Under CI
// (CI set) a Podman that cannot run a container fails the test; elsewhere
// it skips, quoting Podman's error.
func TestDeployContainerImage(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman is not installed: the image is not built (apt-get install podman runc)")
	}
	if testing.Short() {
		t.Skip("-short: building the image takes a minute")
	}
	cantRun := t.Skipf
	if os.Getenv("CI") != "" {
		cantRun = t.Fatalf
	}
	// A short folder: conmon's attach socket lives under the runroot, and
	// a Unix socket's path is at most 107 bytes.
	store, err := os.MkdirTemp("", "bpimg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(store) })
	global := append([]string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"),
		"--tmpdir", filepath.Join(store, "tmp"), "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs",
		"--events-backend", "file"}, strings.Fields(os.Getenv("BACKPLANE_TEST_PODMAN"))...)
	pm := func(args ...string) (string, error) {
		out, err := exec.Command(podman, append(slices.Clone(global), args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := pm("info"); err != nil {
		cantRun("podman does not work here: %v\n%s", err, out)
	}
	tag := fmt.Sprintf("localhost/backplane:test-%d", os.Getpid())
	image := exec.Command(filepath.Join("..", "..", "scripts", "image"), tag)
	// scripts/image runs plain podman: give it the same flags through a
	// wrapper.
	wrapper := filepath.Join(store, "podman")
	script := "#!/bin/sh\nexec " + podman + " " + strings.Join(global, " ") + ` "$@"` + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	image.Env = append(os.Environ(), "PODMAN="+wrapper)
	if out, err := image.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, out)
	}
	t.Cleanup(func() { pm("rmi", "-f", tag) })
	// Podman gives a root container's process RLIMIT_NOFILE and
	// RLIMIT_NPROC of 1048576; where the machine's hard limits are lower
	// runc cannot set them ("error setting rlimit type 7: operation not
	// permitted"). What serve needs is far less.
	run := append(rlimitFlags(), strings.Fields(os.Getenv("BACKPLANE_TEST_PODMAN_RUN"))...)
	// The chart's securityContext: readOnlyRootFilesystem (/tmp an
	// emptyDir), capabilities drop ALL, allowPrivilegeEscalation false.
	run = append(run, "--read-only", "--tmpfs", "/tmp:rw,size=64m,mode=1777", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges")
	if out, err := pm(append(append([]string{"run", "--rm"}, run...), tag, "--version")...); err != nil {
		cantRun("podman cannot run a container here: %v\n%s", err, out)
	} else if !strings.Contains(out, "backplane") {
		t.Fatalf("backplane --version in the image: %s", out)
	}
	containerSandbox(t, pm, run, tag)

	ca := newTestCA(t, "test server CA")
	tlsDir := t.TempDir()
	c, k := ca.issue(t, 100, "backplane", true)
	for name, b := range map[string][]byte{"tls.crt": c, "tls.key": k} {
		// Readable by the image's uid: a test's stand-in for a Secret
		// volume (whose files are 0644 unless told otherwise).
		if err := os.WriteFile(filepath.Join(tlsDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(tlsDir, 0o755)
	name := fmt.Sprintf("backplane-test-%d", os.Getpid())
	volume := name + "-state"
	if out, err := pm("volume", "create", volume); err != nil {
		t.Fatalf("podman volume create: %v\n%s", err, out)
	}
	t.Cleanup(func() { pm("rm", "-f", "-t", "0", name); pm("volume", "rm", "-f", volume) })
	args := append([]string{"run", "-d", "--name", name, "-p", "127.0.0.1::8787",
		"-v", tlsDir + ":/etc/backplane/tls:ro", "-v", volume + ":/var/lib/backplane",
		"-e", "BACKPLANE_AGENT_TOKEN=agent-token-1", "-e", "BACKPLANE_OPERATOR_TOKEN=ops-token-1"}, run...)
	if out, err := pm(append(args, tag)...); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	logs := func() string { out, _ := pm("logs", name); return out }
	hc := &http.Client{Transport: tlsClient(ca, nil), Timeout: 10 * time.Second}
	// base waits for the container's /readyz over https and returns its
	// address (the host port may change at a restart).
	base := func() string {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the container's /readyz did not answer 200 within 90s:\n%s", logs())
			}
			port, err := pm("port", name, "8787/tcp")
			if err != nil || !strings.HasPrefix(port, "127.0.0.1:") {
				continue
			}
			b := "https://" + strings.Fields(port)[0]
			if resp, err := hc.Get(b + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return b
				}
			}
		}
	}
	p := &serveProc{base: base()}
	if !strings.Contains(logs(), "no TLS proxy is needed") {
		t.Errorf("serve beyond loopback with TLS does not say that no proxy is needed:\n%s", logs())
	}

	// The process runs as the image's uid, not root.
	pid, err := pm("inspect", "-f", "{{.State.Pid}}", name)
	if err != nil {
		t.Fatalf("podman inspect: %v\n%s", err, pid)
	}
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("the container's process status: %v", err)
	}
	for _, re := range []string{`(?m)^Uid:\s+65532\s+65532\s`, `(?m)^Gid:\s+65532\s`, `(?m)^NoNewPrivs:\s+1$`, `(?m)^CapEff:\s+0+$`} {
		if !regexp.MustCompile(re).Match(status) {
			t.Errorf("the container's serve: no %s in its status:\n%s", re, status)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "go-image-test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{tlsClient(ca, nil), "agent-token-1"}}}, sessionEra)
	if err != nil {
		t.Fatalf("connect over https: %v\n%s", err, logs())
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ls", Arguments: map[string]any{"path": "."}})
	cs.Close()
	if err != nil || res.IsError {
		t.Fatalf("ls in the container: %v %+v\n%s", err, res, logs())
	}

	journal := func() []any {
		t.Helper()
		out, err := pm("exec", name, "/usr/local/bin/backplane", "journal", "list", "--json", "--config", "/etc/backplane/backplane.yaml")
		if err != nil {
			t.Fatalf("journal list in the container: %v\n%s", err, out)
		}
		m := decodeObject(t, out)
		list, _ := m["intents"].([]any)
		return list
	}
	before := journal()
	if len(before) != 1 || before[0].(map[string]any)["caller"] != "agent" || before[0].(map[string]any)["tool"] != "ls" {
		t.Fatalf("the journal after one ls: %v", before)
	}
	if out, err := pm("restart", "-t", "20", name); err != nil {
		t.Fatalf("podman restart: %v\n%s", err, out)
	}
	if pid2, err := pm("inspect", "-f", "{{.State.Pid}}", name); err != nil || pid2 == pid {
		t.Errorf("after podman restart the container's process is %s (%v), before %s", pid2, err, pid)
	}
	base()
	after := journal()
	if len(after) != 1 || after[0].(map[string]any)["call_id"] != before[0].(map[string]any)["call_id"] {
		t.Errorf("the journal after a restart: %v, want %v", after, before)
	}
}

// docBlock is the body of the first fenced block of docs/deploy.md
// opened with "```"+lang after the line holding after.
func docBlock(t *testing.T, after, lang string) string {
	t.Helper()
	doc := repoFile(t, "docs/deploy.md")
	i := strings.Index(doc, after)
	if i < 0 {
		t.Fatalf("docs/deploy.md has no %q", after)
	}
	rest := doc[i:]
	j := strings.Index(rest, "\n```"+lang+"\n")
	if j < 0 {
		t.Fatalf("docs/deploy.md: no ```%s block after %q", lang, after)
	}
	body := rest[j+len("\n```"+lang+"\n"):]
	k := strings.Index(body, "\n```\n")
	if k < 0 {
		t.Fatalf("docs/deploy.md: the block after %q is never closed", after)
	}
	return body[:k+1]
}

// TestDeployDocTLS: the TLS section of docs/deploy.md as written: its
// certificate block runs, and its configuration serves https with that
// certificate (with a client CA of the test's, which the section leaves
// to the reader, and --http for a free port).
func TestDeployDocTLS(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed: the guide's certificate block cannot run")
	}
	yaml := docBlock(t, "## TLS in serve", "yaml")
	script := docBlock(t, "<!-- run: tls -->", "sh")
	g := newGWDir(t, strings.Replace(yaml, "serve:\n", "serve:\n  tokens: {\"alice-token\": alice}\n", 1)+"policy:\n  - caller: carol\n    allow: [ls]\n")
	sh := exec.Command("sh", "-e", "-c", script)
	sh.Dir, sh.Env = g.dir, g.env
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the guide's certificate block: %v\n%s", err, out)
	}
	clients := newTestCA(t, "test client CA")
	replaceFile(t, filepath.Join(g.dir, "tls", "clients.crt"), clients.pem)
	p := startProc(t, g.command("", "serve", "--http", "127.0.0.1:0"), tlsListenLine, "https://")

	crt, err := os.ReadFile(filepath.Join(g.dir, "tls", "server.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(crt) {
		t.Fatal("tls/server.crt holds no certificate")
	}
	carol := clients.clientCert(t, 5, "carol")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &carol, nil }}}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := hc.Get(p.base + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over https with the guide's certificate: %v %v\n%s", resp, err, p.log())
	}
	resp.Body.Close()
	// carol's certificate is her token: /mcp takes the request (a ping
	// without a session is the SDK's to answer, not a 401).
	req, _ := http.NewRequest(http.MethodPost, p.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		t.Errorf("carol's certificate: 401, want her request taken\n%s", p.log())
	}
}

// rlimitFlags are podman run's --ulimit flags for open files and
// processes: 4096 each, or this process's hard limit when lower.
func rlimitFlags() []string {
	var flags []string
	for _, l := range []struct {
		name     string
		resource int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"nproc", unix.RLIMIT_NPROC}} {
		n := uint64(4096)
		var r unix.Rlimit
		if unix.Getrlimit(l.resource, &r) == nil && r.Max < n {
			n = r.Max
		}
		flags = append(flags, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	return flags
}

// containerSandboxConfig has the image's backplane run as a command tool
// with the sandbox required, reading a file outside its grants: the
// image's configuration, which uid 65532 can read.
const containerSandboxConfig = `workspace: /var/lib/backplane/workspace
store: /var/lib/backplane/state
sandbox: {enable: required}
tools:
  - name: confined
    description: reads a file outside its grants
    input_schema: {type: object}
    command: [/usr/local/bin/backplane, schema, check, /etc/backplane/backplane.yaml]
policy:
  - caller: agent
    allow: [confined]
`

// containerSandbox: under the security context the chart sets (the run
// flags), with Podman's default seccomp profile, the sandbox confines a
// tool in the container: Landlock refuses it a file the container's user
// can read. Where this machine cannot sandbox outside a container either,
// there is nothing to compare and the check is left out.
func containerSandbox(t *testing.T, pm func(...string) (string, error), run []string, tag string) {
	t.Helper()
	if st := sandbox.Probe(); !st.Available {
		t.Logf("the sandbox in the container is not checked: this machine cannot sandbox (%s)", st.Reason)
		return
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "backplane.yaml"), []byte(containerSandboxConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	args := append(append([]string{"run", "--rm", "-v", dir + ":/etc/backplane/sandbox:ro"}, run...),
		tag, "call", "--config", "/etc/backplane/sandbox/backplane.yaml", "--caller", "agent", "confined", "{}")
	out, _ := pm(args...)
	if !strings.Contains(out, "open /etc/backplane/backplane.yaml: permission denied") {
		t.Errorf("a sandboxed tool in the container, with the sandbox required, was not refused the image's configuration:\n%s", out)
	}
}
