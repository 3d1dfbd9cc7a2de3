package builtin

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbackplane/backplane/backend/builtin/schemas"
	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/tool"
)

// TestToolsCheckTheirArguments: every built-in tool's backend checks its
// arguments (tool.Checker) and refuses the integers it cannot hold and
// the bounds it enforces, arguments its own schema accepts; well-formed
// arguments pass (issue 12, finding 12).
func TestToolsCheckTheirArguments(t *testing.T) {
	f := newFixture(t, nil)
	for _, c := range []struct {
		tool, good string
		bad        []string
	}{
		{"read", `{"path":"a.txt","offset":2,"limit":10}`, []string{
			`{"path":"a.txt","limit":1e400}`, `{"path":"a.txt","limit":99999999999999999999}`,
			`{"path":"a.txt","offset":99999999999999999999}`}},
		{"ls", `{"path":".","limit":5}`, []string{`{"path":".","limit":1e400}`}},
		{"glob", `{"pattern":"*","limit":5}`, []string{`{"pattern":"*","limit":99999999999999999999}`}},
		{"grep", `{"pattern":"x","context":2}`, []string{`{"pattern":"x","context":1e400}`, `{"pattern":"x","limit":99999999999999999999}`}},
		{"bash", `{"command":"true","timeout":10}`, []string{`{"command":"true","timeout":1e400}`, `{"command":"true","timeout":99999999999999999999}`}},
		{"url_fetch", `{"url":"http://127.0.0.1/","max_length":100}`, []string{`{"url":"http://127.0.0.1/","max_length":1e400}`}},
		{"ask_user_question", `{"question":"ok?","timeout_ms":60000}`, []string{`{"question":"ok?","timeout_ms":99999999999999999999}`}},
		{"write", `{"path":"a","content":"x"}`, nil},
		{"edit", `{"path":"a","content":"x"}`, nil},
	} {
		tl, ok := f.set.Tool(c.tool)
		if !ok {
			t.Fatalf("no tool %s", c.tool)
		}
		ck, ok := tl.Backend.(tool.Checker)
		if !ok {
			t.Fatalf("%s: the backend has no argument check", c.tool)
		}
		schema, err := inputschema.Compile(schemaOf(t, c.tool), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ck.Check(json.RawMessage(c.good)); err != nil {
			t.Errorf("%s %s: %v", c.tool, c.good, err)
		}
		for _, bad := range c.bad {
			if err := schema.ValidateJSONAll(json.RawMessage(bad)); err != nil {
				t.Errorf("%s %s: the schema already refuses it (%v): not what this test is about", c.tool, bad, err)
			}
			err := ck.Check(json.RawMessage(bad))
			if err == nil {
				t.Errorf("%s %s: accepted", c.tool, bad)
			} else if strings.HasPrefix(err.Error(), "validation:") {
				t.Errorf("%s: message %q repeats the class", c.tool, err)
			}
		}
	}
}

func schemaOf(t *testing.T, name string) json.RawMessage {
	for _, st := range schemas.All() {
		if st.Name == name {
			return st.InputSchema
		}
	}
	t.Fatalf("no schema for %s", name)
	return nil
}
