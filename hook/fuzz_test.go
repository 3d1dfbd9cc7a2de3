package hook_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/hook"
)

// allowAll decides every call allowed: the fuzz is about the parsers and
// the mapping, which must never panic and must deny what they cannot read.
type allowAll struct{}

func (allowAll) Decide(context.Context, gateway.DecideRequest) (*gateway.DecideResult, error) {
	return &gateway.DecideResult{CallID: "call_x"}, nil
}

func FuzzEvaluate(f *testing.F) {
	ws := f.TempDir()
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		var agent uint8
		switch {
		case strings.HasPrefix(filepath.Base(name), "codex"):
			agent = 1
		case strings.HasPrefix(filepath.Base(name), "gemini"):
			agent = 2
		}
		f.Add(strings.ReplaceAll(string(b), "$WS", ws), agent)
	}
	f.Add(`{"hook_event_name":"PreToolUse","tool_name":"MultiEdit","cwd":"`+ws+`","tool_input":{"file_path":"a","edits":[{}]}}`, uint8(0))
	opts := &hook.Options{Caller: "agent", MapOptions: hook.MapOptions{Workspace: ws,
		MCPTool: func(s, t string) (string, bool) { return s + "." + t, s == "demo" }}}
	f.Fuzz(func(t *testing.T, in string, which uint8) {
		agent := hook.Agents[int(which)%len(hook.Agents)]
		v, err := hook.Evaluate(context.Background(), agent, []byte(in), allowAll{}, opts)
		if err != nil && v.Outcome != hook.Deny {
			t.Fatalf("error %v with verdict %s, want deny", err, v.Outcome)
		}
		if v.Outcome == hook.Allow && len(v.CallIDs) == 0 {
			t.Fatal("allowed without a decision")
		}
		if _, err := hook.Output(agent, v, hook.PendingDeny); err != nil {
			t.Fatalf("Output: %v", err)
		}
	})
}

func FuzzPatchFiles(f *testing.F) {
	f.Add("*** Begin Patch\n*** Add File: a.txt\n+hi\n*** Update File: b.go\n*** Move to: c.go\n@@\n-x\n+y\n*** End of File\n*** Delete File: d\n*** End Patch\n")
	f.Add("*** Begin Patch\r\n*** End of File\r\n*** End Patch")
	f.Fuzz(func(t *testing.T, text string) {
		files, err := hook.PatchFiles(text)
		if err == nil && len(files) == 0 {
			t.Fatal("no error and no file")
		}
		for _, fl := range files {
			if strings.TrimSpace(fl.Path) == "" {
				t.Fatalf("an empty path in %q", text)
			}
		}
	})
}
