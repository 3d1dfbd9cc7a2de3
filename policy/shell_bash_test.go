package policy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"
)

// The splitter against real bash (issue 22, item 2): commands built from
// harmless parts (echo, true, :, printf, variables, and every construct
// that makes bash evaluate text) run in bash with xtrace on a descriptor of
// their own, in a scratch folder, with an empty environment and a timeout.
// Every command bash traced must be among the parts the policy decided:
//
//   - each marked leaf bash ran ("echo m7") is a part, visible or
//     deny-only, so a deny pattern sees it however it was wrapped;
//   - when the policy allows the whole command (allow: ["bash(*)"]), each
//     command bash ran is a visible part (an allowed one), so no allow was
//     given to a command it did not see.

// bashPath is the bash the differential tests run, or "" (they skip).
func bashPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/bin/bash", "/usr/bin/bash"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	t.Skip("no bash at /bin/bash or /usr/bin/bash: the splitter cannot be compared with it")
	return ""
}

// traceBash runs cmd in bash with xtrace to a file and returns the traced
// commands, one per line, without their "+ " prefixes.
func traceBash(t testing.TB, bash, dir, cmd string) []string {
	t.Helper()
	trace, err := os.CreateTemp(dir, "trace")
	if err != nil {
		t.Fatal(err)
	}
	defer trace.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bash, "-x", "-c", cmd)
	// Its own process group, killed whole at the timeout; and Wait does
	// not wait for a child that still holds the output open.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = time.Second
	c.Dir = dir
	c.Env = []string{"PATH=/usr/bin:/bin", "BASH_XTRACEFD=3", "PS4=+ ", "LC_ALL=C"}
	c.ExtraFiles = []*os.File{trace} // descriptor 3
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	_ = c.Run() // many commands fail on purpose; the trace is what counts
	if ctx.Err() != nil {
		// A loop whose break bash lost (it joins "true; break" after a
		// here-document in a substitution): what it traced still counts.
		t.Logf("bash did not finish within 3s, killed: %q", cmd)
	}
	data, err := os.ReadFile(trace.Name())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "+") {
			continue // the rest of a traced word holding a newline
		}
		lines = append(lines, strings.TrimPrefix(strings.TrimLeft(l, "+"), " "))
	}
	return lines
}

