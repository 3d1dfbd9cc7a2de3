package policy

import (
	"fmt"
	"net/url"
	"path"
	"runtime"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// ArgKind says how a main argument is matched against an entry's PATTERN.
type ArgKind int

const (
	// KindText matches the argument's text with a text glob: '*' any run
	// of characters (including '/' and spaces), '?' any one character.
	KindText ArgKind = iota
	// KindPath cleans the path and takes it relative to the workspace,
	// then matches doublestar globs ("docs/**", "**/.env"). A path that
	// escapes the workspace matches no allow.
	KindPath
	// KindShell parses a shell command into its simple commands, each
	// matched with a text glob (see the package documentation).
	KindShell
	// KindURL matches the URL with a text glob, or "domain:HOST" its host
	// and every subdomain of it.
	KindURL
)

var kindNames = map[ArgKind]string{KindText: "text", KindPath: "path", KindShell: "shell", KindURL: "url"}

func (k ArgKind) String() string { return kindNames[k] }

// ParseKind reads a kind's name: text, path, shell or url.
func ParseKind(s string) (ArgKind, bool) {
	for k, n := range kindNames {
		if n == s {
			return k, true
		}
	}
	return 0, false
}

// MainArg names a tool's main argument: a top-level member of its
// arguments, and how it is matched.
type MainArg struct {
	Field string
	Kind  ArgKind
}

// pathMembers are the member names a tool's path argument goes by: the
// built-in tools', the reference filesystem server's, and the usual
// spellings of the agents' tools. A main argument named so is a path
// unless its kind is given.
var pathMembers = map[string]bool{
	"path": true, "file": true, "file_path": true, "filepath": true, "filePath": true,
	"filename": true, "fileName": true, "dir": true, "dir_path": true, "dirPath": true, "directory": true,
	"folder": true, "source": true, "destination": true, "target_file": true, "absolute_path": true,
}

// PathLike reports whether a member named field holds a file path by its
// name (see InferKind).
func PathLike(field string) bool { return pathMembers[field] }

// InferKind is the kind of a main argument named field whose kind was not
// given: a path for a path-like name (path, file, file_path, dir, ...),
// since a path matched as text is decided by its spelling ("**/.env" does
// not match ".env" as text, "src/../.env" is not "src/**"), and text for
// anything else.
func InferKind(field string) ArgKind {
	if PathLike(field) {
		return KindPath
	}
	return KindText
}

// BuiltinMainArgs are the main arguments of the built-in tools.
var BuiltinMainArgs = map[string]MainArg{
	"bash":      {"command", KindShell},
	"read":      {"path", KindPath},
	"write":     {"path", KindPath},
	"edit":      {"path", KindPath},
	"ls":        {"path", KindPath},
	"glob":      {"path", KindPath},
	"grep":      {"path", KindPath},
	"url_fetch": {"url", KindURL},
}

// subject is one thing an entry's pattern is matched against.
type subject struct {
	text string
	// noAllow says why no allow entry may match it ("" when one may).
	noAllow string
	host    string // KindURL: the lower-case host, no trailing dot
	// denyOnly: a command found in text bash may run later (a string
	// evaluated as arithmetic, the arguments of eval or sudo): only deny
	// entries are matched against it, and it is a part of the decision
	// only when one matches.
	denyOnly bool
	// label says what the subject is when it is not the argument as
	// written (the real path a link leads to), for the reason.
	label string
}

// maxArgBytes bounds the main argument the policy looks at; validation has
// already bounded the whole document, this bounds the matcher's work.
const maxArgBytes = 1 << 20

// subjects extracts the main argument and turns it into what patterns are
// matched against: one subject, or one per simple command of a shell
// command.
func (r *Rules) subjects(ma MainArg, args any, realPath string) ([]subject, error) {
	var text string
	present := false
	if m, ok := args.(map[string]any); ok {
		if v, ok := m[ma.Field]; ok {
			s, isStr := v.(string)
			if !isStr {
				return []subject{{text: fmt.Sprint(v), noAllow: fmt.Sprintf("the main argument %s is not a string", ma.Field)}}, nil
			}
			text, present = s, true
		}
	}
	if len(text) > maxArgBytes {
		return []subject{{text: text[:64] + "...", noAllow: fmt.Sprintf("the main argument %s is longer than %d bytes", ma.Field, maxArgBytes)}}, nil
	}
	switch ma.Kind {
	case KindShell:
		if !present {
			return []subject{{noAllow: "there is no command"}}, nil
		}
		return splitShell(text)
	case KindPath:
		if !present {
			text = "."
		}
		s := r.cleanPath(text)
		if realPath == "" {
			return []subject{s}, nil
		}
		// The file the path leads to is decided too: "src/envlink" is
		// ".env" to a rule about ".env" (see Request.RealPath).
		rs := r.cleanPath(realPath)
		if rs.text == s.text && rs.noAllow == s.noAllow {
			return []subject{s}, nil
		}
		rs.label = fmt.Sprintf("%s leads to %s", s.text, rs.text)
		return []subject{s, rs}, nil
	case KindURL:
		s := subject{text: text}
		u, err := url.Parse(text)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			s.noAllow = "the URL is not an absolute http(s) URL"
			return []subject{s}, nil
		}
		s.host = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
		return []subject{s}, nil
	}
	if !present {
		return []subject{{noAllow: fmt.Sprintf("the main argument %s is absent", ma.Field)}}, nil
	}
	return []subject{{text: text}}, nil
}

