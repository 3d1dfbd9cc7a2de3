package memstore_test

import (
	"testing"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/memstore"
	"github.com/agentbackplane/backplane/store/storetest"
)

// TestConformance holds the reference implementation to the shared store
// contract.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memstore.New()
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

// Each store has its own incarnation.
func TestIncarnationsDiffer(t *testing.T) {
	if a, b := memstore.New().Incarnation(), memstore.New().Incarnation(); a == b || a == "" {
		t.Errorf("two stores share incarnation %q / %q", a, b)
	}
}
