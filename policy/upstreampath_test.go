package policy

import (
	"strings"
	"testing"
)

// Paths are paths, whoever owns the tool (issue 25): a deny on an upstream
// filesystem tool's path argument refuses every spelling of the file, as
// the same deny does on the built-in read.
func TestUpstreamPathArgumentIsAPath(t *testing.T) {
	rules := []Rule{{Caller: "a",
		Allow: []string{"fs.*", "read"},
		Deny:  []string{"fs.read_text_file(**/.env)", "read(**/.env)"}}}
	r, err := Compile(rules, &Options{Workspace: []string{"/ws"},
		MainArgs: map[string]MainArg{"fs.*": {"path", InferKind("path")}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".env", "./.env", "src/../.env", "/ws/.env", "/ws/src/../.env", "sub/.env", "/ws//sub/./.env"} {
		for _, tool := range []string{"fs.read_text_file", "read"} {
			if d := r.Decide(Request{Caller: "a", Tool: tool, Args: map[string]any{"path": p}}); d.Allow {
				t.Errorf("%s %q allowed: %+v", tool, p, d)
			}
		}
	}
	for _, p := range []string{"README.md", "/ws/src/a.go", ".envrc"} {
		if d := r.Decide(Request{Caller: "a", Tool: "fs.read_text_file", Args: map[string]any{"path": p}}); !d.Allow {
			t.Errorf("fs.read_text_file %q refused: %+v", p, d)
		}
	}
	// A path outside the workspace is matched by no allow, as for the
	// built-ins: the upstream's own roots may differ, the policy's do not.
	if d := r.Decide(Request{Caller: "a", Tool: "fs.read_text_file", Args: map[string]any{"path": "../x/.env"}}); d.Allow {
		t.Errorf("a path escaping the workspace allowed: %+v", d)
	}
	if f := r.Lint(LintOptions{Tools: []string{"fs.read_text_file", "read"}}); len(f) != 0 {
		t.Errorf("findings %+v, want none", f)
	}
}

// match: text, asked for, keeps the spelling: the bypass the issue found,
// which policy check names.
func TestPathArgumentMatchedAsTextIsLinted(t *testing.T) {
	rules := []Rule{{Caller: "a", Allow: []string{"fs.*"}, Deny: []string{"fs.read_text_file(**/.env)"}}}
	r, err := Compile(rules, &Options{Workspace: []string{"/ws"},
		MainArgs: map[string]MainArg{"fs.*": {"path", KindText}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Decide(Request{Caller: "a", Tool: "fs.read_text_file", Args: map[string]any{"path": ".env"}}); !d.Allow {
		t.Errorf("as text, \".env\" does not match \"**/.env\": want allowed, got %+v", d)
	}
	f := r.Lint(LintOptions{Tools: []string{"fs.read_text_file"}})
	if len(f) != 1 || f[0].Kind != FindingPathAsText || !strings.Contains(f[0].Message, "match: path") {
		t.Errorf("findings %+v, want one %s", f, FindingPathAsText)
	}
}

func TestInferKind(t *testing.T) {
	for field, want := range map[string]ArgKind{
		"path": KindPath, "file_path": KindPath, "dir": KindPath, "filePath": KindPath,
		"text": KindText, "query": KindText, "command": KindText, "url": KindText, "pathname_hint": KindText,
	} {
		if got := InferKind(field); got != want {
			t.Errorf("InferKind(%q) = %v, want %v", field, got, want)
		}
	}
}
