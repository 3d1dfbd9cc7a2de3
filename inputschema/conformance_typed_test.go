package inputschema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

// TestJSONSchemaTestSuiteTyped is a second pass over the JSON Schema Test
// Suite. The first pass (TestJSONSchemaTestSuite) runs the suite's schemas
// unchanged, and since D7 requires "type" in every nested schema it accepts
// only a handful of groups, so minimum, properties, required,
// additionalProperties, items and oneOf get almost no coverage from it. This
// pass adds the missing types where the keywords leave no doubt about them:
//
//  1. Only groups whose schema (minus the top-level "$schema") is a JSON
//     object are considered.
//  2. Every schema object reached from the top through "properties" values,
//     "items" and "oneOf" branches (and only through these; anything else is
//     left as it is, so the subset declines it) that has no "type" gets the
//     type its keywords imply: properties, required, additionalProperties ->
//     "object"; items -> "array"; minimum -> "number" (also when the suite's
//     data are all integers). A schema object that already has a type is
//     never changed. A type-less schema object implying no type (such as {})
//     cannot be typed, and its group is skipped, unless it is a oneOf schema,
//     which needs no type (D7). So is one whose keywords imply two types.
//     Groups needing no inserted type are left to the first pass.
//  3. The typed copy is wrapped as property "v" of an object root, as in the
//     first pass, and compiled. A group the subset declines is counted by the
//     keyword of the Compile error.
//  4. In an accepted group a case is compared only if every value of its data
//     reaching a schema object typed here has the inserted type (for the top
//     schema: the data itself). Otherwise the suite's verdict relies on the
//     keyword ignoring values of other types, which the inserted type changes,
//     so the case is counted as not comparable and not run.
//  5. Every compared case must get the suite's verdict, apart from the listed,
//     spec-mandated exceptions (typedSuiteExceptions).
func TestJSONSchemaTestSuiteTyped(t *testing.T) {
	dir := findSuite(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var (
		files, groups                               int
		notObject, untypeable, unchanged            int
		typedGroups, acceptedGroups, declinedGroups int
		acceptedCases, compared, agreeing           int
		disagreeing, excepted                       int
		comparedValid                               int
		notComparableTop, notComparableNested       int
		untypeableBy, declinedByKeyword             = counter{}, counter{}
		usedExceptions                              = map[exceptionKey]bool{}
		acceptedNames                               []string
	)
	for _, entry := range entries {
		if entry.IsDir() || !strings.HasSuffix(entry.Name(), ".json") {
			continue // optional/ is not part of the contract, as in the first pass
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
			caseSchema, err := withoutTopLevelMember(g.Schema, "$schema")
			if err != nil {
				t.Fatalf("%s / %s: schema: %v", file, g.Description, err)
			}
			original, err := typedDecode(caseSchema)
			if err != nil {
				t.Fatalf("%s / %s: schema: %v", file, g.Description, err)
			}
			if _, ok := original.(map[string]any); !ok {
				notObject++
				continue
			}
			typed, inserted, err := addImpliedTypes(original)
			if err != nil {
				untypeable++
				untypeableBy[err.Error()]++
				continue
			}
			if inserted == 0 {
				unchanged++ // identical to what the first pass runs
				continue
			}
			typedGroups++
			typedSchema, err := typedEncode(typed)
			if err != nil {
				t.Fatalf("%s / %s: encoding the typed schema: %v", file, g.Description, err)
			}

			s, err := inputschema.Compile(wrap(typedSchema), nil)
			if err != nil {
				declinedGroups++
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
				kw := e.Keyword
				if kw == "" {
					kw = "(no keyword): " + e.Message
				}
				declinedByKeyword[kw]++
				continue
			}
			acceptedGroups++
			acceptedNames = append(acceptedNames, file+" / "+g.Description)
			for _, c := range g.Tests {
				acceptedCases++
				data, err := typedDecode(c.Data)
				if err != nil {
					t.Fatalf("%s / %s / %s: data: %v", file, g.Description, c.Description, err)
				}
				if top := original.(map[string]any); !hasKey(top, "type") {
					if want, _ := impliedType(top); want != "" && !hasJSONType(data, want) {
						notComparableTop++
						continue
					}
				}
				if !reachesOnlyInsertedTypes(original, data) {
					notComparableNested++
					continue
				}
				compared++
				if c.Valid {
					comparedValid++
				}
				args := slices.Concat([]byte(`{"v":`), c.Data, []byte(`}`))
				verr := s.ValidateJSON(args)
				if verr != nil {
					var e *inputschema.Error
					if !errors.As(verr, &e) || e.Stage != inputschema.StageArguments || e.Class != inputschema.ClassValidation {
						t.Errorf("%s / %s / %s: argument error %v (%T), want an *inputschema.Error of stage arguments, class validation",
							file, g.Description, c.Description, verr, verr)
					}
				}
				if allErr := s.ValidateJSONAll(args); (allErr == nil) != (verr == nil) {
					t.Errorf("%s / %s / %s: ValidateJSON = %v but ValidateJSONAll = %v", file, g.Description, c.Description, verr, allErr)
				}
				got := verr == nil
				if got == c.Valid {
					agreeing++
					continue
				}
				key := exceptionKey{file, g.Description, c.Description}
				if why, ok := typedSuiteExceptions[key]; ok {
					excepted++
					usedExceptions[key] = true
					t.Logf("exception %s / %s / %s: %s", file, g.Description, c.Description, why)
					continue
				}
				disagreeing++
				t.Errorf("typed pass: disagreement with the suite\n  file:         %s\n  group:        %s\n  case:         %s\n  typed schema: %s\n  data:         %s\n  expected:     valid=%v\n  got:          valid=%v (%v)",
					file, g.Description, c.Description, typedSchema, c.Data, c.Valid, got, verr)
			}
		}
	}
	for key, why := range typedSuiteExceptions {
		if !usedExceptions[key] {
			t.Errorf("stale typed-pass exception %v (%s): the case no longer disagrees, is no longer compared or no longer exists", key, why)
		}
	}

	var sum strings.Builder
	fmt.Fprintf(&sum, "JSON Schema Test Suite, typed pass (implied types inserted) against the inputschema subset:\n")
	fmt.Fprintf(&sum, "files %d, groups %d\n", files, groups)
	fmt.Fprintf(&sum, "groups skipped: schema not an object %d, not typeable %d, no type needed (first pass covers them) %d\n",
		notObject, untypeable, unchanged)
	fmt.Fprintf(&sum, "groups typed %d: accepted %d, declined %d\n", typedGroups, acceptedGroups, declinedGroups)
	for _, name := range acceptedNames {
		fmt.Fprintf(&sum, "  accepted: %s\n", name)
	}
	fmt.Fprintf(&sum, "cases in accepted groups %d: compared %d (suite says valid %d, invalid %d; agreeing %d, disagreeing %d, excepted %d), not comparable %d (data not of the inserted top type %d, other type reaching an inserted nested type %d)\n",
		acceptedCases, compared, comparedValid, compared-comparedValid, agreeing, disagreeing, excepted,
		notComparableTop+notComparableNested, notComparableTop, notComparableNested)
	fmt.Fprintf(&sum, "typed groups declined by keyword (top 10):\n%s", declinedByKeyword.top(10))
	fmt.Fprintf(&sum, "groups not typeable, by the first schema object that could not be typed (top 10):\n%s", untypeableBy.top(10))
	t.Log("\n" + sum.String())
	fmt.Print(sum.String())

	if files == 0 || groups == 0 {
		t.Errorf("no suite files read from %s", dir)
	}
	if notObject+untypeable+unchanged+typedGroups != groups || acceptedGroups+declinedGroups != typedGroups {
		t.Errorf("group counts do not add up: %d not object + %d untypeable + %d unchanged + %d typed (%d accepted + %d declined) vs %d groups",
			notObject, untypeable, unchanged, typedGroups, acceptedGroups, declinedGroups, groups)
	}
	if compared == 0 {
		t.Errorf("the typed pass compared no case: it exercises nothing")
	}
}

// typedSuiteExceptions lists compared cases of the typed pass whose expected
// verdict the contract legitimately overrides, each with the decision that
// mandates it. An entry that stops matching a disagreement fails the test.
var typedSuiteExceptions = map[exceptionKey]string{}

// typedDecode decodes JSON keeping numbers as json.Number, so that number
// literals (minimum bounds, data) survive re-encoding exactly.
func typedDecode(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the value")
	}
	return v, nil
}

