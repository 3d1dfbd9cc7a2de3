package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// binary is the backplane command built once for the whole package: the
// tests run it as users do, through exit codes and streams.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "backplane-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	// Hermetic: no configuration of the person running the tests is ever
	// found (the user's folder is an empty one), and none is named.
	os.Unsetenv("BACKPLANE_CONFIG")
	xdg := filepath.Join(dir, "xdg-config")
	if err := os.Mkdir(xdg, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Setenv("XDG_CONFIG_HOME", xdg)
	binary = filepath.Join(dir, "backplane")
	// A copy of this test binary re-run inside a network namespace (the
	// coding agents' end-to-end tests) is given the binary already built:
	// building again there would cost minutes on a loaded machine.
	if b := os.Getenv(builtBinaryEnv); b != "" {
		binary = b
		return m.Run()
	}
	goTool := "go" // from PATH, as a developer runs it
	build := exec.Command(goTool, "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building backplane:", err)
		return 2
	}
	return m.Run()
}

// result is what one run of the binary produced.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the built command with stdin and args.
func runBinary(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("running backplane %v: %v", args, err)
		}
		code = exit.ExitCode()
	}
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// wantCode fails the test when the run did not exit with code.
func (r result) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

// wantUsageError checks the contract of exit 2: a message on stderr and
// nothing on stdout.
func (r result) wantUsageError(t *testing.T) {
	t.Helper()
	r.wantCode(t, exitUsage)
	if strings.TrimSpace(r.stderr) == "" {
		t.Errorf("exit 2 without a message on stderr")
	}
	if r.stdout != "" {
		t.Errorf("exit 2 wrote to stdout: %q", r.stdout)
	}
}

// writeFile writes content to a new file in the test's temp dir.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// examplePath locates a file of the repository's examples/ directory.
func examplePath(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join("..", "..", "examples", name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("example %s: %v", name, err)
	}
	return path
}

// decodeObject parses one JSON object, numbers kept as json.Number.
func decodeObject(t *testing.T, text string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, text)
	}
	if dec.More() {
		t.Fatalf("output holds more than one JSON value:\n%s", text)
	}
	return m
}

// errorFields are the members of the wire form of an error (D17).
var errorFields = []string{"class", "stage", "message", "path", "pointer", "schema_pointer", "keyword", "details"}

// checkErrorObject asserts the exact shape of an error object: every
// member present, strings where strings belong, details an object.
func checkErrorObject(t *testing.T, v any) map[string]any {
	t.Helper()
	e, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("error is %T, want an object: %v", v, v)
	}
	if got := sortedKeys(e); !slices.Equal(got, sorted(errorFields)) {
		t.Errorf("error members %v, want %v", got, sorted(errorFields))
	}
	for _, f := range errorFields[:7] {
		if _, ok := e[f].(string); !ok {
			t.Errorf("error member %s is %T, want a string", f, e[f])
		}
	}
	if _, ok := e["details"].(map[string]any); !ok {
		t.Errorf("details is %T (%v), want an object", e["details"], e["details"])
	}
	if e["message"] == "" {
		t.Errorf("error without a message: %v", e)
	}
	return e
}

// wantFields asserts members of an error object.
func wantFields(t *testing.T, e map[string]any, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if e[k] != v {
			t.Errorf("%s = %q, want %q (error %v)", k, e[k], v, e)
		}
	}
}

// wantSchemaPointer accepts the pointer of the offending keyword or of the
// schema object holding it: the contract allows either (D17).
func wantSchemaPointer(t *testing.T, e map[string]any, object, keyword string) {
	t.Helper()
	got := e["schema_pointer"]
	if got != object && got != object+"/"+keyword {
		t.Errorf("schema_pointer = %q, want %q or %q", got, object, object+"/"+keyword)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func TestRootHelp(t *testing.T) {
	r := runBinary(t, "", "--help")
	r.wantCode(t, exitOK)
	for _, want := range []string{"backplane", "unsupported_capability", "schema", "Exit codes"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help does not mention %q:\n%s", want, r.stdout)
		}
	}
}

func TestUnknownCommandsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"schema", "frobnicate"},
		{"schema", "check", "--no-such-flag", "x.json"},
		{"schema", "check"},                     // FILE missing
		{"schema", "check", "a.json", "b.json"}, // one FILE only
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			runBinary(t, "", args...).wantUsageError(t)
		})
	}
}

func TestVersion(t *testing.T) {
	r := runBinary(t, "", "version")
	r.wantCode(t, exitOK)
	if !strings.HasPrefix(r.stdout, "backplane ") {
		t.Errorf("version output %q", r.stdout)
	}
}

// TestRunInProcess covers the entry point tests and embedders share with
// main: the same exit codes without a process.
func TestRunInProcess(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"schema", "check", "--json", "-"}, strings.NewReader(`{"type":"object"}`), &out, &errOut)
	if code != exitOK || strings.TrimSpace(out.String()) != `{"ok":true}` {
		t.Errorf("supported schema: code %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	code = run([]string{"schema", "check", "-"}, strings.NewReader(`{"type":"object","enum":[1]}`), &out, &errOut)
	if code != exitNegative || !strings.Contains(out.String(), "enum") {
		t.Errorf("unsupported schema: code %d, stdout %q", code, out.String())
	}
	errOut.Reset()
	if code := run(nil, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Errorf("no arguments (help): code %d, stderr %q", code, errOut.String())
	}
}
