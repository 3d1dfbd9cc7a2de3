package main

import (
	"slices"
	"strings"

	"github.com/agentbackplane/backplane/gateway"
	"github.com/agentbackplane/backplane/tool"
)

// suggestUnknownTool adds to a not_found refusal the names, among the tools
// the caller may call, closest to the one asked for: a typo gets its fix,
// and a caller who guessed gets the list to choose from. Only tools visible
// to the caller are named, so nothing leaks that the policy hides.
func suggestUnknownTool(ge *gateway.Error, asked string, visible []tool.Tool) {
	names := make([]string, 0, len(visible))
	for _, t := range visible {
		names = append(names, t.Name)
	}
	near := closestNames(asked, names, 3)
	if ge.Details == nil {
		ge.Details = map[string]any{}
	}
	switch {
	case len(near) > 0:
		ge.Details["did_you_mean"] = near
		ge.Message += "; did you mean " + strings.Join(near, " or ") + "?"
	case len(names) > 0:
		slices.Sort(names)
		ge.Details["tools"] = names
		ge.Message += "; the tools you may call: " + strings.Join(names, ", ")
	default:
		ge.Message += "; the policy allows you no tool"
	}
}

// closestNames returns up to n names within a small edit distance of asked
// (or containing it, or contained in it), closest first.
func closestNames(asked string, names []string, n int) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	a := strings.ToLower(asked)
	limit := max(2, len(a)/3)
	for _, name := range names {
		l := strings.ToLower(name)
		d := editDistance(a, l)
		if d <= limit || (len(a) >= 3 && (strings.Contains(l, a) || strings.Contains(a, l))) {
			cs = append(cs, cand{name, d})
		}
	}
	slices.SortStableFunc(cs, func(x, y cand) int {
		if x.d != y.d {
			return x.d - y.d
		}
		return strings.Compare(x.name, y.name)
	})
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].name)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes (tool
// names are ASCII in practice; a multi-byte name only counts differently).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
