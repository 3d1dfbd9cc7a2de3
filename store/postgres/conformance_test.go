package postgres_test

import (
	"testing"

	"github.com/agentbackplane/backplane/store"
	"github.com/agentbackplane/backplane/store/storetest"
)

// TestConformance runs the shared store contract suite, each test in a
// schema of its own.
func TestConformance(t *testing.T) {
	testURL(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openStore(t, newSchema(t), nil) })
}
