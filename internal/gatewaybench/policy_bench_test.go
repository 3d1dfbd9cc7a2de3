package gatewaybench

import (
	"fmt"
	"testing"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
	"github.com/agentbackplane/backplane/policy"
)

// BenchmarkPolicy measures one policy decision (policy.Rules.Decide on
// arguments already decoded, as the gateway calls it) under issue 11's
// policy, behind 50 other callers' rules, for each kind of entry. Run it
// with BenchmarkGateway/callers=1 in one go to compare with a whole call:
//
//	go test ./internal/gatewaybench -run '^$' -bench 'Policy|Gateway/callers=1$' -benchtime 2s -count 3
func BenchmarkPolicy(b *testing.B) {
	var rules []policy.Rule
	for i := range 50 {
		rules = append(rules, policy.Rule{Caller: fmt.Sprintf("other-%d", i), Allow: []string{"read", "bash(ls *)"}})
	}
	rules = append(rules, policy.Rule{
		Caller:  "alice",
		Allow:   []string{"read", "ls", "glob", "grep", "bash(git status*)", "bash(go test *)"},
		Approve: []string{"write(docs/**)", "edit(docs/**)", "bash(*)"},
		Deny:    []string{"bash(*rm -rf*)", "read(**/.env)", "url_fetch(domain:internal.example)"},
		Conditions: []policy.Condition{
			{Effect: policy.EffectAllow, Tool: "note", If: `size(args.text) < 200 && !args.text.contains("password")`},
		},
	})
	r, err := policy.Compile(rules, &policy.Options{
		Workspace: []string{"/work/project"},
		MainArgs:  map[string]policy.MainArg{"note": {Field: "text", Kind: policy.KindText}},
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, tool, args string
		want             policy.Effect
	}{
		{"tool-name", "ls", `{"path":"src"}`, policy.EffectAllow},
		{"pattern", "write", `{"path":"/work/project/docs/guide/../api/intro.md","content":"x"}`, policy.EffectApprove},
		{"shell", "bash", `{"command":"git status --short && go test ./policy/ 2>&1 | head -n 50"}`, policy.EffectApprove},
		{"cel", "note", `{"text":"remember to update the changelog before the release"}`, policy.EffectAllow},
	} {
		b.Run(c.name, func(b *testing.B) {
			v, err := jsonstrict.Decode([]byte(c.args), nil)
			if err != nil {
				b.Fatal(err)
			}
			req := policy.Request{Caller: "alice", Tool: c.tool, Args: v}
			if d := r.Decide(req); d.Effect != c.want {
				b.Fatalf("%s: %s (%s), want %s", c.name, d.Effect, d.Reason, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				r.Decide(req)
			}
		})
	}
}
