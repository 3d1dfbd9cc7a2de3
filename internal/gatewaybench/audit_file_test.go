package gatewaybench

import (
	"io"
	"testing"

	"github.com/agentbackplane/backplane/internal/auditlog"
)

// openAuditFile opens the audit log as package assemble does. (To measure
// an older tree, replace this file with one that opens path with
// os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600).)
func openAuditFile(b *testing.B, path string) (io.Writer, func() error) {
	w, err := auditlog.Open(path, nil)
	if err != nil {
		b.Fatal(err)
	}
	return w, w.Close
}
