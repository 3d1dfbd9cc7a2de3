package assemble

import (
	"os/exec"
	"strings"
	"testing"
)

// The import direction this package exists for: config parses and imports
// no store driver, backend or gateway; no backend imports the gateway.
func TestImportDirection(t *testing.T) {
	const mod = "github.com/agentbackplane/backplane/"
	deps := func(pattern string) []string {
		t.Helper()
		out, err := exec.Command(goTool(), "list", "-deps", pattern).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pattern, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, d := range deps("../config") {
		p, ok := strings.CutPrefix(d, mod)
		if !ok {
			continue
		}
		if p == "gateway" || p == "backend" || strings.HasPrefix(p, "backend/") ||
			p == "store/sqlite" || p == "store/postgres" || p == "store/memstore" || p == "assemble" {
			t.Errorf("config depends on %s", d)
		}
	}
	for _, d := range deps("../backend/...") {
		if d == mod+"gateway" || d == mod+"assemble" || d == mod+"config" {
			t.Errorf("a backend depends on %s", d)
		}
	}
}
