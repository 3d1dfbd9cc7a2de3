package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// goSyntax matches what fmt's %v makes of Go values: maps, pointers to
// structs, nil interfaces, pointers, and slices or structs printed with
// spaces between their elements ([a b], {a b}) instead of commas.
var goSyntax = regexp.MustCompile(`map\[|&\{|<nil>|0xc0[0-9a-f]{6}|\[[^\[\]",:{}\n]+ [^\[\]",:{}\n]+\]|\{[^{}",:\n]+ [^{}",:\n]+\}|\d+h0m0s`)

func TestHumanValueNeverGoSyntax(t *testing.T) {
	for _, v := range []any{
		nil, "x", []string{"a", "b"}, []any{"a", map[string]any{"k": 1}},
		map[string]any{"k": []any{"a", "b"}}, map[string]int64{"bash": 5},
		struct{ A, B string }{"a", "b"}, &struct{ A []string }{[]string{"x", "y"}},
	} {
		if s := humanValue(v, ""); goSyntax.MatchString(s) {
			t.Errorf("humanValue(%#v) = %q: Go syntax", v, s)
		}
	}
	for d, want := range map[time.Duration]string{24 * time.Hour: "24h", 90 * time.Minute: "1h30m", 2 * time.Second: "2s", time.Hour + time.Second: "1h0m1s"} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// Every verb that prints structures, in text mode, on a store that holds
// a call, a refused call, an approval request and budget use: no Go syntax
// anywhere in what people read.
func TestTextOutputHasNoGoSyntax(t *testing.T) {
	f := newFirstHour(t)
	f.run(t, "init", "--caller", "agent", "--operator", "ops").wantCode(t, 0)
	// An upstream server too, for the tools list of pinned definitions.
	cfg, err := os.OpenFile(filepath.Join(f.cfgHome, "backplane", "backplane.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(cfg, "servers:\n  - name: up\n    command: [%q]\n", mcpTestServer(t)); err != nil {
		t.Fatal(err)
	}
	cfg.Close()

	check := func(r result, args ...string) {
		t.Helper()
		for _, stream := range []string{r.stdout, r.stderr} {
			if m := goSyntax.FindString(stream); m != "" {
				t.Errorf("backplane %s prints Go syntax %q:\n%s", strings.Join(args, " "), m, stream)
			}
		}
		if strings.TrimSpace(r.stdout) == "" {
			t.Errorf("backplane %s printed nothing on stdout (stderr: %s)", strings.Join(args, " "), r.stderr)
		}
	}
	run := func(code int, args ...string) result {
		t.Helper()
		r := f.run(t, args...)
		r.wantCode(t, code)
		check(r, args...)
		return r
	}
	jsonOf := func(args ...string) map[string]any {
		t.Helper()
		r := f.run(t, append(args, "--json")...)
		var m map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("backplane %v --json: %v\n%s%s", args, err, r.stdout, r.stderr)
		}
		return m
	}

	// Populate: a call that ran, one refused by validation, an approval
	// request, and budget use.
	ok := jsonOf("call", "--caller", "agent", "ls")
	callID, _ := ok["call_id"].(string)
	if callID == "" {
		t.Fatalf("call ls --json: no call_id in %v", ok)
	}
	apr := jsonOf("call", "--caller", "agent", "write", `{"path":"x.txt","content":"x"}`)
	e, _ := apr["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	aprID, _ := d["approval_id"].(string)
	if aprID == "" {
		t.Fatalf("write: no approval_id in %v", apr)
	}

	run(0, "call", "--caller", "agent", "ls")
	run(1, "call", "--caller", "agent", "lss")
	run(1, "call", "--caller", "agent", "ls", `{"path":3,"nope":[1,2]}`)
	run(1, "call", "--caller", "agent", "write", `{"path":"x.txt","content":"x"}`)
	run(1, "call", "--caller", "nobody", "ls")
	run(0, "journal", "list")
	run(0, "journal", "show", callID)
	run(1, "journal", "show", "no-such-call")
	run(0, "approvals", "list")
	run(0, "approvals", "show", aprID)
	r := run(0, "budget", "show")
	for _, want := range []string{"bash 5", "every other tool 1", "per key per 24h"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("budget show does not say %q:\n%s", want, r.stdout)
		}
	}
	r = run(0, "tools", "list")
	if !strings.Contains(r.stdout, "up.greet") {
		t.Errorf("tools list does not show the upstream's tools:\n%s", r.stdout)
	}

	schema := writeFile(t, "s.json", `{"type":"object","properties":{"a":{"type":"string","enum":["x","y"]}}}`)
	run(1, "schema", "check", schema)
	good := writeFile(t, "g.json", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer","minimum":1}}},"required":["a"],"additionalProperties":false}`)
	args := writeFile(t, "a.json", `{"a":[0,"x"],"b":{"c":[1,2]}}`)
	run(1, "schema", "validate", "--schema", good, "--args", args)
	catalog := writeFile(t, "c.json", `[{"name":"ok","inputSchema":{"type":"object"}},{"name":"bad","inputSchema":{"type":"object","properties":{"a":{"$ref":"#/x"}}}}]`)
	run(1, "schema", "lint", catalog)
}
