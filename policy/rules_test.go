package policy

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbackplane/backplane/internal/jsonstrict"
)

// issueRules is the policy of issue 11, as written there.
func issueRules(t testing.TB) *Rules {
	t.Helper()
	r, err := Compile([]Rule{{
		Caller:  "alice",
		Allow:   []string{"read", "ls", "glob", "grep", "bash(git status*)", "bash(go test *)"},
		Approve: []string{"write(docs/**)", "edit(docs/**)", "bash(*)"},
		Deny:    []string{"bash(*rm -rf*)", "read(**/.env)", "url_fetch(domain:internal.example)"},
		Conditions: []Condition{
			{Effect: EffectAllow, Tool: "note", If: `size(args.text) < 200 && !args.text.contains("password")`, Line: 9},
		},
		Pos: Pos{File: "backplane.yaml", Line: 2, Allow: []int{3, 3, 3, 3, 3, 3}, Approve: []int{4, 4, 4}, Deny: []int{5, 5, 5}},
	}}, &Options{Workspace: []string{"/ws"}, MainArgs: map[string]MainArg{"note": {"text", KindText}}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func decideJSON(t testing.TB, r *Rules, tool, args string) Decision {
	t.Helper()
	v, err := jsonstrict.Decode([]byte(args), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.Decide(Request{Caller: "alice", Tool: tool, Args: v})
}

func TestIssueExamples(t *testing.T) {
	r := issueRules(t)
	for _, c := range []struct {
		tool, args string
		want       Effect
		source     string // "" when not checked
	}{
		{"read", `{"path":"src/x.go"}`, EffectAllow, "backplane.yaml:3"},
		{"read", `{"path":".env"}`, EffectDeny, "backplane.yaml:5"},
		{"read", `{"path":"docs/../.env"}`, EffectDeny, "backplane.yaml:5"},
		{"read", `{"path":"./a/b/../.env"}`, EffectDeny, ""},
		{"read", `{"path":"/ws/sub/.env"}`, EffectDeny, ""},
		{"write", `{"path":"docs/a.md","content":""}`, EffectApprove, "backplane.yaml:4"},
		{"write", `{"path":"./src/../docs/a.md","content":""}`, EffectApprove, ""},
		{"write", `{"path":"/ws/docs/a.md","content":""}`, EffectApprove, ""},
		{"write", `{"path":"docs/../src/a.go","content":""}`, EffectDeny, ""},
		{"write", `{"path":"docs/../../etc/x","content":""}`, EffectDeny, ""},
		{"bash", `{"command":"git status"}`, EffectAllow, "backplane.yaml:3"},
		{"bash", `{"command":"git   status --short"}`, EffectAllow, ""},
		{"bash", `{"command":"go test ./..."}`, EffectAllow, ""},
		{"bash", `{"command":"git status && touch x"}`, EffectApprove, ""},
		{"bash", `{"command":"git status; rm -rf /"}`, EffectDeny, "backplane.yaml:5"},
		{"bash", `{"command":"echo $(rm -rf /)"}`, EffectDeny, ""},
		{"bash", "{\"command\":\"echo `rm -rf /tmp/x`\"}", EffectDeny, ""},
		{"bash", `{"command":"(cd x && rm -rf y)"}`, EffectDeny, ""},
		{"bash", `{"command":"cat <(rm -rf /)"}`, EffectDeny, ""},
		{"bash", `{"command":"git status | sh"}`, EffectApprove, ""},
		{"bash", `{"command":"$X status"}`, EffectApprove, ""},
		{"bash", `{"command":"eval git status"}`, EffectApprove, ""},
		{"bash", `{"command":"git status > out.txt"}`, EffectApprove, ""},
		{"bash", `{"command":"git status 2>&1 >/dev/null"}`, EffectAllow, ""},
		{"bash", `{"command":"'git' \"status\""}`, EffectAllow, ""},
		{"url_fetch", `{"url":"https://internal.example/x"}`, EffectDeny, "backplane.yaml:5"},
		{"url_fetch", `{"url":"https://api.INTERNAL.example./x"}`, EffectDeny, ""},
		{"url_fetch", `{"url":"https://notinternal.example/x"}`, EffectDeny, ""}, // default deny
		{"note", `{"text":"hello"}`, EffectAllow, "backplane.yaml:9"},
		{"note", `{"text":"my password"}`, EffectDeny, ""},
		{"note", `{}`, EffectDeny, "backplane.yaml:9"}, // evaluation error: fail closed
		{"other", `{}`, EffectDeny, ""},
	} {
		d := decideJSON(t, r, c.tool, c.args)
		if d.Effect != c.want || (c.source != "" && d.Source != c.source) {
			t.Errorf("%s %s = %s at %q (%s), want %s at %q", c.tool, c.args, d.Effect, d.Source, d.Reason, c.want, c.source)
		}
		if d.Allow != (c.want != EffectDeny) || d.RequireApproval != (c.want == EffectApprove) {
			t.Errorf("%s %s: Allow %v RequireApproval %v for %s", c.tool, c.args, d.Allow, d.RequireApproval, d.Effect)
		}
		if d.Reason == "" {
			t.Errorf("%s %s: no reason", c.tool, c.args)
		}
	}
}

func TestShellPartsAreReported(t *testing.T) {
	d := decideJSON(t, issueRules(t), "bash", `{"command":"git status && echo $(rm -rf /) | $X"}`)
	var got []string
	for _, p := range d.Parts {
		got = append(got, p.Text+"="+string(p.Effect))
	}
	want := "git status=allow|echo $(rm -rf /)=deny|rm -rf /=deny|$X=approve"
	if strings.Join(got, "|") != want {
		t.Fatalf("parts %q, want %q", strings.Join(got, "|"), want)
	}
	if d.Effect != EffectDeny {
		t.Fatalf("the strictest part must decide: %+v", d)
	}
}

func TestUnparsableShellIsAnError(t *testing.T) {
	d := decideJSON(t, issueRules(t), "bash", `{"command":"echo $("}`)
	if !errors.Is(d.Err, ErrUnparsable) || d.Allow {
		t.Fatalf("got %+v", d)
	}
}

// Without a default-allow entry, a non-literal command name is default
// denied, not allowed by a catch-all allow.
func TestNonLiteralCommandMatchesNoAllow(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(*)"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"$X", "${CMD} x", "eval ls", "sh -c ls", "/usr/bin/env ls", "{rm,-rf,/}", "r? x", "ls > f", "{ ls; } > f", "> f"} {
		b, _ := json.Marshal(map[string]string{"command": cmd})
		v, _ := jsonstrict.Decode(b, nil)
		if d := r.Decide(Request{Caller: "a", Tool: "bash", Args: v}); d.Allow {
			t.Errorf("%q allowed by bash(*): %+v", cmd, d)
		}
	}
	for _, cmd := range []string{"ls", "ls -la | wc -l", "x=1", "ls 2>/dev/null", "# nothing"} {
		b, _ := json.Marshal(map[string]string{"command": cmd})
		v, _ := jsonstrict.Decode(b, nil)
		if d := r.Decide(Request{Caller: "a", Tool: "bash", Args: v}); !d.Allow {
			t.Errorf("%q not allowed by bash(*): %+v", cmd, d)
		}
	}
}

// A bare allow allows every argument, whether or not patterns on the same
// tool make the policy parse the command.
func TestBareAllowStaysBare(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash"}, Deny: []string{"bash(*rm -rf*)"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for cmd, allow := range map[string]bool{"$X y": true, "ls > f": true, "rm -rf x": false} {
		d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
		if d.Allow != allow {
			t.Errorf("%q: %+v", cmd, d)
		}
	}
}

func TestCELIntegersStayIntegers(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Conditions: []Condition{
		{Effect: EffectAllow, Tool: "t", If: `args.n == 9007199254740993 && type(args.n) == int && caller == "a" && tool == "t" && session == "s"`},
		{Effect: EffectDeny, Tool: "t", If: `has(args.big) && args.big > 0u`},
	}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dec := func(args string) Decision {
		v, err := jsonstrict.Decode([]byte(args), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r.Decide(Request{Caller: "a", Session: "s", Tool: "t", Args: v})
	}
	if d := dec(`{"n":9007199254740993}`); !d.Allow {
		t.Errorf("exact integer: %+v", d)
	}
	if d := dec(`{"n":9007199254740992}`); d.Allow {
		t.Errorf("a neighbour integer must not be equal: %+v", d)
	}
	if d := dec(`{"n":9007199254740993,"big":18446744073709551615}`); d.Allow {
		t.Errorf("uint64 deny: %+v", d)
	}
	if d := dec(`{"n":9007199254740993,"big":1e400}`); d.Allow {
		t.Errorf("an unrepresentable number must deny: %+v", d)
	}
}

func TestCELCostLimitDenies(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Conditions: []Condition{
		{Effect: EffectAllow, Tool: "t", If: `args.l.all(x, args.l.all(y, args.l.all(z, x + y + z >= 0)))`},
	}}}, &Options{CostLimit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	l := make([]any, 100)
	for i := range l {
		l[i] = int64(i)
	}
	d := r.Decide(Request{Caller: "a", Tool: "t", Args: map[string]any{"l": l}})
	if d.Allow || !strings.Contains(d.Reason, "failed to evaluate") {
		t.Fatalf("over the cost limit must deny: %+v", d)
	}
}

func TestCompileRefusesWithLine(t *testing.T) {
	pos := Pos{File: "f.yaml", Line: 1, Allow: []int{7}}
	for _, c := range []struct {
		rule Rule
		want string
	}{
		{Rule{Caller: "a", Allow: []string{"note(x*)"}, Pos: pos}, "f.yaml:7: allow: entry \"note(x*)\": tool note has no main argument"},
		{Rule{Caller: "a", Allow: []string{"unknown"}, Pos: pos}, "f.yaml:7: allow: entry \"unknown\": no tool is named unknown"},
		{Rule{Caller: "a", Allow: []string{"read([x)"}, Pos: pos}, "f.yaml:7: allow: entry \"read([x)\": bad path pattern"},
		{Rule{Caller: "a", Allow: []string{"bash(x"}, Pos: pos}, "must end with ')'"},
		{Rule{Caller: "a", Allow: []string{"bash()"}, Pos: pos}, "an empty pattern"},
		{Rule{Caller: "a", Conditions: []Condition{{Effect: EffectAllow, Tool: "read", If: "args.x +", Line: 12}}, Pos: pos}, "f.yaml:12: if: CEL:"},
		{Rule{Caller: "a", Conditions: []Condition{{Effect: EffectAllow, Tool: "read", If: "1 + 2", Line: 12}}, Pos: pos}, "f.yaml:12: if: the condition is of type int, not bool"},
		{Rule{Caller: "a", Conditions: []Condition{{Effect: EffectAllow, Tool: "read", If: "nope == 1", Line: 12}}, Pos: pos}, "undeclared reference"},
	} {
		_, err := Compile([]Rule{c.rule}, &Options{KnownTool: func(n string) bool { return n != "unknown" }})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.rule, err, c.want)
		}
	}
}

