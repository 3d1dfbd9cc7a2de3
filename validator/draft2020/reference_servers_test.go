package draft2020

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbackplane/backplane/inputschema"
)

// The schemas the official MCP reference servers publish (testdata/README.md
// says how they were captured). Every one declares draft-07 at its root, so
// the subset refuses all of them; this boundary must compile all of them,
// asking the loader for nothing, and judge calls as the schemas say.
func TestReferenceServerSchemas(t *testing.T) {
	validators := map[string]*Validator{}
	for _, server := range []string{"everything", "filesystem", "memory"} {
		data, err := os.ReadFile(filepath.Join("testdata", server+".tools.json"))
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Tools []struct {
				Name        string          `json:"name"`
				InputSchema json.RawMessage `json:"inputSchema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(data, &list); err != nil {
			t.Fatalf("%s: %v", server, err)
		}
		if len(list.Tools) < 5 {
			t.Fatalf("%s: only %d tools", server, len(list.Tools))
		}
		for _, tool := range list.Tools {
			name := server + "." + tool.Name
			_, err := inputschema.Compile(tool.InputSchema, nil)
			var e *inputschema.Error
			if !errors.As(err, &e) || e.Class != inputschema.ClassUnsupported || e.Keyword != "$schema" {
				t.Errorf("%s: the subset says %v, want unsupported_capability naming $schema", name, err)
			}
			validators[name] = compileRecorded(t, string(tool.InputSchema), nil)
		}
	}
	cases := []struct {
		tool, args string
		valid      bool
		keyword    string // of the first violation
	}{
		{"everything.echo", `{"message":"hi"}`, true, ""},
		{"everything.echo", `{}`, false, "required"},
		{"everything.echo", `{"message":5}`, false, "type"},
		{"everything.get-sum", `{"a":1,"b":2.5}`, true, ""},
		{"everything.get-sum", `{"a":"1","b":2}`, false, "type"},
		{"everything.get-resource-links", `{}`, true, ""},
		{"everything.get-resource-links", `{"count":10}`, true, ""},
		{"everything.get-resource-links", `{"count":11}`, false, "maximum"},
		{"everything.get-resource-links", `{"count":0.5}`, false, "minimum"},
		{"everything.get-annotated-message", `{"messageType":"error","includeImage":true}`, true, ""},
		{"everything.get-annotated-message", `{"messageType":"info"}`, false, "enum"},
		// format "uri" under draft-07, which the library would assert:
		// an annotation here.
		{"everything.gzip-file-as-resource", `{"data":"not a uri, not even close"}`, true, ""},
		{"everything.gzip-file-as-resource", `{"outputType":"zip"}`, false, "enum"},
		{"filesystem.read_multiple_files", `{"paths":["a","b"]}`, true, ""},
		{"filesystem.read_multiple_files", `{"paths":[]}`, false, "minItems"},
		{"filesystem.edit_file", `{"path":"a","edits":[{"oldText":"x","newText":"y"}],"dryRun":true}`, true, ""},
		{"filesystem.edit_file", `{"path":"a","edits":[{"oldText":"x"}]}`, false, "required"},
		{"filesystem.list_allowed_directories", `{}`, true, ""},
		{"memory.create_entities", `{"entities":[{"name":"a","entityType":"t","observations":["o"]}]}`, true, ""},
		{"memory.create_entities", `{"entities":[{"name":"a","entityType":"t"}]}`, false, "required"},
		{"memory.search_nodes", `{"query":"x","query":"y"}`, false, ""}, // strict decoding: duplicate name
	}
	for _, c := range cases {
		v := validators[c.tool]
		if v == nil {
			t.Fatalf("no tool %s in the captured lists", c.tool)
		}
		err := v.ValidateJSONAll([]byte(c.args))
		if (err == nil) != c.valid {
			t.Errorf("%s %s: %v, want valid=%v", c.tool, c.args, err, c.valid)
			continue
		}
		if err != nil {
			if e := errorList(t, err)[0]; e.Keyword != c.keyword {
				t.Errorf("%s %s: first violation %v, want keyword %q", c.tool, c.args, e, c.keyword)
			}
		}
	}
}
