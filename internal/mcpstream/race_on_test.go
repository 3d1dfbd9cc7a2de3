//go:build race

package mcpstream_test

// raceEnabled: the race detector's instrumentation allocates, so
// allocation counts are not meaningful under it.
const raceEnabled = true
