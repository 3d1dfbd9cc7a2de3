package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestKeptURLDomainLookAlikes (issue 22's review, "Kept"): an allow of
// url_fetch(domain:example.com) matches the host and its subdomains only,
// never a host that merely contains or starts with the name (a longer
// suffix, a prefix glued on, userinfo, a path, query or fragment naming
// it, an encoded dot), nor a URL that is not absolute http(s).
func TestKeptURLDomainLookAlikes(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "alice", Allow: []string{"url_fetch(domain:example.com)"}}}, &Options{Workspace: []string{"/ws"}})
	if err != nil {
		t.Fatal(err)
	}
	decide := func(u string) Effect {
		b, _ := json.Marshal(map[string]string{"url": u})
		return decideJSON(t, r, "url_fetch", string(b)).Effect
	}
	for _, u := range []string{
		"https://example.com.evil/",
		"https://example.com.evil.net/x",
		"https://evilexample.com/",
		"https://example.co/",
		"https://example.com@evil.net/",
		"https://example.com:443@evil.net/",
		"https://user:example.com@evil.net/",
		`https://example.com\@evil.net/`,
		"https://evil.net/example.com",
		"https://evil.net/?u=https://example.com/",
		"https://evil.net#@example.com",
		"https://example.com%2eevil/",
		"https://evil.net%23.example.com/",
		"ftp://example.com/",
		"//example.com/",
		"example.com",
		"file://example.com/etc/passwd",
	} {
		if got := decide(u); got != EffectDeny {
			t.Errorf("url_fetch %q: %v, want deny (not example.com)", u, got)
		}
	}
	// The host itself and its subdomains (the test can fail).
	for _, u := range []string{"https://example.com/x", "https://EXAMPLE.com./x", "https://api.example.com/x",
		"http://example.com:8443/x", "https://user@example.com/", "https://evil.net@example.com/"} {
		if got := decide(u); got != EffectAllow {
			t.Errorf("url_fetch %q: %v, want allow", u, got)
		}
	}
}

// TestKeptShellPrefixesAndSeparators (issue 22's review, "Kept"): under
// allow bash(git status*), no prefix (command, builtin, exec, eval, coproc,
// time, env), environment assignment, alias, function redefinition, output
// redirection, glob command name, substitution, process substitution,
// here-string, here-document, pipe, &&, ||, &, newline or NUL gets another
// command through; and under allow bash(*) the command is denied, rm -rf
// among the parts it was split into.
func TestKeptShellPrefixesAndSeparators(t *testing.T) {
	const denied = "bash(rm -rf*)"
	narrow, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(git status*)"}, Deny: []string{denied}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wide, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(*)"}, Deny: []string{denied}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(r *Rules, cmd string) Decision {
		return r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
	}
	// The command behind a prefix or a separator.
	rm := []string{"command rm -rf x", "command -p rm -rf x", "builtin eval 'rm -rf x'", "builtin command rm -rf x",
		"exec rm -rf x", "eval 'rm -rf x'", "coproc rm -rf x", "coproc X { rm -rf x; }", "time rm -rf x", "time -p rm -rf x",
		"env rm -rf x", "git status & rm -rf x", "git status\nrm -rf x", "git status\r\nrm -rf x", "git status && rm -rf x",
		"git status | rm -rf x", "git status || rm -rf x", "git status;rm -rf x", "git status $(rm -rf x)", "git status `rm -rf x`",
		"git status <(rm -rf x)", "git status >(rm -rf x)", "git status <<< $(rm -rf x)", "git status <<EOF\n$(rm -rf x)\nEOF",
		"bash <<< 'rm -rf x'"}
	other := []string{"FOO=1 id", "PAGER=id git status", "GIT_EXTERNAL_DIFF=id git status", "LD_PRELOAD=/tmp/x.so git status",
		"PATH=. git status", "/???/id", "/usr/bin/i? x", "git status; /???/id", "git() { id; }; git status",
		"function git { id; }; git status", "alias git=id\ngit status", "shopt -s expand_aliases\nalias git=id\ngit status",
		"git status > /etc/x", "git status >> ~/.bashrc", "git status 2>/tmp/x", "git status &> x", "git status >| x",
		"git status $(id)", "git status `id`", "git status <(id)", "git status >(id)", "git status <<< $(id)",
		"git status <<EOF\n$(id)\nEOF", "git status\x00; id", "git status\x00", "git status & id", "git status\nid",
		"command git status", "exec git status", "builtin eval git status"}
	for _, cmd := range append(append([]string(nil), rm...), other...) {
		if d := decide(narrow, cmd); d.Effect != EffectDeny {
			t.Errorf("allow bash(git status*): %q is %s (%s), want deny", cmd, d.Effect, d.Reason)
		}
	}
	for _, cmd := range rm {
		d := decide(wide, cmd)
		seen := false
		for _, p := range d.Parts {
			seen = seen || strings.HasPrefix(p.Text, "rm -rf")
		}
		if d.Effect != EffectDeny || !seen {
			t.Errorf("allow bash(*), deny %s: %q is %s (%s), want deny with rm -rf among its parts", denied, cmd, d.Effect, d.Reason)
		}
	}
	// The allowed command itself, and inert prefixes (the test can fail).
	for _, cmd := range []string{"git status", "git status --short", "time git status"} {
		if d := decide(narrow, cmd); d.Effect != EffectAllow {
			t.Errorf("%q: %s (%s), want allow", cmd, d.Effect, d.Reason)
		}
	}
}

// TestKeptCELNumericComparisons (issue 22's review, "Kept"): a condition
// allow: args.n < 10 allows only numbers below 10 the caller wrote as
// numbers: a string, a number no float64 holds (either sign), a missing
// key, null, a bool or a list fail closed.
func TestKeptCELNumericComparisons(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "alice", Conditions: []Condition{{Effect: EffectAllow, Tool: "t", If: `args.n < 10`}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{"n":"9"}`, `{"n":1e400}`, `{"n":-1e400}`, `{"n":18446744073709551616}`, `{"n":-18446744073709551616}`,
		`{}`, `{"n":null}`, `{"n":true}`, `{"n":[1]}`, `{"n":{"n":1}}`, `{"n":10}`, `{"n":10.0}`, `{"n":9223372036854775808}`} {
		if d := decideJSON(t, r, "t", args); d.Allow {
			t.Errorf("args.n < 10 allowed %s: %s", args, d.Reason)
		}
	}
	for _, args := range []string{`{"n":9}`, `{"n":-5}`, `{"n":9.5}`} {
		if d := decideJSON(t, r, "t", args); !d.Allow {
			t.Errorf("args.n < 10 refused %s: %s", args, d.Reason)
		}
	}
}
