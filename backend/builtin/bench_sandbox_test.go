package builtin

import (
	"context"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/internal/sandbox"
	"github.com/agentbackplane/backplane/tool"
)

// benchBash calls the bash tool with a trivial command b.N times: what a
// call costs in process supervision, with or without the sandbox launcher.
func benchBash(b *testing.B, policy func(ws string) *sandbox.Policy) {
	ws := b.TempDir()
	opts := &Options{Workspace: ws}
	if policy != nil {
		if st := sandbox.Probe(); !st.Available {
			b.Skip("the kernel cannot sandbox: " + st.Reason)
		}
		opts.Bash.Sandbox = policy(ws)
	}
	set, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	bt, _ := set.Tool("bash")
	call := &tool.Call{Tool: "bash", Arguments: []byte(`{"command":"echo ok"}`)}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		res, err := bt.Backend.Invoke(ctx, call)
		if err != nil || res.IsError || !strings.Contains(string(res.Content), `"stdout":"ok\n"`) {
			b.Fatalf("%v %s", err, res.Content)
		}
	}
}

func BenchmarkBash(b *testing.B) { benchBash(b, nil) }

func BenchmarkSandboxedBash(b *testing.B) {
	benchBash(b, func(ws string) *sandbox.Policy {
		return &sandbox.Policy{Write: []string{ws}, Limits: sandbox.DefaultLimits}
	})
}
