package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/opsview"
	"github.com/agentbackplane/backplane/store"
)

// TestApprovalsShowResolvedPath: the operator deciding a request sees the
// file its path argument led to (the request is good for that file only),
// and nothing for a tool without one.
func TestApprovalsShowResolvedPath(t *testing.T) {
	var out bytes.Buffer
	writeApprovalView(&out, &opsview.Approval{Approval: store.Approval{ID: "apr_1", Tool: "write", ResolvedPath: "notes/f.txt"}})
	if !strings.Contains(out.String(), "resolves to: notes/f.txt\n") {
		t.Errorf("approvals show:\n%s\nwant the resolved path", out.String())
	}
	out.Reset()
	writeApprovalView(&out, &opsview.Approval{Approval: store.Approval{ID: "apr_2", Tool: "danger"}})
	if strings.Contains(out.String(), "resolves to") {
		t.Errorf("approvals show of a tool without a path:\n%s", out.String())
	}
}