// typedEncode encodes a typedDecode tree; json.Number is written as its
// literal text.
func typedEncode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func hasKey(m map[string]any, key string) bool {
	_, ok := m[key]
	return ok
}

// typeImplyingKeywords maps each keyword that applies to one JSON type only
// (D8) to that type.
var typeImplyingKeywords = map[string]string{
	"properties":            "object",
	"required":              "object",
	"additionalProperties":  "object",
	"additional_properties": "object",
	"items":                 "array",
	"minimum":               "number",
}

// impliedType returns the type the keywords of a schema object imply, "" if
// none does; keywords implying two types are an error.
func impliedType(schema map[string]any) (string, error) {
	implied := ""
	for _, kw := range slices.Sorted(maps.Keys(schema)) {
		t, ok := typeImplyingKeywords[kw]
		if !ok {
			continue
		}
		if implied != "" && implied != t {
			return "", fmt.Errorf("keywords imply both %s and %s", implied, t)
		}
		implied = t
	}
	return implied, nil
}

// addImpliedTypes returns a copy of schema in which every type-less schema
// object reached through properties, items and oneOf has the type its
// keywords imply, and how many types it inserted. It fails, naming the
// schema object's keywords, when a type-less schema object that is not a
// oneOf schema implies no type or two. schema is not modified.
func addImpliedTypes(schema any) (any, int, error) {
	m, ok := schema.(map[string]any)
	if !ok {
		return schema, 0, nil // a boolean or malformed schema: left for the subset to decline
	}
	out := maps.Clone(m)
	inserted := 0
	if !hasKey(m, "type") {
		t, err := impliedType(m)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %v", typedKeySet(m), err)
		}
		switch {
		case t != "":
			out["type"] = t
			inserted++
		case !hasKey(m, "oneOf"):
			return nil, 0, fmt.Errorf("%s: no type and no keyword implying one", typedKeySet(m))
		}
	}
	if props, ok := m["properties"].(map[string]any); ok {
		typedProps := make(map[string]any, len(props))
		for _, name := range slices.Sorted(maps.Keys(props)) { // sorted: the error names the same object every run
			typedSub, n, err := addImpliedTypes(props[name])
			if err != nil {
				return nil, 0, err
			}
			typedProps[name] = typedSub
			inserted += n
		}
		out["properties"] = typedProps
	}
	if items, ok := m["items"]; ok {
		typedItems, n, err := addImpliedTypes(items)
		if err != nil {
			return nil, 0, err
		}
		out["items"] = typedItems
		inserted += n
	}
	if branches, ok := m["oneOf"].([]any); ok {
		typedBranches := make([]any, len(branches))
		for i, b := range branches {
			typedB, n, err := addImpliedTypes(b)
			if err != nil {
				return nil, 0, err
			}
			typedBranches[i] = typedB
			inserted += n
		}
		out["oneOf"] = typedBranches
	}
	return out, inserted, nil
}

