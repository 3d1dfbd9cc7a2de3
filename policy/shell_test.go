package policy

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

// issue22Commands are the commands of issue 22, item 2: each was allowed by
// allow: ["bash(git status*)", "bash(ls *)"] and ran $(id) in bash 5.2.
var issue22Commands = []string{
	"git status; [[ 'a[$(id)]' -eq 0 ]]",
	"git status && [[ 1 -eq 'a[$(id)]' ]]",
	"git status; [[ -v 'a[$(id)]' ]]",
	"git status ${x:='a[$(id)]'} $((x))",
	"ls -d ${x:='a[$(id)]'} ${!x}",
	"ls -d ${y:='$(id)'} ${y@P}",
	"ls -d ${x:='a[$(id)]'}; (( x ))",
}

// constructs22 are the other ways the issue names for bash to evaluate
// text as code or arithmetic, each after an allowed command.
var constructs22 = []string{
	"ls $[x]",
	"ls ${a[x]}",
	"ls ${x:1:2}",
	"ls ${x:x:1}",
	"ls ${x#a}",
	"ls ${x%a}",
	"ls ${x/a/b}",
	"ls ${x:-a}",
	"ls ${x:+a}",
	"ls ${x:?a}",
	"ls ${#x}",
	"ls ${!x*}",
	"ls ${x^^}",
	"ls ${x@Q}",
	"ls $(( x + 1 ))",
	"ls $(( a[1] ))",
	"ls \"${x:='a[$(id)]'}\"",
	"git status; let x=1",
	"git status; let 'a[$(id)]'",
	"git status; 'let' 'a[$(id)]'",
	"git status; declare -i x='a[$(id)]'",
	"git status; declare -n r='a[$(id)]'",
	"git status; declare 'a[$(id)]=1'",
	"git status; typeset -i x=1",
	"git status; local -n r=x",
	"git status; 'declare' -i x=1",
	"git status; printf -v 'a[$(id)]' %s x",
	"git status; printf -vx %s x",
	"git status; printf $o x y",
	"git status; read 'a[$(id)]'",
	"git status; read x",
	"git status; mapfile arr",
	"git status; readarray arr",
	"git status; mapfile -C id -c 1 arr",
	"git status; trap id EXIT",
	"git status; a[x]=1",
	"git status; a['$(id)']=1",
	"git status; a=([x]=1)",
	"git status; x=${y:-z}",
	"git status; x=$(( y ))",
	"git status; unset 'a[$(id)]'",
	"git status; unset $x",
	"git status; test -v 'a[$(id)]'",
	"git status; [ -v 'a[$(id)]' ]",
	"git status; [ \"$x\" -eq 0 ]",
	"git status; [[ $x == y ]]",
	"git status; [[ x -eq 1 ]]",
	"git status; (( 1 + x ))",
	"git status; for ((i = 0; i < n; i++)); do ls; done",
	"git status; wait -p x",
	"git status; compgen -W '$(id)' x",
	"git status; enable -f x.so x",
	"git status; hash -p /tmp/x ls",
	"git status; alias ls=id",
	"git status; getopts ab 'a[$(id)]'",
	"git status; exec {fd}>/dev/null",
	"for x in ${y:='a[$(id)]'}; do ls; done",
	"case ${y@P} in *) ls;; esac",
	"cat <<EOF\n${y@P}\nEOF",
	"PS4='$(id)'; set -x; ls",
	"export PS4='$(id)'; set -x; ls",
	"declare 'PS4=$(id)'; set -x; ls",
	"BASH_ENV=/tmp/x ls",
	"TEXTDOMAINDIR=. ls",
	"ls $\"hello\"",
	"$\"ls\" x",
	"ls $(id)",
	"ls <(id)",
	"ls `id`",
	"ls | time ls",
	"ls \"$(cat <<E\nx\nE\nls; ls)\"",
	"ls | ls | time -p ls",
}

