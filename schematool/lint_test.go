package schematool

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

// Lint compiles under the limits it is given (the gateway's), not the
// defaults: a schema nested deeper than a configured depth fails.
func TestLintHonoursLimits(t *testing.T) {
	deep := `{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"string"}}}}}}}`
	catalog := []byte(`[{"name":"deep","inputSchema":` + deep + `}]`)
	r, err := Lint(catalog, nil)
	if err != nil || !r.Tools[0].OK {
		t.Fatalf("default limits: %+v, %v", r, err)
	}
	r, err = Lint(catalog, &Options{Limits: inputschema.Limits{MaxDepth: 3}})
	if err != nil || r.Tools[0].OK || r.Summary.Unsupported != 1 {
		t.Fatalf("MaxDepth 3: %+v, %v", r, err)
	}
	if e := r.Tools[0].Error; e.Stage != inputschema.StageSchema || !strings.Contains(e.Message, "over the limit of 3") {
		t.Errorf("MaxDepth 3: error %+v", e)
	}
	many := `{"type":"object","a":1,"b":2,"c":3}`
	r, _ = Lint([]byte(`[{"name":"m","inputSchema":`+many+`}]`), &Options{Limits: inputschema.Limits{MaxErrors: 2}})
	if len(r.Tools[0].Errors) != 2 || !r.Tools[0].Truncated {
		t.Errorf("MaxErrors 2: %d errors, truncated %v", len(r.Tools[0].Errors), r.Tools[0].Truncated)
	}
}

func TestLintUnusableCatalogs(t *testing.T) {
	for _, c := range []string{``, `{`, `"x"`, `{"tools":{}}`, `{"tools":[],"tools":[]}`, `{"items":[]}`, `[] []`} {
		if _, err := Lint([]byte(c), nil); !errors.Is(err, ErrCatalog) {
			t.Errorf("Lint(%q) = %v, want ErrCatalog", c, err)
		}
	}
}

// Lint never panics, and its report is consistent with itself.
func FuzzLint(f *testing.F) {
	for _, s := range []string{
		`[{"name":"a","inputSchema":{"type":"object"}}]`,
		`{"tools":[{"name":"a","inputSchema":{"type":"object","x":1,"properties":{"p":{"type":"nope"}}}},"s",{"name":5}],"nextCursor":"c"}`,
		`[{"name":"a","name":"b"},{"name":"a","inputSchema":{"type":"object","type":"object"}}]`,
		"[{\"name\":\"\\ud800\",\"inputSchema\":{\"d\":\"\xff\"}}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Lint(data, nil)
		if err != nil {
			if !errors.Is(err, ErrCatalog) {
				t.Fatalf("Lint(%q): %v does not wrap ErrCatalog", data, err)
			}
			return
		}
		s := r.Summary
		if s.Total != len(r.Tools) || s.Supported+s.Unsupported != s.Total {
			t.Fatalf("Lint(%q): summary %+v for %d tools", data, s, len(r.Tools))
		}
		for i, e := range r.Tools {
			if e.Index != i || e.OK != (e.Error == nil) || e.OK != (len(e.Errors) == 0) || (!e.OK && e.Errors[0] != e.Error) {
				t.Fatalf("Lint(%q): inconsistent entry %d: %+v", data, i, e)
			}
		}
	})
}
