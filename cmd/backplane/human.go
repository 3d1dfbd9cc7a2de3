package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// humanValue renders a detail value for people: strings as they are, lists
// joined (one item per line when an item is long), anything else as
// compact JSON. Never Go syntax such as [a b] or map[k:v].
func humanValue(v any, indent string) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return x
	case []string:
		items := make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
		return humanList(items, indent)
	case []any:
		return humanList(x, indent)
	case fmt.Stringer:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func humanList(items []any, indent string) string {
	parts := make([]string, len(items))
	long := false
	for i, it := range items {
		parts[i] = humanValue(it, indent+"  ")
		long = long || len(parts[i]) > 40 || strings.Contains(parts[i], "\n")
	}
	if !long {
		return strings.Join(parts, ", ")
	}
	return "\n" + indent + "- " + strings.Join(parts, "\n"+indent+"- ")
}

// humanDuration writes d as people write it: 24h, 1h30m, 90s; not 24h0m0s.
func humanDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