var (
	markerRE = regexp.MustCompile(`\bm[0-9]+\b`)
	assignRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=`)
	leafRE   = regexp.MustCompile(`(echo|true|:|printf %s|printf '%s\\n') (m[0-9]+)\b`)
)

// leafNames are the commands the generator marks; a traced line starting
// with one of them and holding a marker is a leaf bash ran.
var leafNames = []string{"echo", "true", ":", "printf"}

// checkAgainstBash runs cmd in bash and compares what it ran with the
// parts the policy decided.
func checkAgainstBash(t *testing.T, r *Rules, bash, dir, cmd string) {
	t.Helper()
	parts, _, err := split(cmd)
	if err != nil {
		return // refused as a whole: nothing is allowed
	}
	d := r.Decide(Request{Caller: "a", Tool: "bash", Args: map[string]any{"command": cmd}})
	traced := traceBash(t, bash, dir, cmd)
	// Which command each marker was written after: a traced ": m1" is the
	// leaf m1 only if m1 was written as ": m1" (else it is the output of
	// "echo m1" passed on as an argument).
	leaves := map[string]string{}
	for _, m := range leafRE.FindAllStringSubmatch(cmd, -1) {
		name := m[1]
		if strings.HasPrefix(name, "printf") {
			name = "printf"
		}
		leaves[m[2]] = name
	}
	for _, line := range traced {
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		// xtrace quotes what it prints: '[' for [.
		name := words[0]
		if len(name) > 2 && name[0] == '\'' && name[len(name)-1] == '\'' {
			name = name[1 : len(name)-1]
		}
		if name == "((" && strings.Contains(cmd, "for ((") {
			name = "for" // a C-style loop's arithmetic, traced as (( ))
		}
		if m := leafMarker(words); m != "" && leaves[m] == name {
			if !slices.ContainsFunc(parts, func(s subject) bool { return partName(s.text) == name && hasToken(s.text, m) }) {
				t.Errorf("bash ran %q (marker %s), which no part of the policy holds\ncommand: %q\nparts: %s", line, m, cmd, showParts(parts))
			}
		}
		if !d.Allow {
			continue
		}
		if assignRE.MatchString(line) || name == "for" || name == "select" || name == "case" {
			continue // an assignment or a loop's or case's head, traced as bash expands it
		}
		if !slices.ContainsFunc(parts, func(s subject) bool { return !s.denyOnly && partName(s.text) == name }) {
			t.Errorf("allowed, but bash ran %q, which is no visible part\ncommand: %q\nparts: %s\ndecision: %s", line, cmd, showParts(parts), d.Reason)
		}
	}
}

// leafMarker is the marker of a traced leaf ("echo m7 ...", "printf %s
// m7"): the word after the name (after the format, for printf); "" when
// the line is not a leaf. Markers further on are output of other leaves.
func leafMarker(words []string) string {
	i := 1
	if words[0] == "printf" {
		i = 2
	}
	if !slices.Contains(leafNames, words[0]) || len(words) <= i || !markerRE.MatchString(words[i]) || markerRE.FindString(words[i]) != words[i] {
		return ""
	}
	return words[i]
}

// partName is the command name of a part's text: its first word after
// any assignments, unquoted; the text itself when it does not parse as a
// simple command ("[[ ... ]]" is "[[").
func partName(text string) string {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text), "")
	if i := strings.Index(text, " <<"); err != nil && i > 0 {
		// A part's text holds a here-document's operator, not its body.
		f, err = syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text[:i]), "")
	}
	if err != nil || len(f.Stmts) == 0 {
		name, _, _ := strings.Cut(text, " ")
		return name
	}
	switch c := f.Stmts[0].Cmd.(type) {
	case *syntax.CallExpr:
		if len(c.Args) > 0 {
			if t, ok := literal(c.Args[0]); ok {
				return t
			}
		}
	case *syntax.DeclClause:
		return c.Variant.Value
	}
	name, _, _ := strings.Cut(text, " ")
	return name
}

func hasToken(text, tok string) bool {
	for _, m := range markerRE.FindAllString(text, -1) {
		if m == tok {
			return true
		}
	}
	return false
}

func showParts(parts []subject) string {
	var b strings.Builder
	for _, p := range parts {
		kind := "visible"
		if p.denyOnly {
			kind = "deny-only"
		}
		fmt.Fprintf(&b, "\n  %s %q", kind, p.text)
		if p.noAllow != "" {
			fmt.Fprintf(&b, " (no allow: %s)", p.noAllow)
		}
	}
	return b.String()
}

// shellGen builds a harmless command from a stream of choices.
type shellGen struct {
	choices []byte
	next    int
	marker  int
}

func (g *shellGen) pick(n int) int {
	if g.next >= len(g.choices) {
		return 0
	}
	c := int(g.choices[g.next])
	g.next++
	return c % n
}

func (g *shellGen) mark() string {
	g.marker++
	return fmt.Sprintf("m%d", g.marker)
}

// leaf is one marked simple command; without single quotes when quoted is
// false (it goes inside a single-quoted string).
func (g *shellGen) leaf(quoted bool) string {
	m := g.mark()
	switch g.pick(6) {
	case 1:
		return "true " + m
	case 2:
		return ": " + m
	case 3:
		return "echo " + m + " $v"
	case 4:
		return "echo " + m + ` "${v}"`
	case 5:
		if quoted {
			return `printf '%s\n' ` + m
		}
		return "printf %s " + m
	}
	return "echo " + m
}

// hidden is a command inside text that bash evaluates (no single quotes).
func (g *shellGen) hidden(depth int) string {
	if depth <= 0 || g.pick(3) != 0 {
		return g.leaf(false)
	}
	switch g.pick(3) {
	case 1:
		return g.hidden(depth-1) + "; " + g.leaf(false)
	case 2:
		return "echo " + g.mark() + " $(" + g.hidden(depth-1) + ")"
	}
	return g.leaf(false) + " && " + g.hidden(depth-1)
}

// sub is 'a[$(CMD)]': an array subscript holding a command substitution,
// as a string (bash runs it when it evaluates the text as arithmetic).
func (g *shellGen) sub(depth int) string { return "'a[$(" + g.hidden(depth) + ")]'" }

// word is an argument.
func (g *shellGen) word(depth int) string {
	switch g.pick(8) {
	case 1:
		return "$v"
	case 2:
		return `"${v}"`
	case 3:
		return `"$(` + g.cmd(depth-1) + `)"`
	case 4:
		return g.sub(depth - 1)
	case 5:
		return "'lit'"
	case 6:
		return "$((1+2))"
	case 7:
		return "`" + g.hidden(depth-1) + "`"
	}
	return "x"
}

func (g *shellGen) cmd(depth int) string {
	if depth <= 0 {
		return g.leaf(true)
	}
	d := depth - 1
	switch g.pick(78) {
	case 1:
		return g.cmd(d) + "; " + g.cmd(d)
	case 2:
		return g.cmd(d) + " && " + g.cmd(d)
	case 3:
		return "false || " + g.cmd(d)
	case 4:
		return g.cmd(d) + " | " + g.cmd(d)
	case 5:
		return "( " + g.cmd(d) + " )"
	case 6:
		return "{ " + g.cmd(d) + "; }"
	case 7:
		return "if " + g.cmd(d) + "; then " + g.cmd(d) + "; fi"
	case 8:
		return "for v in " + g.word(d) + " y; do " + g.cmd(d) + "; done"
	case 9:
		return "case " + g.word(d) + " in *) " + g.cmd(d) + ";; esac"
	case 10:
		return "f() { " + g.cmd(d) + "; }; f"
	case 11:
		return "echo " + g.mark() + ` "$(` + g.cmd(d) + `)"`
	case 12:
		return "echo " + g.mark() + " `" + g.hidden(d) + "`"
	case 13:
		return "a=(); [[ " + g.sub(d) + " -eq 0 ]]"
	case 14:
		return "a=(); [[ 1 -lt " + g.sub(d) + " ]]"
	case 15:
		return "a=(); [[ -v " + g.sub(d) + " ]]"
	case 16:
		return "a=(); x=" + g.sub(d) + "; (( x ))"
	case 17:
		return "a=(); x=" + g.sub(d) + "; echo " + g.mark() + " $((x))"
	case 18:
		return "a=(); x=" + g.sub(d) + "; echo " + g.mark() + " $[x]"
	case 19:
		return "a=(); : ${x:=" + g.sub(d) + "}; echo " + g.mark() + " ${!x}"
	case 20:
		return "y='$(" + g.hidden(d) + ")'; echo " + g.mark() + " ${y@P}"
	case 21:
		return "a=(); let " + g.sub(d)
	case 22:
		return "a=(); declare -i x=" + g.sub(d)
	case 23:
		return "a=(); declare -n r=" + g.sub(d) + "; echo " + g.mark() + " $r"
	case 24:
		return "a=(); printf -v " + g.sub(d) + " %s " + g.mark()
	case 25:
		return "a=(); read " + g.sub(d) + " <<< " + g.mark()
	case 26:
		return `mapfile -t -C "` + g.leaf(false) + `" -c 1 arr <<< z`
	case 27:
		return "trap '" + g.hidden(d) + "' EXIT"
	case 28:
		return "a=(); a[" + g.sub(d) + "]=1"
	case 29:
		return "a=(); x=" + g.sub(d) + "; echo " + g.mark() + " ${a[x]}"
	case 30:
		return "v=abc; x=" + g.sub(d) + "; a=(); echo " + g.mark() + " ${v:x:1}"
	case 31:
		return "eval '" + g.hidden(d) + "'"
	case 32:
		return "cat <<E\n$(" + g.cmd(d) + ")\nE\ntrue"
	case 33:
		return "a=(); unset " + g.sub(d)
	case 34:
		return "a=(); test -v " + g.sub(d)
	case 35:
		return "cat <(" + g.cmd(d) + ")"
	case 36:
		return "v=" + g.word(d) + " " + g.leaf(true)
	case 37:
		return "x=$(" + g.cmd(d) + ")"
	case 38:
		return "a=(); declare " + g.sub(d) + "=1"
	case 39:
		return "echo " + g.mark() + " ${v#$(" + g.cmd(d) + ")}"
	// Near misses: text that looks like code, where bash does not
	// evaluate it. The policy may allow these; bash must then run nothing
	// the policy did not see.
	case 40:
		return "echo " + g.mark() + " " + g.sub(d)
	case 41:
		return "x=" + g.sub(d) + "; echo " + g.mark() + " $x"
	case 42:
		return "[[ " + g.sub(d) + " == x ]]"
	case 43:
		return "[[ 1 -eq 1 ]] && " + g.cmd(d)
	case 44:
		return "(( 1 + 2 )) && " + g.cmd(d)
	case 45:
		return "echo " + g.mark() + " $((1 + 2)) $[3 * 4]"
	case 46:
		return "test " + g.sub(d) + " = x || " + g.cmd(d)
	case 47:
		return "[ " + g.sub(d) + " -eq 0 ]; " + g.cmd(d)
	case 48:
		return "export x=" + g.sub(d) + "; " + g.cmd(d)
	case 49:
		return "f() { local x=" + g.sub(d) + "; " + g.cmd(d) + "; }; f"
	case 50:
		return "case " + g.sub(d) + " in x) " + g.cmd(d) + ";; *) " + g.cmd(d) + ";; esac"
	case 51:
		return "printf '%s\\n' " + g.sub(d) + " | " + g.cmd(d)
	case 52:
		return "a[1]=" + g.sub(d) + "; echo " + g.mark() + " \"$a\""
	case 53:
		return "for ((;;)); do " + g.cmd(d) + "; break; done"
	case 54:
		return "cat <<'E'\n$(" + g.cmd(d) + ") ${v@P}\nE\n" + g.cmd(d)
	case 55:
		return "v=" + g.sub(d) + " " + g.cmd(d)
	// More places bash runs commands from.
	case 56:
		return "echo " + g.mark() + " ${u:-$(" + g.cmd(d) + ")}"
	case 57:
		return "cat <<< \"$(" + g.cmd(d) + ")\""
	case 58:
		return "time " + g.cmd(d)
	case 59:
		return "select v in a; do " + g.cmd(d) + "; break; done <<< 1"
	case 60:
		return "while false; do " + g.cmd(d) + "; done; until " + g.cmd(d) + "; do break; done"
	case 61:
		return "! " + g.cmd(d)
	case 62:
		return g.cmd(d) + " & wait"
	case 63:
		return "echo " + g.mark() + " ${v/$(" + g.cmd(d) + ")/x} ${v:-'a[$(" + g.hidden(d) + ")]'}"
	// Lexical corners, where a parser may read the text differently.
	case 64:
		return "echo " + g.mark() + " \\\n" + g.leaf(true)
	case 65:
		return g.leaf(true) + " # $(" + g.hidden(d) + ")\n" + g.cmd(d)
	case 66:
		return "cat <<E1 <<E2\n$(" + g.cmd(d) + ")\nE1\n$(" + g.cmd(d) + ")\nE2\ntrue"
	case 67:
		return "cat <<-E\n\t$(" + g.cmd(d) + ")\n\tE\ntrue"
	case 68:
		return "case x in (x) " + g.cmd(d) + ";; esac"
	case 69:
		return "{ " + g.cmd(d) + "; } 2>/dev/null"
	case 70:
		return "echo " + g.mark() + ` "a\"$(` + g.cmd(d) + `)\"b"`
	case 71:
		return "echo " + g.mark() + ` $'a\'b' $'$(` + g.hidden(d) + `)'`
	case 72:
		return "echo " + g.mark() + ` "\$(` + g.hidden(d) + `)" \$x`
	case 73:
		return "echo " + g.mark() + " $(( $(" + g.cmd(d) + ") + 1 ))"
	case 74:
		return "echo " + g.mark() + " `echo " + g.mark() + " \\`" + g.leaf(false) + "\\``"
	case 75:
		return "function f { " + g.cmd(d) + "; }; f"
	case 76:
		return "f() ( " + g.cmd(d) + " ); f"
	case 77:
		return "cat <<< $(" + g.cmd(d) + ")"
	}
	return g.leaf(true)
}

// generate builds one command from choices.
func generate(choices []byte) string {
	g := &shellGen{choices: choices}
	return g.cmd(3)
}

func permissiveRules(t testing.TB) *Rules {
	t.Helper()
	r, err := Compile([]Rule{{Caller: "a", Allow: []string{"bash(*)"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// bashSeeds is the fixed corpus every go test run compares.
func bashSeeds() [][]byte {
	rng := rand.New(rand.NewPCG(22, 2))
	var seeds [][]byte
	// Every construct once at the top, then random programs.
	for c := 0; c < 78; c++ {
		seeds = append(seeds, []byte{byte(c), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
	}
	for i := 0; i < 200; i++ {
		b := make([]byte, 24)
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// The issue's commands and each construct it names, compared with bash.
func TestSplitterAgainstBashIssueExamples(t *testing.T) {
	bash := bashPath(t)
	dir := t.TempDir()
	r := permissiveRules(t)
	for _, cmd := range append(issue22Commands, []string{
		"echo m1 $(echo m2) `echo m3`",
		"a=(); x='a[$(echo m1)]'; echo m2 $((x)) ${a[x]}",
		"x='$(echo m1)'; echo m2 ${x@P}",
		`mapfile -t -C "echo m1" -c 1 arr <<< z`,
		"trap 'echo m1' EXIT",
		"cat <<E\n$(echo m1)\nE",
		"f() { echo m1; }; f",
		// Corners where a parser may read the text differently.
		"echo m1 $((echo m2) )", "echo m1 $((echo m2); (echo m3))", "x=$((echo m1) | cat)",
		"echo m1 $( (echo m2) )", "echo m1 ${#}", "echo m1 \"${@}\"",
		"echo m1 <<< $'\\'$(echo m2)'", "a=(1 2); echo m1 \"${a[@]}\"",
		"echo m1 $(echo m2 )  # )", "echo m1 $(case x in x) echo m2;; esac)",
		"echo m1 `echo m2 # comment`", "echo m1 $(echo m2 # )\n)",
		"coproc echo m1; wait", "coproc C { echo m1; }; wait",
		"shopt -s expand_aliases\nalias x='echo m1'\nx",
		"echo m1 @(a|b)", "shopt -s extglob\necho m1 @(a|b)",
		"echo m1 {a,b}$(echo m2)", "echo m1 ~$(echo m2)",
		"echo m1 $[1+1] $((0x10))", "echo m1 $(( 1 ? 2 : 3 ))",
		"echo m1 \\\n$(echo m2)", "echo m1; #$(echo m2)\necho m3",
		"echo m1 <<E; echo m2\nx\nE", "cat <<E && echo m1\n$(echo m2)\nE",
		"echo m1 $'\\x24(echo m2)'", "echo m1 | time echo m2",
	}...) {
		checkAgainstBash(t, r, bash, dir, cmd)
	}
}

func TestSplitterAgainstBashCorpus(t *testing.T) {
	bash := bashPath(t)
	dir := t.TempDir()
	r := permissiveRules(t)
	for _, s := range bashSeeds() {
		checkAgainstBash(t, r, bash, dir, generate(s))
	}
}

// FuzzSplitterAgainstBash explores further than the corpus:
//
//	go test ./policy -run '^$' -fuzz FuzzSplitterAgainstBash -fuzztime 60s
func FuzzSplitterAgainstBash(f *testing.F) {
	for _, s := range bashSeeds()[:78] {
		f.Add(s)
	}
	bash := bashPath(f)
	dir := f.TempDir()
	r := permissiveRules(f)
	f.Fuzz(func(t *testing.T, choices []byte) {
		if len(choices) > 64 {
			return
		}
		cmd := generate(choices)
		sub, err := os.MkdirTemp(dir, "run")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(sub)
		checkAgainstBash(t, r, bash, filepath.Clean(sub), cmd)
	})
}
