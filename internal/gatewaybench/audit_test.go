package gatewaybench

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/store/sqlite"
)

// BenchmarkGatewayAudit is BenchmarkGateway over SQLite with the audit log
// written to a real file, as serve writes it (a JSON slog handler over
// openAuditFile): what the audit costs a call. bytes/call is the size of
// the audit log per call.
func BenchmarkGatewayAudit(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			dir := b.TempDir()
			st, err := sqlite.Open(filepath.Join(dir, "store"), &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(dir, "audit.log")
			w, closeAudit := openAuditFile(b, path)
			log := slog.New(slog.NewJSONHandler(w, nil))
			runCallers(b, newGateway(b, st, func(o *gateway.Options) { o.Logger = log }), callers)
			if err := closeAudit(); err != nil {
				b.Error(err)
			}
			if err := st.Close(); err != nil {
				b.Error(err)
			}
			if fi, err := os.Stat(path); err == nil {
				b.ReportMetric(float64(fi.Size())/float64(b.N), "bytes/call")
			}
		})
	}
}