func TestVisibleAndCallerGlobs(t *testing.T) {
	r, err := Compile([]Rule{
		{Caller: "ci-*", Allow: []string{"bash(go test *)"}, Deny: []string{"write"}},
		{Caller: "ci-*", Approve: []string{"write"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Visible("ci-1", "bash") || r.Visible("ci-1", "write") || r.Visible("dev", "bash") {
		t.Fatal("Visible")
	}
}

func TestLiveSwap(t *testing.T) {
	a, _ := NewRules([]Rule{{Caller: "x", Allow: []string{"t"}}})
	l := NewLive(a)
	if !l.Decide(Request{Caller: "x", Tool: "t"}).Allow {
		t.Fatal("before")
	}
	l.Store(nil)
	if l.Decide(Request{Caller: "x", Tool: "t"}).Allow {
		t.Fatal("a nil policy must deny")
	}
	var zero Live
	if zero.Decide(Request{Caller: "x", Tool: "t"}).Allow {
		t.Fatal("zero Live must deny")
	}
}

func TestTextGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		ok   bool
	}{
		{"git status*", "git status --short", true},
		{"*rm -rf*", "sudo rm -rf /", true},
		{"*", "", true},
		{"a?c", "aéc", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b", "acbd", false},
		{"go test *", "go test", false},
	} {
		if got := textGlob(c.p, c.s); got != c.ok {
			t.Errorf("textGlob(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func FuzzDecide(f *testing.F) {
	for _, s := range []string{"git status && touch x", "echo $(rm -rf /)", "$X a", "a | b; c || d", "cat <<EOF\n$(x)\nEOF", "((", "a\x00b", "f() { rm -rf /; }; f"} {
		f.Add(s, "docs/../.env", "https://internal.example/")
	}
	r := issueRules(f)
	f.Fuzz(func(t *testing.T, cmd, path, url string) {
		for _, req := range []Request{
			{Caller: "alice", Tool: "bash", Args: map[string]any{"command": cmd}},
			{Caller: "alice", Tool: "read", Args: map[string]any{"path": path}},
			{Caller: "alice", Tool: "url_fetch", Args: map[string]any{"url": url}},
			{Caller: "alice", Tool: "note", Args: map[string]any{"text": cmd}},
		} {
			d := r.Decide(req)
			if d.Allow && d.Effect == EffectDeny || d.Reason == "" {
				t.Fatalf("%+v: inconsistent %+v", req, d)
			}
			if strings.Contains(d.Reason, "policy failed") || strings.Contains(d.Reason, "runtime error") {
				t.Fatalf("%+v: the policy panicked: %s", req, d.Reason)
			}
		}
		// A deny part anywhere denies the whole command.
		d := r.Decide(Request{Caller: "alice", Tool: "bash", Args: map[string]any{"command": cmd}})
		for _, p := range d.Parts {
			if p.Effect == EffectDeny && d.Allow {
				t.Fatalf("%q: part %q denied but the call is allowed", cmd, p.Text)
			}
		}
	})
}

// FuzzTextGlob checks the text matcher against a regular expression
// built from the same pattern.
func FuzzTextGlob(f *testing.F) {
	for _, s := range [][2]string{{"git status*", "git status -s"}, {"*rm -rf*", "x rm -rf y"}, {"a?c", "aéc"}, {"**", ""}, {"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 256 || !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			return
		}
		var re strings.Builder
		re.WriteString(`(?s)^`)
		for _, c := range pattern {
			switch c {
			case '*':
				re.WriteString(`.*`)
			case '?':
				re.WriteString(`.`)
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString(`$`)
		want := regexp.MustCompile(re.String()).MatchString(s)
		if got := textGlob(pattern, s); got != want {
			t.Fatalf("textGlob(%q, %q) = %v, the regexp says %v", pattern, s, got, want)
		}
	})
}

// ReadsArgs is true exactly where a rule that applies has a condition or
// an argument pattern; where it is false, deciding without the arguments
// gives the decision with them.
func TestReadsArgs(t *testing.T) {
	r, err := Compile([]Rule{
		{Caller: "alice", Allow: []string{"note", "read(tmp/*)"}, Deny: []string{"rm"}},
		{Caller: "bob", Allow: []string{"note"}, Conditions: []Condition{{Effect: EffectDeny, Tool: "note", If: `args.n > 3`}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]any{"text": "x", "path": "tmp/a", "n": int64(1)}
	for _, c := range []struct {
		caller, tool string
		reads        bool
	}{
		{"alice", "note", false}, {"alice", "rm", false}, {"alice", "other", false}, {"carol", "note", false},
		{"alice", "read", true}, {"bob", "note", true},
	} {
		if got := r.ReadsArgs(c.caller, c.tool); got != c.reads {
			t.Errorf("ReadsArgs(%s, %s) = %v, want %v", c.caller, c.tool, got, c.reads)
		}
		if !c.reads {
			with := r.Decide(Request{Caller: c.caller, Tool: c.tool, Args: args})
			without := r.Decide(Request{Caller: c.caller, Tool: c.tool})
			if with.Effect != without.Effect || with.Reason != without.Reason || with.Source != without.Source {
				t.Errorf("%s %s: %+v with the arguments, %+v without", c.caller, c.tool, with, without)
			}
		}
	}
	if (DenyAll{}).ReadsArgs("alice", "note") {
		t.Error("DenyAll reads arguments")
	}
}
