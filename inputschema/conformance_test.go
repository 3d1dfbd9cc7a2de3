package inputschema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

// The official JSON Schema Test Suite is run against the subset: every test
// group's schema is placed under a property of an object root (the subset
// only has object roots), and then either
//
//   - accepted: Compile succeeds, and every case must get the suite's verdict
//     (apart from the listed, spec-mandated exceptions), or
//   - declined: Compile refuses the schema with an *inputschema.Error of
//     stage "schema" and one of the two classes. A declined group is counted
//     and reported, never passed silently.
//
// Only the top-level files of tests/draft2020-12 are read; tests/draft2020-12/
// optional/ holds behaviour the specification leaves optional (formats,
// bignum, ECMAScript regexes...), which is not part of the contract.

// suiteCase, suiteGroup: the suite's file format. Schemas and data stay raw,
// so their exact bytes (number literals included) reach the validator.
type suiteCase struct {
	Description string          `json:"description"`
	Data        json.RawMessage `json:"data"`
	Valid       bool            `json:"valid"`
}

type suiteGroup struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []suiteCase     `json:"tests"`
}

// exceptionKey names one suite case.
type exceptionKey struct{ file, group, test string }

// suiteExceptions lists suite cases whose expected verdict the contract
// legitimately overrides, each with the decision that mandates it. It is
// empty: no accepted case currently needs one. An entry that stops matching
// a disagreement fails the test, so the table cannot go stale.
var suiteExceptions = map[exceptionKey]string{}

// findSuite returns tests/draft2020-12 of the suite, found beside the repo:
// walk up from the package dir to the dir holding the root go.mod, then
// ../shared/testdata/json-schema-test-suite.
func findSuite(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("JSON Schema Test Suite not found: no go.mod above the package directory")
		}
		dir = parent
	}
	suite := filepath.Join(dir, "..", "shared", "testdata", "json-schema-test-suite", "tests", "draft2020-12")
	if _, err := os.Stat(suite); err != nil {
		t.Skipf("JSON Schema Test Suite not found at %s: %v", suite, err)
	}
	return suite
}

// withoutTopLevelMember returns the JSON object doc without its member
// named name, keeping the other members' bytes and order exactly. Anything
// that is not an object is returned unchanged.
func withoutTopLevelMember(doc []byte, name string) ([]byte, error) {
	trimmed := bytes.TrimSpace(doc)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return doc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, err
	}
	var out bytes.Buffer
	out.WriteByte('{')
	kept := 0
	for dec.More() {
		// The member name's raw bytes: from after the previous value (past
		// whitespace and the comma) to where the decoder now stands.
		start := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("member name is %T", tok)
		}
		rawKey := bytes.TrimLeft(trimmed[start:dec.InputOffset()], " \t\r\n,")
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if key == name {
			continue
		}
		if kept > 0 {
			out.WriteByte(',')
		}
		out.Write(rawKey)
		out.WriteByte(':')
		out.Write(value)
		kept++
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

