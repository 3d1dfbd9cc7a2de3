package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/budget"
	"go.yaml.in/yaml/v3"
)

// budgets reads the budgets section:
//
//	budgets:
//	  - scope: caller      # caller | session
//	    quota: 100
//	    per: 1h            # fixed windows aligned to the Unix epoch; absent: no window
//	    cost: {default: 1, bash: 5}  # or default_cost: 1 (then "default" in cost is a tool)
//
// One budget per scope and window length: a caller may have both a
// quota per hour and one per day, or for ever.
func (p *parser) budgets(c *Config, v *yaml.Node) error {
	type slot struct {
		scope budget.Scope
		per   time.Duration
	}
	seen := map[slot]int{} // -> line
	return p.sequence(v, "budgets", func(item *yaml.Node) error {
		var q budget.Quota
		var scopeNode, quotaNode *yaml.Node
		err := p.mapping(item, "a budget", func(key string, k, v *yaml.Node) error {
			switch key {
			case "scope":
				scopeNode = v
				s, err := p.str(v, "scope")
				if err != nil {
					return err
				}
				q.Scope = budget.Scope(s)
				if q.Scope != budget.ScopeCaller && q.Scope != budget.ScopeSession {
					return p.errAt(v, "unknown budget scope %q: caller or session", s)
				}
			case "quota":
				quotaNode = v
				n, err := p.integer(v, "quota")
				if err != nil {
					return err
				}
				if n < 0 {
					return p.errAt(v, "quota %d must not be negative", n)
				}
				q.Quota = n
			case "per":
				d, err := p.longDuration(v, "per")
				if err != nil {
					return err
				}
				if err := budget.CheckWindow(budget.Window{Per: d, Start: time.Unix(0, 0)}); err != nil || d == 0 {
					return p.errAt(v, "per %s: a window of whole seconds, from 1s to %s", deref(v).Value, days(budget.MaxWindow))
				}
				q.Per = d
			case "cost":
				return p.costs(&q, v)
			case "default_cost":
				n, err := p.integer(v, "default_cost")
				if err != nil {
					return err
				}
				if n < 0 {
					return p.errAt(v, "default_cost %d must not be negative", n)
				}
				q.Default = &n
			}
			return nil
		}, "scope", "quota", "per", "cost", "default_cost")
		if err != nil {
			return err
		}
		// Without default_cost, `cost: {default: N}` is the default cost
		// (the long-standing spelling); with it, every key of cost is a
		// tool name, so a tool named "default" can be given its own cost.
		if c, ok := q.Cost["default"]; ok && q.Default == nil {
			q.Default = &c
			delete(q.Cost, "default")
		}
		if scopeNode == nil {
			return p.errAt(item, "a budget needs a scope (caller or session)")
		}
		if quotaNode == nil {
			return p.errAt(item, "a budget needs a quota")
		}
		k := slot{q.Scope, q.Per}
		if line, ok := seen[k]; ok {
			what := ""
			if q.Per != 0 {
				what = " per " + q.Per.String()
			}
			return p.errAt(scopeNode, "a %s budget%s is already defined at line %d", q.Scope, what, line)
		}
		seen[k] = scopeNode.Line
		c.Budgets = append(c.Budgets, q)
		return nil
	})
}

func (p *parser) costs(q *budget.Quota, v *yaml.Node) error {
	q.Cost = map[string]int64{}
	return p.mapping(v, "cost", func(key string, k, v *yaml.Node) error {
		n, err := p.integer(v, "the cost of "+key)
		if err != nil {
			return err
		}
		if n < 0 {
			return p.errAt(v, "the cost of %s is %d: it must not be negative", key, n)
		}
		q.Cost[key] = n
		return nil
	})
}

// longDuration reads a duration written as Go writes them (90s, 1h30m) or
// as a whole number of days (30d).
func (p *parser) longDuration(v *yaml.Node, what string) (time.Duration, error) {
	n := deref(v)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && strings.HasSuffix(n.Value, "d") {
		days, err := strconv.ParseInt(strings.TrimSuffix(n.Value, "d"), 10, 64)
		if err != nil || days < 0 || days > 100*365 {
			return 0, p.errAt(v, "%s: bad duration %q: write it as 30d, 12h or 1h30m", what, n.Value)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return p.duration(v, what)
}

// days writes d in days when it is whole days.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}
