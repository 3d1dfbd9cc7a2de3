//go:build race

package canonjson_test

// raceEnabled: the race detector makes sync.Pool drop pooled items at
// random, so allocation counts are not meaningful under it.
const raceEnabled = true
