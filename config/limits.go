package config

import (
	"go.yaml.in/yaml/v3"
)

func (p *parser) limits(c *Config, v *yaml.Node) error {
	return p.mapping(v, "limits", func(key string, k, v *yaml.Node) error {
		switch key {
		case "max_argument_bytes", "max_result_bytes":
			n, err := p.positiveInt(v, key)
			if err != nil {
				return err
			}
			if key == "max_argument_bytes" {
				c.Limits.MaxArgumentBytes = n
			} else {
				c.Limits.MaxResultBytes = n
			}
		case "timeout":
			d, err := p.duration(v, key)
			if err != nil {
				return err
			}
			if d <= 0 {
				return p.errAt(v, "timeout must be positive")
			}
			c.Limits.Timeout = d
		}
		return nil
	}, "max_argument_bytes", "max_result_bytes", "timeout")
}