// Every command of the issue, and every construct it names, is refused
// allow: under the issue's policy, and under allow: ["bash(*)"], whose '*'
// matches any text.
func TestIssue22CommandsAreNotAllowed(t *testing.T) {
	for _, allow := range [][]string{{"bash(git status*)", "bash(ls *)"}, {"bash(*)"}} {
		r, err := Compile([]Rule{{Caller: "a", Allow: allow}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range append(append([]string(nil), issue22Commands...), constructs22...) {
			d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
			if d.Allow {
				t.Errorf("allow %q allowed %q: %s", allow, cmd, d.Reason)
			}
		}
	}
}

// What stays allowed: literal words, plain variables, literal tests and
// arithmetic on numbers, strings that merely look like code.
func TestInertCommandsStayAllowed(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(*)"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{
		"ls $HOME", `ls "${HOME}"`, "ls $1 $@ $#", "git status", "x=1", "x=$y", "export FOO=bar",
		"[[ -f README ]]", "[[ a == b* ]]", "[[ 1 -eq 1 ]]", "(( 1 + 2 ))", "echo $((1 + 2))",
		"for ((;;)); do break; done", "test -f x", "[ 1 -eq 1 ]", "printf '%s\\n' $x",
		"echo 'a[$(id)]'", "git commit -m 'fix $(x) and `y`'", "cat <<'EOF'\n$(id) ${x@P}\nEOF",
		"a[1]=2", "local x=1",
	} {
		d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
		if !d.Allow {
			t.Errorf("%q not allowed by bash(*): %s", cmd, d.Reason)
		}
	}
}

// A deny pattern sees every nested command, however it is wrapped: here an
// anchored one, which a command hidden inside other text never matched.
func TestDenySeesWrappedCommands(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(ls *)", "bash(echo *)"}, Approve: []string{"bash(*)"}, Deny: []string{"bash(rm -rf*)"},
		Pos: Pos{File: "p.yaml", Line: 1, Deny: []int{4}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{
		"[[ 'a[$(rm -rf x)]' -eq 0 ]]",
		"ls ${x:='a[$(rm -rf x)]'} ${!x}",
		"x='$(rm -rf x)'; echo ${x@P}",
		"declare -i x='a[$(rm -rf x)]'",
		"(( a[$(rm -rf x)] ))",
		"printf -v 'a[$(rm -rf x)]' 1",
		"echo \"$(echo \"$(rm -rf x)\")\"",
		"cat <<EOF\n$(rm -rf x)\nEOF",
		"eval 'rm -rf x'",
		"eval rm -rf x",
		"bash -c 'rm -rf x'",
		"sudo -u root rm -rf x",
		"timeout 5 rm -rf x",
		"find . -exec rm -rf {} +",
		"trap 'rm -rf x' EXIT",
		"mapfile -C 'rm -rf x' -c 1 a",
		"case 'a[$(rm -rf x)]' in esac",
		"shopt -s expand_aliases\nalias x='rm -rf x'\nx",
		"bash <<< 'rm -rf x'",
		"bash <<EOF\nrm -rf x\nEOF",
		"echo 'rm -rf x' | sh",
		"printf '%s\\n' 'rm -rf x' | bash -s",
		"echo 'a[$(rm -rf x)]'",
	} {
		d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
		if d.Effect != EffectDeny || d.Source != "p.yaml:4" {
			var parts []string
			for _, p := range d.Parts {
				parts = append(parts, p.Text)
			}
			t.Errorf("%q: %s at %q (%s), want deny by bash(rm -rf*) at p.yaml:4; parts %q", cmd, d.Effect, d.Source, d.Reason, parts)
		}
	}
	// A deny-only part that no deny matches is not a part at all: the
	// string is data unless evaluated.
	d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": "echo 'a[$(id)]'"}})
	if !d.Allow || len(d.Parts) != 1 {
		t.Errorf("a literal string that looks like code: %+v", d)
	}
}

// bash reads a here-document's body line by line, ending it at the first
// line that is its delimiter, even inside a $(...) the body opened; the
// parser reads the substitution first. Found by the differential fuzz:
// here bash runs "touch pwned" as a command, which the parser took for the
// body of the inner here-document. Such a command cannot be decided.
func TestHereDocumentsBashEndsEarlierAreRefused(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(cat *)", "bash(cat)"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{
		"cat <<E\n$(cat <<'F'\nE\ntouch pwned\nF\n)\nE\n",
		"cat <<-E\n$(cat <<'F'\n\t\tE\ntouch pwned\nF\n)\nE\n",
		"cat <<E\n$(cat <<F\nE\ntouch pwned\nF\n)\nE\n",
	} {
		d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
		if d.Allow || !errors.Is(d.Err, ErrUnparsable) {
			t.Errorf("%q: %s (%s), want refused as unparsable", cmd, d.Effect, d.Reason)
		}
	}
	for _, cmd := range []string{"cat <<E\nEE\n E\nE\n", "cat <<-E\n\tx\n\tE\n"} {
		if d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}}); !d.Allow {
			t.Errorf("%q: %s (%s), want allowed", cmd, d.Effect, d.Reason)
		}
	}
}

