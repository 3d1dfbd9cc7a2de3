package postgres

import (
	"testing"

	"github.com/agentbackplane/backplane/internal/jsonstring/jsonstringtest"
)

// TestAppendJSONString: the names of the reservations column keep the
// bytes encoding/json's Marshal wrote, without an allocation of their own
// (the cases are shared by both stores: jsonstringtest.CheckNames).
func TestAppendJSONString(t *testing.T) { jsonstringtest.CheckNames(t, appendJSONString) }
