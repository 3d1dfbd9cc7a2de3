package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBudgetWindowsAndRetention(t *testing.T) {
	c, err := Parse([]byte(`
budgets:
  - scope: caller
    quota: 100
    per: 1h
    cost: {default: 1, bash: 5}
  - scope: caller
    quota: 1000
    per: 7d
  - scope: caller
    quota: 5000
retention:
  keep: 14d
  every: 5m
`), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Budgets) != 3 || c.Budgets[0].Per != time.Hour || c.Budgets[1].Per != 7*24*time.Hour || c.Budgets[2].Per != 0 {
		t.Errorf("budgets = %+v, want per 1h, 7d and none", c.Budgets)
	}
	if c.Retention != (Retention{Keep: 14 * 24 * time.Hour, Every: 5 * time.Minute}) {
		t.Errorf("retention = %+v", c.Retention)
	}

	c, err = Parse(nil, "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention != (Retention{Keep: 30 * 24 * time.Hour, Every: 10 * time.Minute}) {
		t.Errorf("default retention = %+v, want 30 days every 10m", c.Retention)
	}
	c, err = Parse([]byte("retention: {keep: forever}\n"), "b.yaml")
	if err != nil || c.Retention.Keep != 0 {
		t.Errorf("keep: forever = %+v, %v; want 0 (no pruning)", c.Retention, err)
	}
}

func TestBudgetWindowAndRetentionErrors(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		line int
		msg  string
	}{
		{"budgets:\n  - scope: caller\n    quota: 1\n    per: 1500ms\n", 4, "whole seconds"},
		{"budgets:\n  - scope: caller\n    quota: 1\n    per: 0s\n", 4, "whole seconds"},
		{"budgets:\n  - scope: caller\n    quota: 1\n    per: 400d\n", 4, "from 1s to 366d"},
		{"budgets:\n  - scope: caller\n    quota: 1\n    per: hourly\n", 4, "bad duration"},
		{"budgets:\n  - scope: caller\n    quota: 1\n    per: 1h\n  - scope: caller\n    quota: 2\n    per: 60m\n", 5, "a caller budget per 1h0m0s is already defined at line 2"},
		{"retention:\n  keep: 10s\n", 2, "at least 1m"},
		{"retention:\n  keep: -3d\n", 2, "bad duration"},
		{"retention:\n  every: 0s\n", 2, "at least 1s"},
		{"retention:\n  keeps: 1d\n", 2, "keeps"},
		{"retention: 30d\n", 1, "retention"},
	} {
		_, err := Parse([]byte(tc.yaml), "b.yaml")
		var ce *Error
		if !errors.As(err, &ce) || ce.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: error %v, want line %d saying %q", tc.yaml, err, tc.line, tc.msg)
		}
	}
}
