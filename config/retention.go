package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// Retention says how long the store keeps what is finished: settled
// intents (with their reservations), expired approvals, closed
// incarnations and ended budget windows. A started or uncertain intent is
// kept however old. `backplane serve` prunes in the background; `backplane
// journal prune --before DATE` prunes by hand.
//
//	retention:
//	  keep: 30d      # the default; "forever" turns pruning off
//	  every: 10m     # how often serve prunes
type Retention struct {
	// Keep is how long what is finished is kept; 0 means for ever (no
	// pruning). Default 30 days.
	Keep time.Duration
	// Every is how often serve prunes. Default 10 minutes.
	Every time.Duration
}

// Retention defaults.
const (
	DefaultRetentionKeep  = 30 * 24 * time.Hour
	DefaultRetentionEvery = 10 * time.Minute
)

func (p *parser) retention(c *Config, v *yaml.Node) error {
	return p.mapping(v, "retention", func(key string, k, v *yaml.Node) error {
		switch key {
		case "keep":
			if n := deref(v); n.Kind == yaml.ScalarNode && n.Value == "forever" {
				c.Retention.Keep = 0
				return nil
			}
			d, err := p.longDuration(v, "keep")
			if err != nil {
				return err
			}
			if d < time.Minute {
				return p.errAt(v, "retention keep %s: at least 1m (or forever)", deref(v).Value)
			}
			c.Retention.Keep = d
		case "every":
			d, err := p.longDuration(v, "every")
			if err != nil {
				return err
			}
			if d < time.Second {
				return p.errAt(v, "retention every %s: at least 1s", deref(v).Value)
			}
			c.Retention.Every = d
		}
		return nil
	}, "keep", "every")
}
