package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The approvals issue's configuration block, verbatim, parses and means
// what it says.
func TestIssue10OperatorsExample(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "issue10-operators.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Operators) != 1 || c.Operators[0].Name != "ops" || c.Operators[0].Token != "ops-secret" {
		t.Errorf("operators: %+v", c.Operators)
	}
	if c.OperatorTokens()["ops-secret"] != "ops" {
		t.Errorf("operator tokens: %v", c.OperatorTokens())
	}
	r := c.Policy[0]
	if !slices.Equal(r.Approvers, []string{"ops"}) || r.SelfApprove || !slices.Equal(r.Approve, []string{"write", "bash"}) {
		t.Errorf("policy rule: %+v", r)
	}
}

func TestOperatorTokenSources(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ops.token"), []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BP_TEST_OPS_TOKEN", "env-token")
	path := filepath.Join(dir, "backplane.yaml")
	if err := os.WriteFile(path, []byte(`operators:
  - {name: a, token_env: BP_TEST_OPS_TOKEN}
  - {name: b, token_file: ops.token}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got := c.OperatorTokens()
	if got["env-token"] != "a" || got["file-token"] != "b" {
		t.Errorf("tokens %v", got)
	}
	if c.Operators[0].TokenFrom != "$BP_TEST_OPS_TOKEN" || c.Operators[1].TokenFrom != filepath.Join(dir, "ops.token") {
		t.Errorf("token sources %q %q", c.Operators[0].TokenFrom, c.Operators[1].TokenFrom)
	}
}

func TestOperatorsRefused(t *testing.T) {
	for name, c := range map[string]struct{ yaml, want string }{
		"no name":        {"operators:\n  - token: x\n", "needs a name"},
		"twice":          {"operators:\n  - {name: a, token: x}\n  - {name: a, token: y}\n", "listed twice"},
		"two sources":    {"operators:\n  - {name: a, token: x, token_env: HOME}\n", "one of token"},
		"unset env":      {"operators:\n  - {name: a, token_env: BP_TEST_SURELY_UNSET}\n", "not set"},
		"missing file":   {"operators:\n  - {name: a, token_file: nope.token}\n", "token_file"},
		"bad token":      {"operators:\n  - {name: a, token: \"a b\"}\n", "bearer token"},
		"caller's token": {"operators:\n  - {name: a, token: same}\nserve:\n  tokens: {same: alice}\n", "also a caller's token"},
		"unknown key":    {"operators:\n  - {name: a, password: x}\n", "password"},
		"bad approvers":  {"policy:\n  - {caller: a, allow: [x], approvers: [\"[\"]}\n", "bad pattern"},
		"self_approve":   {"policy:\n  - {caller: a, allow: [x], self_approve: yes please}\n", "self_approve"},
		"long wait":      {"serve:\n  approval_wait: 2m\n", "50s"},
		"long call wait": {"approvals:\n  wait: 51s\n", "50s"},
		"max_pending":    {"approvals:\n  max_pending: 0\n", "max_pending"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "backplane.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

// The README's configuration block (the one listing every key) parses.
func TestReadmeConfigBlock(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "The keys, all optional")
	if !ok {
		t.Skip("the README no longer lists the keys")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("no yaml block after \"The keys, all optional\"")
	}
	t.Setenv("BACKPLANE_OPS_TOKEN", "ops-token")
	t.Setenv("NOTE_LOG", "/dev/null")
	path := filepath.Join(t.TempDir(), "backplane.yaml")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("the README's configuration: %v", err)
	}
	if c.OperatorTokens()["ops-token"] != "ops" || c.Approvals.MaxPending != 16 {
		t.Errorf("operators %+v, approvals %+v", c.Operators, c.Approvals)
	}
}