// typedKeySet names a schema object by its sorted keys, e.g. {$ref,maximum}.
func typedKeySet(m map[string]any) string {
	return "{" + strings.Join(slices.Sorted(maps.Keys(m)), ",") + "}"
}

// hasJSONType reports whether a typedDecode value is of JSON type t (one of
// the types impliedType returns).
func hasJSONType(v any, t string) bool {
	switch v.(type) {
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	case json.Number:
		return t == "number"
	}
	return false
}

// reachesOnlyInsertedTypes walks data alongside the original (untyped)
// schema through properties, items and oneOf, as a validator would, and
// reports whether every value reaching a schema object to which
// addImpliedTypes gives a type has that type. Where one does not, the typed
// schema judges the value by a type the suite's schema never required.
// properties and items reach only objects and arrays, whatever the schema's
// own type says, so the walk goes on under any schema.
func reachesOnlyInsertedTypes(schema, data any) bool {
	m, ok := schema.(map[string]any)
	if !ok {
		return true
	}
	if !hasKey(m, "type") {
		if t, _ := impliedType(m); t != "" && !hasJSONType(data, t) {
			return false
		}
	}
	if obj, ok := data.(map[string]any); ok {
		if props, ok := m["properties"].(map[string]any); ok {
			for name, sub := range props {
				if v, present := obj[name]; present && !reachesOnlyInsertedTypes(sub, v) {
					return false
				}
			}
		}
	}
	if arr, ok := data.([]any); ok {
		if items, ok := m["items"]; ok {
			for _, el := range arr {
				if !reachesOnlyInsertedTypes(items, el) {
					return false
				}
			}
		}
	}
	if branches, ok := m["oneOf"].([]any); ok {
		for _, b := range branches {
			if !reachesOnlyInsertedTypes(b, data) {
				return false
			}
		}
	}
	return true
}

