package config

import (
	"testing"
	"time"
)

// FuzzBudgetsAndRetention feeds the budgets and retention sections any
// text: the parser never panics, and what it accepts is a usable window
// and retention.
func FuzzBudgetsAndRetention(f *testing.F) {
	for _, s := range []string{
		"budgets:\n  - scope: caller\n    quota: 1\n    per: 1h\n",
		"budgets:\n  - {scope: session, quota: 3, per: 7d, cost: {default: 2}}\n",
		"retention: {keep: 30d, every: 10m}\n",
		"retention: {keep: forever}\n",
		"retention:\n  keep: 99999999999999999999d\n",
		"budgets:\n  - scope: caller\n    quota: 1\n    per: -1d\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		c, err := Parse([]byte(src), "f.yaml")
		if err != nil {
			return
		}
		for _, q := range c.Budgets {
			if err := q.Check(); err != nil {
				t.Fatalf("accepted a budget Check refuses: %+v: %v", q, err)
			}
		}
		if c.Retention.Keep < 0 || (c.Retention.Keep > 0 && c.Retention.Keep < time.Minute) || c.Retention.Every < time.Second {
			t.Fatalf("accepted retention %+v", c.Retention)
		}
	})
}
