package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbackplane/backplane/inputschema"
	"github.com/agentbackplane/backplane/tool"
)

// Every built-in declares an output schema, and what it returns passes it:
// each tool is run in each of its result shapes, and its structured result
// (the server hands a built-in's JSON object on as structuredContent) is
// validated against its declared outputSchema with the subset validator,
// the check backend/upstream applies to an upstream tool's results. A tool
// error (isError) is checked too where the schema describes it (bash,
// url_fetch: their errors keep the result's data beside "error"); the
// others' errors are {"error": ...} alone, which no output schema covers
// (MCP's output schema describes a successful result).
func TestBuiltinResultsMatchTheirOutputSchemas(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/text":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, strings.Repeat("plain text\n", 20))
		case "/html":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html><body><h1>Title</h1><p>para</p></body></html>")
		case "/bin":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte{0x89, 'P', 'N', 'G', 0, 1, 2, 3})
		case "/redirect":
			http.Redirect(w, r, "/text", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	})
	f := newFixture(t, &Options{
		URLFetch: URLFetchOptions{Allow: []string{srv.hostPort()}},
		Read:     ReadOptions{MaxBytes: 64},
		Bash:     BashOptions{MaxOutputBytes: 32},
		Asker: AskerFunc(func(_ context.Context, q Question) (Answer, error) {
			if len(q.Options) > 0 {
				return Answer{Value: q.Options[0].Value, Label: q.Options[0].Label}, nil
			}
			return Answer{Value: "typed", Freeform: true}, nil
		}),
	})
	writeFile(t, f.path("a.txt"), "one\ntwo\nthree\n")
	writeFile(t, f.path("long.txt"), strings.Repeat("x", 200)+"\n")
	writeFile(t, f.path("empty.txt"), "")
	writeFile(t, f.path("bin.dat"), "\x00\x01\x02binary")
	writeFile(t, f.path("src/b.go"), "package b\n// Needle here\nfunc B() {}\n")
	writeFile(t, f.path("src/c.go"), "package c\n// needle too\n")
	mkdir(t, f.path("emptydir"))
	symlink(t, "a.txt", f.path("link"))
	url := func(p string) string { return srv.URL + p }

	cases := []struct {
		tool    string
		args    json.RawMessage
		isError bool   // the result is a tool error the schema describes
		shape   string // a member the result must hold: the shape this case is for
	}{
		{"read", args("path", "a.txt"), false, ""},
		{"read", args("path", "a.txt", "offset", 2, "limit", 1), false, `"next_offset":3`},
		{"read", args("path", "long.txt"), false, `"line_cut":true`},
		{"read", args("path", "empty.txt"), false, ""},
		{"read", args("path", "bin.dat"), false, `"binary":true`},
		{"write", args("path", "new/w.txt", "content", "hello"), false, ""},
		{"write", args("path", "a.txt", "content", "one\ntwo\nthree\n"), false, ""},
		{"edit", args("path", "a.txt", "content", "TWO", "old_content", "two"), false, ""},
		{"edit", args("path", "new/w.txt", "content", "whole"), false, ""},
		{"ls", args(), false, `"kind":"symlink"`},
		{"ls", args("path", "src", "limit", 1), false, `"truncated":true`},
		{"ls", args("path", "emptydir"), false, ""},
		{"glob", args("pattern", "**/*.go"), false, ""},
		{"glob", args("pattern", "*.none"), false, ""},
		{"glob", args("pattern", "**/*", "limit", 1), false, ""},
		{"grep", args("pattern", "needle", "ignore_case", true, "context", 1), false, `"before":[`},
		{"grep", args("pattern", "needle", "path", "src", "glob", "*.go", "limit", 1), false, ""},
		{"grep", args("pattern", "absent"), false, ""},
		{"grep", args("pattern", "binary"), false, `"binary_skipped":1`},
		{"bash", args("command", "echo out; echo err >&2"), false, ""},
		{"bash", args("command", "seq 1 100"), false, `"truncated":true`},
		{"bash", args("command", "echo failing; exit 3"), true, `"exit_code":3`},
		{"url_fetch", args("url", url("/text")), false, ""},
		{"url_fetch", args("url", url("/text"), "max_length", 5), false, ""},
		{"url_fetch", args("url", url("/html")), false, ""},
		{"url_fetch", args("url", url("/bin")), false, `"binary":true`},
		{"url_fetch", args("url", url("/redirect")), false, ""},
		{"url_fetch", args("url", url("/missing")), true, `"status":404`},
		{"ask_user_question", args("question", "Which?", "options", []any{"a", map[string]any{"label": "B", "value": "b"}}), false, ""},
		{"ask_user_question", args("question", "Free?", "allow_freeform", true), false, `"freeform":true`},
	}
	covered := map[string]bool{}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s/%d", c.tool, i), func(t *testing.T) {
			tl, ok := f.set.Tool(c.tool)
			if !ok {
				t.Fatalf("no tool %s", c.tool)
			}
			out, err := inputschema.Compile(tl.OutputSchema, nil)
			if err != nil {
				t.Fatalf("the output schema is outside the subset: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := tl.Backend.Invoke(ctx, &tool.Call{CallID: "call_test", Tool: c.tool, Caller: "tester", Arguments: c.args})
			if err != nil {
				t.Fatalf("Go error: %v", err)
			}
			if res.IsError != c.isError {
				t.Fatalf("isError %v, want %v: %s", res.IsError, c.isError, res.Content)
			}
			if !strings.Contains(string(res.Content), c.shape) {
				t.Errorf("the result has no %s: %s", c.shape, res.Content)
			}
			if err := out.ValidateJSONAll(res.Content); err != nil {
				t.Errorf("the result breaks the declared output schema: %v\nresult: %s", err, res.Content)
			}
			covered[c.tool] = true
		})
	}
	for _, name := range tool.BuiltinNames() {
		if !covered[name] {
			t.Errorf("built-in %s: no result checked against its output schema", name)
		}
	}
}

// The check above can fail: a result missing a member its schema requires,
// or carrying one it does not name, or of the other read shape's types, is
// refused by the same schemas.
func TestBuiltinOutputSchemasRefuseOtherResults(t *testing.T) {
	f := newFixture(t, nil)
	for name, bad := range map[string]string{
		"write":             `{"path":"a","bytes":1}`,
		"read":              `{"path":"a","size":1,"content":"x","extra":true}`,
		"grep":              `{"pattern":"p","path":"","matches":[{"path":"a","line":0,"text":""}],"truncated":false,"files_searched":1,"binary_skipped":0,"unreadable_skipped":0}`,
		"ask_user_question": `{"answer":1,"freeform":false}`,
		"bash":              `{"exit_code":0,"stdout":"","stderr":"","truncated":false,"timed_out":false,"error":{"class":"x"}}`,
	} {
		tl, _ := f.set.Tool(name)
		out, err := inputschema.Compile(tl.OutputSchema, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out.ValidateJSONAll([]byte(bad)) == nil {
			t.Errorf("%s: %s passes its output schema", name, bad)
		}
	}
	for _, tl := range f.set.Tools() {
		if len(tl.OutputSchema) == 0 {
			t.Errorf("%s declares no output schema", tl.Name)
		}
		if tl.Descriptor != nil {
			t.Errorf("%s has a descriptor: a built-in is served from its fields (its hints follow the configuration's safety flags)", tl.Name)
		}
	}
}
