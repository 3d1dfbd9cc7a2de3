package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	parse := func(src string) (*Config, error) { return Parse([]byte(src), filepath.Join(dir, "backplane.yaml")) }

	c, err := parse("policy: []\n")
	if err != nil || c.Log.MaxSize != 0 || c.Log.MaxFiles != 0 {
		t.Fatalf("no key: %+v, %v; want the defaults (zero)", c.Log, err)
	}
	for _, tc := range []struct {
		src   string
		size  int64
		files int
	}{
		{"log: {file: a.log, max_size: 100MB, max_files: 10}\n", 100 << 20, 10},
		{"log: {max_size: 1GB, max_files: 1}\n", 1 << 30, 1},
		{"log: {max_size: 2 MiB}\n", 2 << 20, 0},
		{"log: {max_size: 1048576}\n", 1 << 20, 0},
		{"log: {max_size: 4096KB}\n", 4 << 20, 0},
		{"log: {max_size: 1024GB}\n", 1 << 40, 0},
	} {
		c, err := parse(tc.src)
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		if c.Log.MaxSize != tc.size || c.Log.MaxFiles != tc.files {
			t.Errorf("%q: max_size %d max_files %d, want %d %d", tc.src, c.Log.MaxSize, c.Log.MaxFiles, tc.size, tc.files)
		}
	}
	if c, err := parse("log: {file: logs/a.log}\n"); err != nil || c.Log.File != filepath.Join(dir, "logs/a.log") {
		t.Errorf("file relative to the configuration: %q, %v", c.Log.File, err)
	}

	for _, tc := range []struct{ src, want string }{
		{"log: {max_size: 10KB}\n", "1: log max_size must be at least 1MB"},
		{"log: {max_size: 0}\n", "at least 1MB"},
		{"log: {max_size: -5MB}\n", `bad size "-5MB"`},
		{"log: {max_size: 1.5MB}\n", `bad size "1.5MB"`},
		{"log: {max_size: 100 parsecs}\n", `unknown unit "parsecs"`},
		{"log: {max_size: 2048GB}\n", "more than 1TB"},
		{"log: {max_size: 99999999999999999999}\n", "log max_size must be a size"},
		{"log: {max_size: [1]}\n", "log max_size must be a size"},
		{"log: {max_files: 0}\n", "log max_files must be a count of rotated files from 1 to 10000, not 0"},
		{"log: {max_files: 10001}\n", "not 10001"},
		{"log: {max_files: ten}\n", "log max_files must be an integer"},
		{"log: {max_bytes: 5}\n", "max_bytes"},
	} {
		_, err := parse(tc.src)
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want a *config.Error with %q", tc.src, err, tc.want)
		}
	}
}

// FuzzParseLog: any log section parses or is refused with an error, and
// what is accepted is within the rotation's bounds.
func FuzzParseLog(f *testing.F) {
	fuzzParse(f, []string{
		"log: {level: info, file: audit.log, max_size: 100MB, max_files: 10}\n",
		"log: {max_size: 1GB}\n",
		"log: {max_size: 1048576, max_files: 1}\n",
		"log:\n  max_size: &s 5MB\n  file: *s\n",
		"log: {max_size: 0x10}\n",
	}, func(t *testing.T, c *Config) {
		if c.Log.MaxSize != 0 && (c.Log.MaxSize < minLogSize || c.Log.MaxSize > maxLogSize) {
			t.Fatalf("accepted max_size %d", c.Log.MaxSize)
		}
		if c.Log.MaxFiles < 0 || c.Log.MaxFiles > maxLogFiles {
			t.Fatalf("accepted max_files %d", c.Log.MaxFiles)
		}
	})
}
