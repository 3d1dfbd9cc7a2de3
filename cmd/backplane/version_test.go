package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionFlagMatchesVersionVerb(t *testing.T) {
	flag := runBinary(t, "", "--version")
	flag.wantCode(t, 0)
	verb := runBinary(t, "", "version")
	verb.wantCode(t, 0)
	if flag.stdout != verb.stdout || !strings.HasPrefix(flag.stdout, "backplane ") {
		t.Fatalf("--version printed %q, version printed %q", flag.stdout, verb.stdout)
	}
	js := runBinary(t, "", "version", "--json")
	js.wantCode(t, 0)
	var v versionInfo
	if err := json.Unmarshal([]byte(js.stdout), &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, js.stdout)
	}
	if v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Fatalf("version --json = %+v", v)
	}
	if !strings.Contains(verb.stdout, v.Version) {
		t.Fatalf("version %q does not name %q", verb.stdout, v.Version)
	}
}

// TestVersionNamesTheRevision builds from this git checkout with VCS stamping
// on and checks that the revision printed is the checkout's HEAD.
func TestVersionNamesTheRevision(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout with git on PATH (%v): the revision cannot be checked", err)
	}
	bin := filepath.Join(t.TempDir(), "backplane")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	if meta, err := exec.Command("go", "version", "-m", bin).Output(); err == nil && !strings.Contains(string(meta), "vcs.revision=") {
		t.Skip("go build recorded no VCS information here (seen in git worktrees): the revision cannot be checked")
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(head)); v.Revision != want {
		t.Fatalf("revision %q, want HEAD %q", v.Revision, want)
	}
	line, _ := exec.Command(bin, "--version").Output()
	if !strings.Contains(string(line), v.Revision[:12]) {
		t.Fatalf("--version %q does not name the revision", line)
	}
}

// TestCompletionScriptsParse checks each completion script with its own
// shell's syntax check where that shell is installed (bash always is here).
func TestCompletionScriptsParse(t *testing.T) {
	for _, sh := range []struct{ name, check string }{
		{"bash", "-n"}, {"zsh", "-n"}, {"fish", "--no-execute"},
	} {
		t.Run(sh.name, func(t *testing.T) {
			r := runBinary(t, "", "completion", sh.name)
			r.wantCode(t, 0)
			if !strings.Contains(r.stdout, "backplane") {
				t.Fatalf("completion %s printed no script:\n%s", sh.name, r.stdout)
			}
			path, err := exec.LookPath(sh.name)
			if err != nil {
				t.Skipf("%s is not installed: its script is printed but not syntax-checked", sh.name)
			}
			check := exec.Command(path, sh.check)
			check.Stdin = strings.NewReader(r.stdout)
			if out, err := check.CombinedOutput(); err != nil {
				t.Fatalf("%s %s rejects the script: %v\n%s", sh.name, sh.check, err, out)
			}
		})
	}
	runBinary(t, "", "completion", "powershell").wantCode(t, 2)
}