// cleanPath cleans p and makes it relative to the workspace. A path that
// escapes keeps its cleaned absolute or ../ form and matches no allow.
func (r *Rules) cleanPath(p string) subject {
	if strings.ContainsRune(p, 0) {
		return subject{text: p, noAllow: "the path holds a NUL byte"}
	}
	p = path.Clean(foldPath(p))
	if path.IsAbs(p) {
		for _, ws := range r.workspace {
			if p == ws {
				return subject{text: "."}
			}
			if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(ws, "/")+"/"); ok {
				return subject{text: rel}
			}
		}
		return subject{text: p, noAllow: "the path is outside the workspace"}
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		return subject{text: p, noAllow: "the path escapes the workspace"}
	}
	return subject{text: p}
}

func (e *entry) matches(s subject) bool {
	switch {
	case e.domain != "":
		return s.host != "" && (s.host == e.domain || strings.HasSuffix(s.host, "."+e.domain))
	case e.kind == KindPath:
		ok, _ := doublestar.Match(e.patFold, s.text)
		return ok
	}
	return textGlob(e.pat, s.text)
}

// textGlob matches s against pattern, where '*' matches any run of bytes
// and '?' any one character. Linear backtracking on the last '*': time
// O(len(pattern)*len(s)) at worst, no recursion.
func textGlob(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '?':
			_, size := decodeRune(s[i:])
			p, i = p+1, i+size
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p, i = p+1, i+1
		case star >= 0:
			_, size := decodeRune(s[mark:])
			mark += size
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Path names are compared as the platform's file systems compare them:
// macOS and Windows volumes usually ignore case, so ".ENV" opens ".env"
// there and a rule about ".env" must see it; Windows also separates with
// '\', so "src\..\.env" is ".env". Patterns and paths are folded alike
// (patterns at Compile, paths when decided). A case-sensitive volume on
// those platforms is then decided as if it ignored case: stricter for a
// deny, looser for an allow only between names that differ in case alone.
var (
	foldPathCase = runtime.GOOS == "darwin" || runtime.GOOS == "windows"
	backslashSep = runtime.GOOS == "windows"
)

// foldPath is a path (or path pattern) as it is matched.
func foldPath(p string) string {
	if backslashSep {
		p = strings.ReplaceAll(p, `\`, "/")
	}
	if foldPathCase {
		p = strings.ToLower(p)
	}
	return p
}
