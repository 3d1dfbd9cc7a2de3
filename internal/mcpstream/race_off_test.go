//go:build !race

package mcpstream_test

const raceEnabled = false
