package main

import (
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbackplane/backplane/internal/sandbox"
)

// attemptTool runs the shell snippet in its "c" argument through python
// and bash: a command tool whose process does what a bash call does.
const attemptTool = `  - name: attempt
    description: Run a shell snippet.
    input_schema: {type: object, properties: {c: {type: string}}, required: [c]}
    command: [/usr/bin/python3, -c, "import json,sys,subprocess; a=json.load(sys.stdin); r=subprocess.run(['bash','-c',a['c']],capture_output=True,text=True); print(json.dumps({'rc':r.returncode,'out':r.stdout,'err':r.stderr}))"]
    dir: %[1]s
    timeout: 60s
`

const sandboxConfig = `store: .backplane
workspace: %[1]s
log: {file: audit.log}
policy:
  - caller: alice
    allow: ["*"]
serve:
  tokens: {"alice-token": alice}
builtin:
  enable: [bash]
  safety: {bash: {requires_approval: false}}
sandbox:
  enable: %[2]s
  limits: {processes: 64}
tools:
` + attemptTool

// sandboxLayout is a gateway whose state (configuration, store, audit log)
// lies in state/, beside the workspace ws/ and a folder outside both.
type sandboxLayout struct {
	*gwDir
	ws, outside string
}

func newSandboxLayout(t *testing.T, enable string) *sandboxLayout {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the command tool of these tests runs /usr/bin/python3, absent here")
	}
	base := t.TempDir()
	l := &sandboxLayout{ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	state := filepath.Join(base, "state")
	for _, d := range []string{l.ws, l.outside, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(l.ws, "a.txt"), []byte("hello sandbox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := newGWDir(t, fmt.Sprintf(sandboxConfig, l.ws, enable))
	// The configuration must sit in state/: move it there.
	if err := os.Rename(filepath.Join(g.dir, "backplane.yaml"), filepath.Join(state, "backplane.yaml")); err != nil {
		t.Fatal(err)
	}
	g.dir = state
	for i, kv := range g.env {
		if strings.HasPrefix(kv, "BACKPLANE_CONFIG=") {
			g.env[i] = "BACKPLANE_CONFIG=" + filepath.Join(state, "backplane.yaml")
		}
	}
	l.gwDir = g
	return l
}

// countingListener accepts loopback TCP connections and counts them.
func countingListener(t *testing.T) (port int, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port, countAccepts(ln)
}

// countAccepts accepts ln's connections until it is closed, counting them.
func countAccepts(ln net.Listener) *atomic.Int64 {
	accepted := &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return accepted
}

func requireSandbox(t *testing.T) {
	t.Helper()
	if st := sandbox.Probe(); !st.Available {
		t.Skip("the kernel cannot sandbox: " + st.Reason)
	}
}

// callShell runs snippet through tool (bash or attempt) and returns the
// text of the result.
func callShell(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool, snippet string) string {
	t.Helper()
	key := "command"
	if tool == "attempt" {
		key = "c"
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{key: snippet}})
	if err != nil {
		t.Fatalf("%s %q: %v", tool, snippet, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func connectServe(t *testing.T, p *serveProc) (*mcp.ClientSession, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	client := mcp.NewClient(&mcp.Implementation{Name: "sandbox-test", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   p.base + "/mcp",
		HTTPClient: &http.Client{Transport: tokenTransport("alice-token")},
	}, sessionEra)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, p.log())
	}
	t.Cleanup(func() { cs.Close() })
	return cs, ctx
}

// TestSandboxServeRefusals: a sandboxed bash and a sandboxed command tool,
// called through a real serve, try what the sandbox must refuse; each
// attempt prints LEAKED only if it succeeded.
func TestSandboxServeRefusals(t *testing.T) {
	requireSandbox(t)
	l := newSandboxLayout(t, "required")
	secret := "s3cret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	l.env = append(l.env, "BACKPLANE_TEST_SECRET="+secret)
	port, accepted := countingListener(t)
	p := startServe(t, l.gwDir)
	cs, ctx := connectServe(t, p)
	gw := p.cmd.Process.Pid
	state := l.dir

	attempts := map[string]string{
		"read the configuration": fmt.Sprintf(`cat %s/backplane.yaml && echo LEAKED`, state),
		"read the database":      fmt.Sprintf(`for f in %s/.backplane/*; do head -c 16 "$f" && echo LEAKED; done`, state),
		"list the store":         fmt.Sprintf(`ls %s/.backplane && echo LEAKED`, state),
		"read the audit log":     fmt.Sprintf(`head -c 16 %s/audit.log && echo LEAKED`, state),
		"write outside":          fmt.Sprintf(`echo x > %s/w.txt && echo LEAKED`, l.outside),
		"connect to loopback":    fmt.Sprintf(`echo hi > /dev/tcp/127.0.0.1/%d && echo LEAKED`, port),
		"signal the gateway":     fmt.Sprintf(`kill -0 %d && echo LEAKED`, gw),
		"read its environment":   fmt.Sprintf(`cat /proc/%d/environ && echo LEAKED`, gw),
		"list its fds":           fmt.Sprintf(`ls /proc/%d/fd && echo LEAKED`, gw),
		"read /etc/shadow":       `head -c 1 /etc/shadow && echo LEAKED`,
	}
	for _, tool := range []string{"bash", "attempt"} {
		for name, snippet := range attempts {
			out := callShell(t, ctx, cs, tool, snippet)
			if strings.Contains(out, "LEAKED") || strings.Contains(out, secret) {
				t.Errorf("%s could %s: %s", tool, name, out)
			}
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the loopback server accepted %d connections from sandboxed tools", n)
	}
	if _, err := os.Stat(filepath.Join(l.outside, "w.txt")); err == nil {
		t.Error("a file was written outside the workspace")
	}

	// The fork bomb is held by the process limit (64), and the gateway
	// answers afterwards.
	// Its output goes to a file (a straggler holding the command tool's
	// stdout would hold the call), and once it runs the shell forks no
	// more: it waits on a fifo and reads the file with builtins.
	bomb := `rm -f w.fifo; mkfifo w.fifo; bomb() { bomb | bomb & }; bomb >/dev/null 2>bomb.err & ` +
		`read -t 3 <> w.fifo; read -r -d '' e < bomb.err; [[ $e == *"Resource temporarily unavailable"* ]] && echo HELD; exit 0`
	for _, tool := range []string{"bash", "attempt"} {
		out := callShell(t, ctx, cs, tool, bomb)
		if !strings.Contains(out, "HELD") {
			t.Errorf("%s fork bomb: no fork was refused: %.400s", tool, out)
		}
	}
	if out := callShell(t, ctx, cs, "bash", "echo alive"); !strings.Contains(out, "alive") {
		t.Errorf("after the fork bombs: %s", out)
	}

	// The audit log says the calls were sandboxed, and how. serve writes
	// it in batches (every 200 ms): wait for the events.
	var data []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		data, err = os.ReadFile(filepath.Join(state, "audit.log"))
		if err == nil && strings.Contains(string(data), `"sandbox_rules"`) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(string(data), `"sandboxed":true`) || !strings.Contains(string(data), `"sandbox_rules"`) {
		t.Errorf("the audit log does not record the sandbox:\n%.2000s", data)
	}
}

// TestSandboxCallEveryday: everyday work in the workspace, through
// backplane call, by a sandboxed bash and a sandboxed command tool.
func TestSandboxCallEveryday(t *testing.T) {
	requireSandbox(t)
	l := newSandboxLayout(t, "required")
	snippet := `ls; cat a.txt; grep -c hello a.txt; echo written > new.txt; cat new.txt; ` +
		`printf '#!/bin/sh\necho script-ran\n' > s.sh; chmod +x s.sh; ./s.sh; ` +
		`if command -v git >/dev/null; then git init -q && git status --short | head -3 && echo git-ok; else echo git-ok; fi`
	for _, tool := range []string{"bash", "attempt"} {
		key := "command"
		if tool == "attempt" {
			key = "c"
		}
		args := fmt.Sprintf(`{%q:%q}`, key, snippet)
		r := l.run(t, "", "call", "--caller", "alice", tool, args)
		for _, want := range []string{"a.txt", "hello sandbox", "written", "script-ran", "git-ok"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s: %q missing from:\n%s\n%s", tool, want, r.stdout, r.stderr)
			}
		}
		os.RemoveAll(filepath.Join(l.ws, ".git"))
	}
}

// TestSandboxOffLeaks is the control: the same attempts without the
// sandbox succeed, so the refusals above are the sandbox's doing.
func TestSandboxOffLeaks(t *testing.T) {
	l := newSandboxLayout(t, "false")
	port, accepted := countingListener(t)
	snippet := fmt.Sprintf(`cat %s/backplane.yaml >/dev/null && echo LEAK1; echo x > %s/w.txt && echo LEAK2; echo hi > /dev/tcp/127.0.0.1/%d && echo LEAK3`,
		l.dir, l.outside, port)
	r := l.run(t, "", "call", "--caller", "alice", "bash", fmt.Sprintf(`{"command":%q}`, snippet))
	for _, want := range []string{"LEAK1", "LEAK2", "LEAK3"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("unsandboxed, %s missing: %s %s", want, r.stdout, r.stderr)
		}
	}
	if accepted.Load() == 0 {
		t.Error("unsandboxed bash did not reach the loopback server")
	}
}

// TestServeSIGKILLKillsToolProcesses: serve killed with SIGKILL while a
// bash call and a command tool run, each with a background child and a
// child that left the process group (setsid): within 2 seconds none of
// those processes is alive. Run without the sandbox (state inside the
// workspace) and with it.
func TestServeSIGKILLKillsToolProcesses(t *testing.T) {
	// The tokens (sleep's seconds) tell this run's processes from all
	// others by their command line; fixed ones also matched the processes
	// of the same test run at the same time by another test binary on the
	// machine, which then counted as survivors here and were killed by
	// this test's cleanup. A random base makes them this run's own.
	base := 100_000_000 + 4*mathrand.IntN(200_000_000)
	for i, enable := range []string{"false", "auto"} {
		t.Run("sandbox="+enable, func(t *testing.T) {
			// Without the sandbox's cgroup, a process that leaves the
			// group (setsid) is beyond reach: only the sandboxed run
			// starts one.
			escape := ""
			if enable == "auto" {
				requireSandbox(t)
				escape = "setsid sleep %[1]s & "
			}
			l := newSandboxLayout(t, enable)
			p := startServe(t, l.gwDir)
			cs, sessCtx := connectServe(t, p)
			// The calls never get their answers: their context ends
			// before the session closes (cleanups run last first), or
			// Close waits for the SDK to give up on the dead serve.
			ctx, cancelCalls := context.WithCancel(sessCtx)
			t.Cleanup(cancelCalls)
			bashTok, cmdTok := fmt.Sprint(base+2*i), fmt.Sprint(base+2*i+1)
			// Per tool: its bash (bash -c, or python's) and its sleeps,
			// two or three; a child bash forked and not yet executed as
			// sleep counts too (same command line).
			want := 2 * (1 + 3)
			if escape == "" {
				want = 2 * (1 + 2)
			}
			t.Cleanup(func() {
				for _, pid := range processesWith(bashTok, cmdTok) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			for tool, tok := range map[string]string{"bash": bashTok, "attempt": cmdTok} {
				key := map[string]string{"bash": "command", "attempt": "c"}[tool]
				snippet := fmt.Sprintf(`sleep %[1]s & `+escape+`sleep %[1]s; wait`, tok)
				// Its answer never comes: serve is killed.
				go cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{key: snippet}})
			}
			// The processes: every one whose command line holds a token.
			var pids []int
			deadline := time.Now().Add(30 * time.Second)
			for {
				pids = processesWith(bashTok, cmdTok)
				if len(pids) >= want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the tool processes did not all start (found %v):\n%s", pids, p.log())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-p.exited
			killed := time.Now()
			for {
				// Those seen before the kill and any started since.
				alive := append(aliveOf(pids), processesWith(bashTok, cmdTok)...)
				if len(alive) == 0 {
					break
				}
				if time.Since(killed) > 2*time.Second {
					t.Fatalf("2s after SIGKILL of serve these tool processes live: %v", describePids(slices.Compact(slices.Sorted(slices.Values(alive)))))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// processesWith returns the pids of live processes whose command line
// holds one of the tokens.
func processesWith(tokens ...string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, tok := range tokens {
			if strings.Contains(string(cmdline), tok) && !strings.Contains(string(cmdline), "go-build") {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// alive: the process exists and is not a zombie (a killed orphan that
// PID 1 does not reap stays one).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func aliveOf(pids []int) []int {
	var out []int
	for _, p := range pids {
		if alive(p) {
			out = append(out, p)
		}
	}
	return out
}

func describePids(pids []int) string {
	var b strings.Builder
	for _, p := range pids {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p))
		var pids []string
		for _, l := range strings.Split(string(cg), "\n") {
			if strings.Contains(l, ":pids:") || strings.Contains(l, ":memory:") {
				pids = append(pids, l)
			}
		}
		// stat: pid (comm) state ppid pgrp session ...
		fmt.Fprintf(&b, "%d %q stat %q cgroups %q; ", p, strings.ReplaceAll(string(cmdline), "\x00", " "), strings.TrimSpace(string(stat)), pids)
	}
	return b.String()
}

// TestSandboxServeEscape is issue 22's item 1 (with items 4 and 10)
// through a real serve: a program, compiled here and run by the built-in
// bash in bash's place (exec, so that its parent is the launcher), tries
// to ptrace its parent, read its memory, take its descriptors and reach a
// Unix socket by path. Every attempt fails; the socket's accept counter
// stays 0.
func TestSandboxServeEscape(t *testing.T) {
	requireSandbox(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc builds the escape program: " + err.Error())
	}
	l := newSandboxLayout(t, "required")
	prog := filepath.Join(l.ws, "escape")
	src, err := filepath.Abs("../../internal/sandbox/testdata/escape.c")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-O", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	sock := filepath.Join(l.outside, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := countAccepts(ln)
	p := startServe(t, l.gwDir)
	cs, ctx := connectServe(t, p)
	out := callShell(t, ctx, cs, "bash", "exec ./escape "+sock)
	for _, k := range []string{"ptrace attach", "process_vm_readv", "pidfd_getfd", "socket unix", "connect unix", "socket netlink", "socket packet"} {
		if !strings.Contains(out, k+": refused") {
			t.Errorf("%s from the sandboxed bash: not refused\n%s", k, out)
		}
	}
	if !strings.Contains(out, "socket inet (allowed): SUCCEEDED") {
		t.Errorf("the program did not run to its end:\n%s", out)
	}
	time.Sleep(50 * time.Millisecond)
	if n := accepted.Load(); n != 0 {
		t.Errorf("the Unix socket accepted %d connections from the sandboxed bash", n)
	}
	caps := callShell(t, ctx, cs, "bash", `while read -r k v; do case $k in Cap*) echo "$k $v";; esac; done </proc/self/status`)
	for _, k := range []string{"CapInh:", "CapPrm:", "CapEff:", "CapAmb:"} {
		if !strings.Contains(caps, k+" 0000000000000000") {
			t.Errorf("%s not empty in the sandboxed bash:\n%s", k, caps)
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(caps, "CapBnd: 0000000000000000") {
		t.Errorf("a root serve's sandboxed bash keeps a bounding set:\n%s", caps)
	}
}

// TestSandboxEscapeUnprivilegedGateway: the escape program of
// TestSandboxServeEscape, through backplane call run as uid 65534 (a
// gateway without capabilities or cgroups): every attempt fails there
// too, and the Unix socket, open to every user, accepts nothing.
func TestSandboxEscapeUnprivilegedGateway(t *testing.T) {
	requireSandbox(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the gateway as uid 65534")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc builds the escape program: " + err.Error())
	}
	// Everything under one folder uid 65534 owns (t.TempDir's folders
	// are 0700 root's), the binary included.
	base, err := os.MkdirTemp("", "backplane-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	ws, state, outside, xdg := filepath.Join(base, "ws"), filepath.Join(base, "state"), filepath.Join(base, "outside"), filepath.Join(base, "xdg")
	for _, d := range []string{ws, state, outside, xdg} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(base, "backplane")
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs("../../internal/sandbox/testdata/escape.c")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-O", "-o", filepath.Join(ws, "escape"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cfg := filepath.Join(state, "backplane.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(sandboxConfig, ws, "required")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(base, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(outside, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(sock, 0o777); err != nil { // only the sandbox keeps uid 65534 out
		t.Fatal(err)
	}
	accepted := countAccepts(ln)
	cmd := exec.Command(bin, "call", "--caller", "alice", "bash", fmt.Sprintf(`{"command":%q}`, "exec ./escape "+sock))
	cmd.Dir = state
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + base, "XDG_CONFIG_HOME=" + xdg, "BACKPLANE_CONFIG=" + cfg}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("backplane call as uid 65534: %v\n%s", err, out)
	}
	for _, k := range []string{"ptrace attach", "process_vm_readv", "pidfd_getfd", "socket unix", "connect unix", "socket netlink", "socket packet"} {
		if !strings.Contains(string(out), k+": refused") {
			t.Errorf("%s from the sandboxed bash of a uid 65534 gateway: not refused\n%s", k, out)
		}
	}
	if !strings.Contains(string(out), "socket inet (allowed): SUCCEEDED") {
		t.Errorf("the program did not run to its end:\n%s", out)
	}
	time.Sleep(50 * time.Millisecond)
	if n := accepted.Load(); n != 0 {
		t.Errorf("the Unix socket accepted %d connections", n)
	}
}