func TestWithoutTopLevelMember(t *testing.T) {
	cases := map[string]string{
		`{"$schema":"x","type":"integer"}`:                           `{"type":"integer"}`,
		`{ "a" : 1 , "$schema" : "x" , "b" : [ 1 ] }`:                `{"a":1,"b":[ 1 ]}`,
		`{"z":1,"a":{"$schema":"nested stays"},"$schema":"y"}`:       `{"z":1,"a":{"$schema":"nested stays"}}`,
		`{"\u0024schema":"escaped name is the same member","b":1.0}`: `{"b":1.0}`,
		`{"$schema":"x"}`: `{}`,
		`{}`:              `{}`,
		`true`:            `true`,
		`[1]`:             `[1]`,
	}
	for in, want := range cases {
		got, err := withoutTopLevelMember([]byte(in), "$schema")
		if err != nil || string(got) != want {
			t.Errorf("withoutTopLevelMember(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

// wrap places a suite schema under property "v" of an object root.
func wrap(schema []byte) []byte {
	return slices.Concat([]byte(`{"type":"object","properties":{"v":`), schema, []byte(`},"required":["v"]}`))
}

// counter counts occurrences of strings, for the summary.
type counter map[string]int

func (c counter) top(n int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c[a] != c[b] {
			return c[b] - c[a]
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	for i, k := range keys {
		if i == n {
			fmt.Fprintf(&b, "  ... %d more\n", len(keys)-n)
			break
		}
		fmt.Fprintf(&b, "  %-28s %d\n", k, c[k])
	}
	return b.String()
}

func TestJSONSchemaTestSuite(t *testing.T) {
	dir := findSuite(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var (
		files, groups, cases               int
		acceptedGroups, acceptedCases      int
		agreeing, disagreeing, excepted    int
		declinedGroups, declinedCases      int
		declinedByClass, declinedByKeyword = counter{}, counter{}
		usedExceptions                     = map[exceptionKey]bool{}
		acceptedNames                      []string
	)
	for _, entry := range entries {
		if entry.IsDir() || !strings.HasSuffix(entry.Name(), ".json") {
			continue // optional/ is deliberately not read, see the comment at the top
		}
		file := entry.Name()
		raw, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var suite []suiteGroup
		if err := json.Unmarshal(raw, &suite); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		files++
		for _, g := range suite {
			groups++
			cases += len(g.Tests)
			caseSchema, err := withoutTopLevelMember(g.Schema, "$schema")
			if err != nil {
				t.Fatalf("%s / %s: schema: %v", file, g.Description, err)
			}
			wrapped := wrap(caseSchema)
			isBool := string(bytes.TrimSpace(g.Schema)) == "true" || string(bytes.TrimSpace(g.Schema)) == "false"

			s, err := inputschema.Compile(wrapped, nil)
			if err != nil {
				declinedGroups++
				declinedCases += len(g.Tests)
				var e *inputschema.Error
				if !errors.As(err, &e) || err != error(e) {
					t.Errorf("%s / %s: Compile error %T (%v), want *inputschema.Error", file, g.Description, err, err)
					continue
				}
				if e.Stage != inputschema.StageSchema ||
					(e.Class != inputschema.ClassValidation && e.Class != inputschema.ClassUnsupported) {
					t.Errorf("%s / %s: Compile error stage %q class %q, want stage schema and class validation or unsupported_capability (%v)",
						file, g.Description, e.Stage, e.Class, e)
				}
				if isBool && e.Class != inputschema.ClassUnsupported {
					t.Errorf("%s / %s: boolean schema declined with class %q, want unsupported_capability (D6)", file, g.Description, e.Class)
				}
				declinedByClass[string(e.Class)]++
				kw := e.Keyword
				if kw == "" {
					kw = "(no keyword): " + e.Message
				}
				declinedByKeyword[kw]++
				continue
			}
			if isBool {
				t.Errorf("%s / %s: boolean schema %s accepted, want unsupported_capability (D6)", file, g.Description, g.Schema)
			}
			acceptedGroups++
			acceptedNames = append(acceptedNames, file+" / "+g.Description)
			for _, c := range g.Tests {
				acceptedCases++
				args := slices.Concat([]byte(`{"v":`), c.Data, []byte(`}`))
				verr := s.ValidateJSON(args)
				if verr != nil {
					var e *inputschema.Error
					if !errors.As(verr, &e) || e.Stage != inputschema.StageArguments || e.Class != inputschema.ClassValidation {
						t.Errorf("%s / %s / %s: argument error %v (%T), want an *inputschema.Error of stage arguments, class validation",
							file, g.Description, c.Description, verr, verr)
					}
				}
				// The all-errors form must reach the same verdict.
				if allErr := s.ValidateJSONAll(args); (allErr == nil) != (verr == nil) {
					t.Errorf("%s / %s / %s: ValidateJSON = %v but ValidateJSONAll = %v", file, g.Description, c.Description, verr, allErr)
				}
				got := verr == nil
				if got == c.Valid {
					agreeing++
					continue
				}
				key := exceptionKey{file, g.Description, c.Description}
				if why, ok := suiteExceptions[key]; ok {
					excepted++
					usedExceptions[key] = true
					t.Logf("exception %s / %s / %s: %s", file, g.Description, c.Description, why)
					continue
				}
				disagreeing++
				t.Errorf("disagreement with the suite\n  file:     %s\n  group:    %s\n  case:     %s\n  schema:   %s\n  data:     %s\n  expected: valid=%v\n  got:      valid=%v (%v)",
					file, g.Description, c.Description, caseSchema, c.Data, c.Valid, got, verr)
			}
		}
	}
	for key, why := range suiteExceptions {
		if !usedExceptions[key] {
			t.Errorf("stale exception %v (%s): the case no longer disagrees or no longer exists", key, why)
		}
	}

	var sum strings.Builder
	fmt.Fprintf(&sum, "JSON Schema Test Suite (draft2020-12, top-level files) against the inputschema subset:\n")
	fmt.Fprintf(&sum, "files %d, groups %d, cases %d\n", files, groups, cases)
	fmt.Fprintf(&sum, "groups accepted %d (cases %d: agreeing %d, disagreeing %d, excepted %d)\n",
		acceptedGroups, acceptedCases, agreeing, disagreeing, excepted)
	for _, name := range acceptedNames {
		fmt.Fprintf(&sum, "  accepted: %s\n", name)
	}
	fmt.Fprintf(&sum, "groups declined %d (cases not run %d)\n", declinedGroups, declinedCases)
	fmt.Fprintf(&sum, "declined groups by class:\n%s", declinedByClass.top(15))
	fmt.Fprintf(&sum, "declined groups by keyword (top 15):\n%s", declinedByKeyword.top(15))
	t.Log("\n" + sum.String())
	fmt.Print(sum.String())

	if files == 0 || groups == 0 {
		t.Errorf("no suite files read from %s", dir)
	}
	if acceptedGroups+declinedGroups != groups {
		t.Errorf("groups accepted %d + declined %d != %d", acceptedGroups, declinedGroups, groups)
	}
}
