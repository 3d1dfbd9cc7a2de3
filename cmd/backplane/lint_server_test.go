package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// schema lint --server lists a live upstream's catalog and lints it: the
// reference server-everything declares $schema at the root of every tool,
// so every tool is outside the subset, counted under $schema.
func TestLintServerAgainstServerEverything(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: " + err.Error())
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "testdata", "mcp-peers", "node_modules", ".bin", "mcp-server-everything"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skip("server-everything is not installed (npm ci in testdata/mcp-peers): " + err.Error())
	}
	g := newGWDir(t, fmt.Sprintf(`
servers:
  - name: everything
    command: [%q]
    validator: draft2020-12
`, bin))
	m := g.runJSON(t, 1, "", "schema", "lint", "--server", "everything", "--config", filepath.Join(g.dir, "backplane.yaml"))
	sum, _ := m["summary"].(map[string]any)
	num := func(v any) float64 {
		f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
		return f
	}
	total, supported, unsupported := num(sum["total"]), num(sum["supported"]), num(sum["unsupported"])
	if total < 5 || supported != 0 || unsupported != total {
		t.Fatalf("summary %v: want every one of several tools outside the subset", sum)
	}
	by, _ := sum["by_keyword"].(map[string]any)
	if num(by["$schema"]) != total {
		t.Fatalf("by_keyword %v: want all %v tools counted under $schema", by, total)
	}
	r := g.run(t, "", "schema", "lint", "--server", "nope", "--config", filepath.Join(g.dir, "backplane.yaml"))
	r.wantCode(t, 2)
}