// TestAddImpliedTypes pins the typing rule of the typed pass on hand-written
// schemas, so that a mistake in it cannot hide suite coverage.
func TestAddImpliedTypes(t *testing.T) {
	cases := []struct {
		in, want string // want "" = not typeable
		inserted int
	}{
		{`{"minimum":1.10}`, `{"minimum":1.10,"type":"number"}`, 1},
		{`{"required":["a"]}`, `{"required":["a"],"type":"object"}`, 1},
		{`{"additionalProperties":false}`, `{"additionalProperties":false,"type":"object"}`, 1},
		{`{"items":{"minimum":0}}`, `{"items":{"minimum":0,"type":"number"},"type":"array"}`, 2},
		{`{"type":"integer","minimum":1}`, `{"minimum":1,"type":"integer"}`, 0},
		{`{"type":"object","properties":{"a":{"required":[]}}}`, `{"properties":{"a":{"required":[],"type":"object"}},"type":"object"}`, 1},
		{`{"oneOf":[{"type":"integer"},{"minimum":2}]}`, `{"oneOf":[{"type":"integer"},{"minimum":2,"type":"number"}]}`, 1},
		{`{"oneOf":[true,{}]}`, ``, 0},
		{`{"oneOf":[true,false]}`, `{"oneOf":[true,false]}`, 0},
		{`{"properties":{"a":true}}`, `{"properties":{"a":true},"type":"object"}`, 1},
		// Only properties, items and oneOf are followed.
		{`{"minimum":1,"not":{}}`, `{"minimum":1,"not":{},"type":"number"}`, 1},
		{`{"properties":{"a":{}}}`, ``, 0},
		{`{"items":{"maximum":3}}`, ``, 0},
		{`{}`, ``, 0},
		{`{"minimum":1,"required":[]}`, ``, 0},
	}
	for _, c := range cases {
		in, err := typedDecode([]byte(c.in))
		if err != nil {
			t.Fatal(err)
		}
		before, _ := typedEncode(in)
		got, n, err := addImpliedTypes(in)
		if after, _ := typedEncode(in); !bytes.Equal(before, after) {
			t.Errorf("addImpliedTypes(%s) modified its input: %s", c.in, after)
		}
		if c.want == "" {
			if err == nil {
				t.Errorf("addImpliedTypes(%s) = %v, want not typeable", c.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("addImpliedTypes(%s): %v", c.in, err)
			continue
		}
		enc, err := typedEncode(got)
		if err != nil {
			t.Fatal(err)
		}
		if string(enc) != c.want || n != c.inserted {
			t.Errorf("addImpliedTypes(%s) = %s (%d inserted), want %s (%d)", c.in, enc, n, c.want, c.inserted)
		}
	}
}

// TestReachesOnlyInsertedTypes pins which cases the typed pass compares.
func TestReachesOnlyInsertedTypes(t *testing.T) {
	cases := []struct {
		schema, data string
		want         bool
	}{
		{`{"minimum":1}`, `0`, true},
		{`{"minimum":1}`, `"x"`, false},
		{`{"type":"integer","minimum":1}`, `"x"`, true}, // typed by the suite, not here
		{`{"properties":{"a":{"minimum":1}}}`, `{"a":2.5}`, true},
		{`{"properties":{"a":{"minimum":1}}}`, `{"a":"2"}`, false},
		{`{"properties":{"a":{"minimum":1}}}`, `{"b":"2"}`, true},
		{`{"properties":{"a":{"minimum":1}}}`, `[{"a":"2"}]`, false},
		{`{"type":"object","properties":{"a":{"minimum":1}}}`, `[{"a":"2"}]`, true}, // properties ignores arrays
		{`{"items":{"required":["a"]}}`, `[{},{"a":1}]`, true},
		{`{"items":{"required":["a"]}}`, `[{},1]`, false},
		{`{"oneOf":[{"type":"integer"},{"minimum":2}]}`, `1.5`, true},
		{`{"oneOf":[{"type":"integer"},{"minimum":2}]}`, `"foo"`, false},
		{`{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `null`, true},
	}
	for _, c := range cases {
		schema, err := typedDecode([]byte(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		data, err := typedDecode([]byte(c.data))
		if err != nil {
			t.Fatal(err)
		}
		if got := reachesOnlyInsertedTypes(schema, data); got != c.want {
			t.Errorf("reachesOnlyInsertedTypes(%s, %s) = %v, want %v", c.schema, c.data, got, c.want)
		}
	}
}
