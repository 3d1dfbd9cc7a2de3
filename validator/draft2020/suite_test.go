package draft2020

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

// The official JSON Schema Test Suite, draft 2020-12, top-level files (the
// optional/ folder, where format assertions and other optional behaviour
// live, is not part of the required draft).
//
// Every case runs except:
//   - refRemote.json, and any group whose schema needs a document from
//     http://localhost:1234/ (the suite's remote server): this boundary
//     loads no URL, so those schemas must instead be declined at compile
//     time with unsupported_capability, the loader having been asked for
//     localhost:1234 URLs only;
//   - format assertions: none in the top-level files (format.json there
//     expects annotation behaviour, which is ours), so the list is empty;
//   - the exclusions listed in suiteExclusions, each with its reason.
//
// A case whose instance is an object goes through ValidateJSONAll, the
// public path; any other instance goes through the same decoding and
// conversion without the D2 object check (the contract refuses non-object
// arguments before any schema is consulted, which would say nothing about
// the schema).

// suiteExclusions maps "file/group description/test description" (or
// "file/group description" for a whole group) to the reason it is not run.
var suiteExclusions = map[string]string{}

// suiteDir finds ../shared/testdata/json-schema-test-suite/tests/draft2020-12
// next to the repository holding this package.
func suiteDir(t testing.TB) string {
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
			t.Skip("no go.mod above the package directory: cannot locate ../shared/testdata")
		}
		dir = parent
	}
	suite := filepath.Join(dir, "..", "shared", "testdata", "json-schema-test-suite", "tests", "draft2020-12")
	if _, err := os.Stat(suite); err != nil {
		t.Skipf("JSON Schema Test Suite absent (%v): expected at ../shared/testdata/json-schema-test-suite next to the repository", err)
	}
	return suite
}

type suiteGroup struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []struct {
		Description string          `json:"description"`
		Data        json.RawMessage `json:"data"`
		Valid       bool            `json:"valid"`
	} `json:"tests"`
}

// recorder is a loader hook that records every URL the compiler asks for.
type recorder struct {
	mu   sync.Mutex
	urls []string
}

func (r *recorder) seen(u string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, u)
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...)
}

func TestJSONSchemaTestSuite(t *testing.T) {
	dir := suiteDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s (%v)", dir, err)
	}
	sort.Strings(files)
	var passed, viaPublic, declinedGroups, declinedCases, excluded int
	for _, file := range files {
		name := filepath.Base(file)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var groups []suiteGroup
		if err := json.Unmarshal(data, &groups); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, g := range groups {
			gkey := strings.TrimSuffix(name, ".json") + "/" + g.Description
			if why, ok := suiteExclusions[gkey]; ok {
				t.Logf("excluded %s: %s", gkey, why)
				excluded += len(g.Tests)
				continue
			}
			rec := &recorder{}
			v, err := compile(g.Schema, nil, rec.seen)
			remote := name == "refRemote.json" || bytes.Contains(g.Schema, []byte("http://localhost:1234/"))
			loaded := rec.all()
			if remote && err != nil {
				// Declined, as it must be: unsupported_capability, and the
				// loader was only asked for the suite's remote documents.
				var e *inputschema.Error
				if !errors.As(err, &e) || e.Class != inputschema.ClassUnsupported || e.Stage != inputschema.StageSchema {
					t.Errorf("%s: remote schema refused with %v, want unsupported_capability at stage schema", gkey, err)
				}
				// Without a loader call, only the root $schema pre-check may
				// have refused it, naming the remote metaschema.
				if len(loaded) == 0 && (e == nil || e.Keyword != "$schema" || !strings.Contains(e.Message, "http://localhost:1234/")) {
					t.Errorf("%s: refused (%v) without asking the loader for a remote document", gkey, err)
				}
				for _, u := range loaded {
					if !strings.HasPrefix(u, "http://localhost:1234/") {
						t.Errorf("%s: loader asked for %q", gkey, u)
					}
				}
				declinedGroups++
				declinedCases += len(g.Tests)
				continue
			}
			if len(loaded) != 0 {
				t.Errorf("%s: compiled (err %v) yet the loader was asked for %v", gkey, err, loaded)
			}
			if err != nil {
				t.Errorf("%s: compile: %v", gkey, err)
				continue
			}
			for _, c := range g.Tests {
				key := gkey + "/" + c.Description
				if why, ok := suiteExclusions[key]; ok {
					t.Logf("excluded %s: %s", key, why)
					excluded++
					continue
				}
				isObject := bytes.HasPrefix(bytes.TrimSpace(c.Data), []byte("{"))
				err := v.validateJSON(c.Data, isObject)
				if isObject {
					viaPublic++
				}
				if got := err == nil; got != c.Valid {
					t.Errorf("%s: valid = %v, want %v (error: %v)\nschema: %s\ndata: %s", key, got, c.Valid, err, g.Schema, c.Data)
					continue
				}
				if err != nil {
					checkErrorList(t, key, err)
				}
				passed++
			}
		}
	}
	t.Logf("JSON Schema Test Suite draft2020-12: %d cases agree (%d through ValidateJSONAll), %d cases in %d groups declined for remote references, %d excluded",
		passed, viaPublic, declinedCases, declinedGroups, excluded)
	if passed < 1000 {
		t.Errorf("only %d cases ran; the suite has about 1300", passed)
	}
}

// checkErrorList checks the shape every failed validation must have.
func checkErrorList(t *testing.T, key string, err error) {
	t.Helper()
	var l *inputschema.ErrorList
	if !errors.As(err, &l) || len(l.Errors) == 0 {
		t.Errorf("%s: error %T %v is not a non-empty *inputschema.ErrorList", key, err, err)
		return
	}
	for _, e := range l.Errors {
		if e.Class != inputschema.ClassValidation || e.Stage != inputschema.StageArguments {
			t.Errorf("%s: error %+v: want class validation, stage arguments", key, e)
		}
		if e.Message == "" || e.Details == nil || !strings.HasPrefix(e.Path, "$arguments") {
			t.Errorf("%s: error %+v lacks message, details or path", key, e)
		}
		if strings.Contains(e.Message, baseURL) {
			t.Errorf("%s: message %q shows the compiler's private base URL", key, e.Message)
		}
	}
	for i := 1; i < len(l.Errors); i++ {
		a, b := l.Errors[i-1], l.Errors[i]
		if c := comparePointers(a.Pointer, b.Pointer); c > 0 || (c == 0 && comparePointers(a.SchemaPointer, b.SchemaPointer) > 0) {
			t.Errorf("%s: errors out of order: %q %q before %q %q", key, a.Pointer, a.SchemaPointer, b.Pointer, b.SchemaPointer)
		}
	}
}