// The two inputs of issue 22, item 9, and others of the same kind, are
// denied before the parser sees them, or within the work bound, with
// little memory: counted, not timed.
func TestShellDecisionIsBounded(t *testing.T) {
	for _, c := range []struct {
		name, cmd string
		parsed    bool // the parser may see it (the tree or work bound stops it)
	}{
		{"$( x 21000", strings.Repeat("$(", 21000) + strings.Repeat(")", 21000), false},
		{"( x 32000", strings.Repeat("(", 32000) + "x" + strings.Repeat(")", 32000), false},
		{"${ x 7000", strings.Repeat("${x:-", 7000) + strings.Repeat("}", 7000), false},
		{"$(( x 30000", "$((" + strings.Repeat("(", 30000) + "1" + strings.Repeat(")", 30000) + "))", false},
		{"pipe x 30000", strings.Repeat("a|", 30000) + "a", false},
		{"&& x 12000", strings.Repeat("a && ", 12000) + "a", false},
		{"1+ x 30000", "echo $((" + strings.Repeat("1+", 30000) + "1))", false},
		{"quoted $( x 30000", "echo '" + strings.Repeat("$(", 30000) + "'", true},
		{"if x 4000", strings.Repeat("if ", 4000) + "true" + strings.Repeat("; then x; fi", 4000), true},
		{"60 levels of 60 KB", strings.Repeat("echo $(", 60) + strings.Repeat("a", 60000) + strings.Repeat(")", 60), true},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		parts, st, err := split(c.cmd)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrUnparsable) || !errors.Is(err, errTooComplex) {
			t.Errorf("%s: %d parts, error %v; want too complex", c.name, len(parts), err)
		}
		if !c.parsed && st.parsed != 0 {
			t.Errorf("%s: the parser was given %d bytes; the nesting scan must refuse it first", c.name, st.parsed)
		}
		if st.work > maxShellWork+len(c.cmd)+parseCost {
			t.Errorf("%s: %d units of work, over the bound %d", c.name, st.work, maxShellWork)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		if alloc > 32<<20 {
			t.Errorf("%s: %d MB allocated", c.name, alloc>>20)
		}
		t.Logf("%s (%d bytes): %d units of work, %d bytes parsed, %d KB allocated: %v", c.name, len(c.cmd), st.work, st.parsed, alloc>>10, err)
		r := permissiveRules(t)
		if d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": c.cmd}}); d.Effect != EffectDeny || d.Err == nil {
			t.Errorf("%s: %s (%s), want deny", c.name, d.Effect, d.Reason)
		}
	}
	// A long command of ordinary depth is still decided: a 60 KB
	// here-document of code, quotes and brackets in it.
	var body strings.Builder
	for body.Len() < 60000 {
		body.WriteString("func f(a []int) { if (x > 1) && (y[0] == \"(\") { g('}') } } // don't ((\n")
	}
	cmd := "cat > f.go <<'EOF'\n" + body.String() + "EOF\n"
	parts, st, err := split(cmd)
	if err != nil || len(parts) != 1 || !strings.HasPrefix(parts[0].text, "cat >f.go <<EOF") {
		t.Fatalf("a long here-document: %v, %d parts", err, len(parts))
	}
	if st.work > 4*len(cmd) {
		t.Errorf("a long here-document cost %d units of work for %d bytes", st.work, len(cmd))
	}
}

