package gateway

import "time"

// SetPinRecheck sets how long an accepted pin is trusted, for a test; it
// returns the function restoring the default.
func SetPinRecheck(d time.Duration) (restore func()) {
	old := pinRecheck
	pinRecheck = d
	return func() { pinRecheck = old }
}
