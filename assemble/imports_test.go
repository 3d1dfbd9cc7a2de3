package assemble

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// importRule forbids the packages From (a path, or PREFIX/... for it and
// everything below) to depend, directly or not (go list's Deps), on any
// of To (the same forms). docs/architecture.md draws these lines.
type importRule struct {
	From []string
	To   []string
	Why  string
}

// Package sets the rules name.
var (
	backendImpls = []string{"backend/..."} // the interface they implement is tool.Backend
	storeImpls   = []string{"store/..."}   // store itself is the contract
	frontEnds    = []string{"server", "console", "hook"}
	upper        = []string{"assemble", "cmd/...", "server", "console", "hook"}
)

var importRules = []importRule{
	{frontEnds, append(append([]string{"config", "assemble", "cmd/..."}, backendImpls...), storeImpls...),
		"front ends reach tools and the store only through the gateway"},
	{[]string{"config"}, []string{"gateway", "backend/...", "internal/sandbox", "store", "store/...", "assemble", "server", "console", "oauth", "tracing"},
		"config parses: it decides nothing, probes nothing, opens nothing"},
	{[]string{"policy", "budget", "validator/...", "inputschema"}, []string{"store", "store/...", "gateway", "backend/...", "config"},
		"rules packages decide on values, never on storage"},
	{[]string{"gateway", "tool"}, append(append(append([]string{"config"}, upper...), backendImpls...), storeImpls...),
		"the gateway and the tool vocabulary are below every implementation and front end"},
	{[]string{"opsview"}, append(append(append([]string{"gateway", "config"}, upper...), backendImpls...), storeImpls...),
		"the views are plain data the gateway fills: they read no store and know no front end"},
	{backendImpls, []string{"gateway", "config", "assemble", "cmd/...", "server", "console", "hook", "store", "store/..."},
		"backends run tools; the gateway calls them, never the other way"},
	{storeImpls, []string{"gateway", "config", "assemble", "backend/...", "server", "console", "policy"},
		"stores keep records; they know nothing of what is above"},
}

// knownViolations are the edges the rules forbid that the code still has,
// each with the reason; the test fails when one is gone, so that the list
// only shrinks. None is left (issue 23 removed the last three: budget ->
// store and config -> store when budget took its windows, approval ->
// store when the gateway took the approval step's options).
var knownViolations = map[string]string{}

// TestImportDirection checks every rule against go list's dependencies.
func TestImportDirection(t *testing.T) {
	const mod = "github.com/agentbackplane/backplane/"
	out, err := exec.Command(goTool(), "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{} // package -> its dependencies in the module, module-relative
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p, ok := strings.CutPrefix(f[0], mod)
		if !ok {
			continue
		}
		deps[p] = nil
		for _, d := range f[1:] {
			if r, ok := strings.CutPrefix(d, mod); ok {
				deps[p] = append(deps[p], r)
			}
		}
	}
	if len(deps["assemble"]) == 0 {
		t.Fatalf("go list listed no dependencies of assemble:\n%s", out)
	}
	match := func(p string, set []string) string {
		for _, s := range set {
			if base, ok := strings.CutSuffix(s, "/..."); ok {
				if strings.HasPrefix(p, base+"/") {
					return s
				}
			} else if p == s {
				return s
			}
		}
		return ""
	}
	seen := map[string]bool{}
	for p, ds := range deps {
		if strings.Contains(p, "/testdata/") || strings.HasPrefix(p, "examples/") {
			continue
		}
		for _, r := range importRules {
			from := match(p, r.From)
			if from == "" {
				continue
			}
			for _, d := range ds {
				if match(d, r.To) == "" || match(d, r.From) != "" {
					continue
				}
				edge := from + " -> " + strings.TrimSuffix(match(d, r.To), "/...")
				if _, ok := knownViolations[edge]; ok {
					seen[edge] = true
					continue
				}
				t.Errorf("%s depends on %s: %s", p, d, r.Why)
			}
		}
	}
	for edge, why := range knownViolations {
		if !seen[edge] {
			t.Errorf("%s is no longer a dependency (%s): remove it from knownViolations", edge, why)
		}
	}
	// Every rule names packages that exist: a renamed package must not
	// leave a rule that checks nothing.
	for _, r := range importRules {
		for _, f := range r.From {
			exists := slices.ContainsFunc(mapKeys(deps), func(p string) bool { return match(p, []string{f}) != "" })
			if !exists {
				t.Errorf("rule %q: no package %s", r.Why, f)
			}
		}
	}
}

func mapKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