// The nesting scan counts what the parser recurses on, and not brackets
// in quotes, comments or quoted here-documents.
func TestNestingScan(t *testing.T) {
	deep := strings.Repeat("(", 100) + strings.Repeat(")", 100)
	for _, c := range []struct {
		s    string
		over bool
	}{
		{deep, true},
		{"echo '" + deep + "'", false},
		{"echo \"" + strings.Repeat("(", 100) + "\"", false},
		{"echo \"" + strings.Repeat("$(", 100) + "\"", true},
		{"echo x # " + deep, false},
		{"echo x#" + strings.Repeat("(", 100), true},
		{"cat <<'E'\n" + deep + "\nE\n", false},
		{"cat <<-\"E\"\n" + deep + "\n\tE\nls", false},
		{"cat <<E\n" + strings.Repeat("$(", 100) + "\nE\n", true},
		{"cat <<E\n" + strings.Repeat("(", 100) + "\nE\n", false},
		{"cat <<'E'\nx\nE\n" + deep, true},
		{strings.Repeat("(a); ", 200), false},
		{strings.Repeat("a | ", 100) + "a", true},
		{strings.Repeat("a | b; ", 100), false},
		{strings.Repeat("a && b & ", 100), false},
		{"echo $((" + strings.Repeat("1+", 100) + "1))", true},
		{"echo " + strings.Repeat("$((1+1)) ", 100), false},
		{"echo " + strings.Repeat("\\(", 100), false},
		{"echo $'\\'" + deep + "'", false},
		{"echo \\$'\\'" + deep, true}, // \$ then '\' : the brackets are code
		{"ls 2>&1 | wc -l", false},
		{strings.Repeat("f() ", 100) + "{ :; }", true},
		{strings.Repeat("f()\n", 100) + "{ :; }", true},
		{strings.Repeat("f() }#", 100), true}, // }#f is a word, not a comment
		{strings.Repeat("f() { :; }\n", 100), false},
		{strings.Repeat("f() { :; }; ", 100), false},
	} {
		if got := nestingOver(c.s, maxShellNesting); got != c.over {
			t.Errorf("nestingOver(%.60q...) = %v, want %v", c.s, got, c.over)
		}
	}
}

// Whatever the nesting scan lets through, the parser does not nest much
// deeper: every pair of shell tokens repeated 300 times either is refused
// by the scan or parses to a tree within maxShellTreeDepth. (Triples were
// searched once, in 6 s, finding what the scan now counts.)
func TestNestingScanBoundsTheParse(t *testing.T) {
	toks := []string{"(", ")", "()", "$(", "${x:-", "}", "{ ", "; }", "'", "\"", "`", "\\", "$'", "#", "\n",
		"<<E", "<<'E'", "\nE\n", "E", " ", "a", "|", "&&", ";", "$((", "))", "[[ ", " ]]", "x=", "1+",
		"case x in a) ", ";; esac", "$[", "]", "<(", "\\'", "if ", "; then a; fi", "! ", "a=(", "f() ", "while ", "; do a; done"}
	for _, a := range toks {
		for _, b := range toks {
			s := strings.Repeat(a+b, 300)
			if nestingOver(s, maxShellNesting) {
				continue
			}
			f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(s), "")
			if err != nil {
				continue
			}
			depth, deepest := 0, 0
			syntax.Walk(f, func(n syntax.Node) bool {
				if n == nil {
					depth--
					return true
				}
				depth++
				deepest = max(deepest, depth)
				return true
			})
			if deepest > maxShellTreeDepth {
				t.Errorf("%q x 300: the scan let it through, and its tree is %d deep", a+b, deepest)
			}
		}
	}
}

// The shell opens a redirection's file, not the command: "git status*"
// matches any text after "git status", so a reading redirection would let
// an allow pattern read any file the tool can (issue 22's review found
// "git status < /etc/shadow" allowed by bash(git status*)). Such a part is
// never allowed by a pattern; /dev/null, descriptors, here documents and
// here strings still are.
func TestReadingRedirectionsAreNotAllowed(t *testing.T) {
	r, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(git status*)", "bash(cat*)"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(cmd string) Decision {
		return r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
	}
	for _, cmd := range []string{
		"git status < /etc/shadow", "git status </etc/shadow", "git status 0</etc/shadow",
		"git status 3< ~/.ssh/id_rsa", "git status <$HOME/.netrc", "git status < '/etc/shadow'",
		"git status <& x", "cat < /work/token", "(git status) < /etc/shadow",
		"git status; cat < /etc/shadow",
	} {
		if d := decide(cmd); d.Allow {
			t.Errorf("%q allowed: %s", cmd, d.Reason)
		}
	}
	for _, cmd := range []string{
		"git status < /dev/null", "git status <&0", "git status 0<&-", "cat <<<hello",
		"cat <<'EOF'\nx\nEOF", "git status 2>&1", "git status >/dev/null",
	} {
		if d := decide(cmd); !d.Allow {
			t.Errorf("%q not allowed: %s", cmd, d.Reason)
		}
	}
}
