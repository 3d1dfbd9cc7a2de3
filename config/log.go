package config

import (
	"slices"

	"go.yaml.in/yaml/v3"
)

func (p *parser) log(c *Config, v *yaml.Node) error {
	return p.mapping(v, "log", func(key string, k, v *yaml.Node) error {
		switch key {
		case "max_size":
			n, err := p.size(v, "log max_size")
			if err != nil {
				return err
			}
			if n < minLogSize {
				return p.errAt(v, "log max_size must be at least 1MB (the file is rotated in whole MB), not %d bytes", n)
			}
			c.Log.MaxSize = n
			return nil
		case "max_files":
			n, err := p.integer(v, "log max_files")
			if err != nil {
				return err
			}
			if n < 1 || n > maxLogFiles {
				return p.errAt(v, "log max_files must be a count of rotated files from 1 to %d, not %d", maxLogFiles, n)
			}
			c.Log.MaxFiles = int(n)
			return nil
		}
		s, err := p.str(v, key)
		if err != nil {
			return err
		}
		switch key {
		case "level":
			if !slices.Contains([]string{"debug", "info", "warn", "error"}, s) {
				return p.errAt(v, "log level %q: debug, info, warn or error", s)
			}
			c.Log.Level = s
		case "file":
			if s != "" {
				s = resolve(c.Dir, s)
			}
			c.Log.File = s
		}
		return nil
	}, "level", "file", "max_size", "max_files")
}

// Bounds of the audit log's rotation.
const (
	minLogSize  = 1 << 20
	maxLogSize  = 1 << 40
	maxLogFiles = 10000
)
