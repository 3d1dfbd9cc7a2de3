package gateway

import "time"

// SetPinRecheck sets how long an accepted pin is trusted, for a test; it
// returns the function restoring the default.
func SetPinRecheck(d time.Duration) (restore func()) {
	old := pinRecheck
	pinRecheck = d
	return func() { pinRecheck = old }
}

// The refusals' reasons and the span attributes' names, for the tests
// outside the package.
var (
	ErrNotOperator    = errNotOperator
	ErrNotPinned      = errNotPinned
	ErrBadBudgetReset = errBadBudgetReset
)

const (
	AttrCallID     = attrCallID
	AttrCaller     = attrCaller
	AttrTool       = attrTool
	AttrOutcome    = attrOutcome
	AttrErrorClass = attrErrorClass
	AttrStepMillis = attrStepMillis
)
