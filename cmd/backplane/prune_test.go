package main

import (
	"testing"
	"time"
)

func TestParseBefore(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"30d":                  now.Add(-30 * 24 * time.Hour),
		"12h":                  now.Add(-12 * time.Hour),
		"0s":                   now,
		"2026-01-31":           time.Date(2026, 1, 31, 0, 0, 0, 0, time.UTC),
		"2026-11-30T12:00:00Z": time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	} {
		got, err := parseBefore(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseBefore(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-3d", "-1h", "tomorrow", "2027-01-01", "1h2", "99999999999d", "2026-13-01"} {
		if got, err := parseBefore(in, now); err == nil {
			t.Errorf("parseBefore(%q) = %v, want an error", in, got)
		}
	}
}

// FuzzParseBefore: any text is a time not after now, or an error; never a
// panic.
func FuzzParseBefore(f *testing.F) {
	for _, s := range []string{"30d", "12h", "2026-01-31", "2026-01-31T12:00:00Z", "-1d", "1e9h", "9223372036854775807d"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseBefore(s, now)
		if err == nil && got.After(now) {
			t.Fatalf("parseBefore(%q) = %v, after now", s, got)
		}
	})
}
