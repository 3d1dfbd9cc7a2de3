package config

import (
	"path/filepath"
	"testing"
)

// FuzzParseOperators feeds the parser configurations around the operators
// and approver keys: it must never panic, and an accepted configuration
// keeps its promises (named operators with distinct names, tokens that are
// not callers').
// fuzzParse parses the seeds and the fuzzer's inputs as a configuration
// file: Parse must never panic, and check is run on every configuration it
// accepts (a refusal is an error, which is all the parser owes bad input).
func fuzzParse(f *testing.F, seeds []string, check func(t *testing.T, c *Config)) {
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, filepath.Join(dir, "backplane.yaml"))
		if err != nil {
			return
		}
		check(t, c)
	})
}

func FuzzParseOperators(f *testing.F) {
	fuzzParse(f, []string{
		"operators:\n  - name: ops\n    token: ops-secret\n",
		"operators:\n  - {name: a, token_env: HOME}\n  - {name: b, token_file: x}\n",
		"operators: []\npolicy:\n  - caller: alice\n    allow: [write]\n    approve: [write]\n    approvers: [ops, \"sec-*\"]\n    self_approve: true\n",
		"operators:\n  - name: a\n    token: same\nserve:\n  tokens: {same: alice}\n  approval_wait: 50s\n",
		"approvals: {max_pending: 3, expire: 1m}\n",
		"operators: {name: ops}\n",
		"operators:\n  - name: &a ops\n    token: *a\n",
	}, func(t *testing.T, c *Config) {
		seen := map[string]bool{}
		for _, o := range c.Operators {
			if o.Name == "" || seen[o.Name] {
				t.Fatalf("accepted operators %+v", c.Operators)
			}
			seen[o.Name] = true
			if _, ok := c.Serve.Tokens[o.Token]; ok && o.Token != "" {
				t.Fatalf("an operator token is also a caller's: %+v", c.Operators)
			}
		}
		if c.Approvals.MaxPending < 0 || c.Serve.ApprovalWait < 0 || c.Serve.ApprovalWait > MaxServeApprovalWait {
			t.Fatalf("accepted approvals %+v, wait %s", c.Approvals, c.Serve.ApprovalWait)
		}
	})
}
