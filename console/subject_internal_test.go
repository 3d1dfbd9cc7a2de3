package console

import (
	"encoding/json"
	"testing"
)

// TestSubjectReadsTheRecordedMainArg: a request's line shows the argument
// the tool's registration named as its main one, not the first of the
// usual members; a tool that names none falls back to those.
func TestSubjectReadsTheRecordedMainArg(t *testing.T) {
	args := json.RawMessage(`{"path":"notes/a.md","query":"TODO"}`)
	if got := subject(&Approval{Arguments: args, MainArg: "query"}); got != "TODO" {
		t.Errorf("with main argument query: %q, want TODO", got)
	}
	if got := subject(&Approval{Arguments: args}); got != "notes/a.md" {
		t.Errorf("without a main argument: %q, want the path", got)
	}
	if got := subject(&Approval{Arguments: args, Command: "ls -l", MainArg: "query"}); got != "ls -l" {
		t.Errorf("with a command: %q, want the command", got)
	}
}
