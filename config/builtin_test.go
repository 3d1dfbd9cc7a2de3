package config

import (
	"strings"
	"testing"
)

// A postgres:// store names no folder to hide; the configuration file is
// still hidden.
func TestPrivatePaths(t *testing.T) {
	c, err := Parse([]byte("store: postgres://db/bp\nlog: {file: logs/audit.log}\n"), "/x/bp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.PrivatePaths(), ","); got != "/x/logs/audit.log,/x/logs/backplane.log,/x/bp.yaml" {
		t.Errorf("private paths %s", got)
	}
	c, err = Parse([]byte("store: st\n"), "/x/bp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.PrivatePaths(), ","); got != "/x/st,/x/bp.yaml" {
		t.Errorf("private paths %s", got)
	}
}
