package policy_test

import (
	"fmt"

	"github.com/agentbackplane/backplane/policy"
)

// Rules decide each call: deny wins over approve, approve over allow, and
// whatever no rule names is denied. A TOOL(PATTERN) entry looks at the
// call's main argument (bash's command, parsed: each part of a pipeline or
// list is decided alone, and the strictest part decides).
func Example() {
	rules, err := policy.NewRules([]policy.Rule{{
		Caller:  "agent",
		Allow:   []string{"read", "bash(git status)", "bash(git diff *)"},
		Approve: []string{"write", "bash(*)"},
		Deny:    []string{"read(**/.env)"},
	}})
	if err != nil {
		panic(err)
	}
	for _, r := range []policy.Request{
		{Caller: "agent", Tool: "read", Args: map[string]any{"path": "src/main.go"}},
		{Caller: "agent", Tool: "read", Args: map[string]any{"path": "config/.env"}},
		{Caller: "agent", Tool: "write", Args: map[string]any{"path": "notes.md", "content": "x"}},
		{Caller: "agent", Tool: "bash", Args: map[string]any{"command": "git status && git diff HEAD"}},
		{Caller: "agent", Tool: "bash", Args: map[string]any{"command": "git status; rm -rf build"}},
		{Caller: "stranger", Tool: "read", Args: map[string]any{"path": "src/main.go"}},
	} {
		d := rules.Decide(r)
		fmt.Printf("%-8s %-5s %-7s %s\n", r.Caller, r.Tool, d.Effect, d.Source)
	}
	// Output:
	// agent    read  allow   rule 1
	// agent    read  deny    rule 1
	// agent    write approve rule 1
	// agent    bash  allow   rule 1
	// agent    bash  approve rule 1
	// stranger read  deny
}
