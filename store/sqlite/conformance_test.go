package sqlite_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/sqlite"
	"github.com/agentbackplane/backplane/store/storetest"
)

// quiet keeps test output to failures.
var quiet = &sqlite.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

// openTemp opens a Store in a fresh folder, closed when the test ends.
func openTemp(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.TempDir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// TestConformance runs the shared store contract suite, each test on a new
// database file.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}
