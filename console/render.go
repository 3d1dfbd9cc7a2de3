package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/agentbackplane/backplane/internal/termtext"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pages are the templates rendered as whole documents.
var pages = []string{"login", "error", "overview", "approvals", "approval", "journal", "call", "budgets", "tools", "health", "sessions", "upstreams", "connections", "connect"}

// maxShown bounds a JSON document shown on a page; the JSON endpoints
// return it whole.
const maxShown = 256 << 10

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"pretty": func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return "-"
		}
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			b.Reset()
			b.Write(raw)
		}
		if b.Len() > maxShown {
			return b.String()[:maxShown] + fmt.Sprintf("\n... (%d bytes in all; the JSON endpoint has it whole)", b.Len())
		}
		return b.String()
	},
	"short": func(s string) string {
		if len(s) > 16 {
			return s[:16] + "…"
		}
		return s
	},
	"diffLines": diffLines,
	// ago is how long before now t was, to the second ("-" for none).
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
	"prefix": func() string { return Prefix },
	// rel is t relative to now ("3 min ago", "in 4 min") in a <time>
	// element whose title is the absolute time.
	"rel": func(t time.Time) template.HTML {
		if t.IsZero() {
			return "-"
		}
		return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
			t.UTC().Format(time.RFC3339), t.UTC().Format("2006-01-02 15:04:05 UTC"), relative(time.Now(), t)))
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return roundDuration(d).String()
	},
	"join":    strings.Join,
	"brief":   brief,
	"item":    func(a Approval, open bool) pendingItem { return pendingItem{A: &a, Open: open} },
	"subject": subject,
	"add":     func(a, b int) int { return a + b },
}

// maxBrief bounds an error message in a list (its page has it whole).
const maxBrief = 160

// brief is the start of msg, for a list: up to its first parenthesis (the
// approval message's list of ways to decide), at most maxBrief bytes.
func brief(msg string) string {
	if i := strings.Index(msg, " ("); i > 0 {
		msg = msg[:i] + " …"
	}
	if len(msg) > maxBrief {
		i := maxBrief
		for i > 0 && msg[i]&0xC0 == 0x80 {
			i--
		}
		msg = msg[:i] + "…"
	}
	return msg
}

// pendingItem is one line of the pending list, open or not.
type pendingItem struct {
	A    *Approval
	Open bool
}

// maxSubject bounds the subject shown on a pending request's line.
const maxSubject = 80

// subject is what a request is about, in a few words: the command, else
// the tool's main argument (as its registration recorded it), else, for a
// tool that names none, the first of the usual members.
func subject(a *Approval) string {
	s := a.Command
	if s == "" && len(a.Arguments) > 0 {
		var args map[string]any
		if json.Unmarshal(a.Arguments, &args) == nil {
			keys := []string{"command", "path", "url", "file", "name"}
			if a.MainArg != "" {
				keys = []string{a.MainArg}
			}
			for _, k := range keys {
				if v, ok := args[k].(string); ok && v != "" {
					s = v
					break
				}
			}
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxSubject {
		i := maxSubject
		for i > 0 && s[i]&0xC0 == 0x80 {
			i--
		}
		s = s[:i] + "…"
	}
	return s
}

// relative says how far t is from now, in the largest whole unit.
func relative(now, t time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", d/time.Second)
	case d < time.Hour:
		s = fmt.Sprintf("%d min", d/time.Minute)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", d/time.Hour)
	default:
		s = fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// roundDuration keeps three significant figures or so: 1.23s, 45.6ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

var templates = func() map[string]*template.Template {
	m := map[string]*template.Template{}
	for _, p := range pages {
		m[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/partials.html", "templates/"+p+".html"))
	}
	return m
}()

// diffLine is one line of a unified diff, classed for colour.
type diffLine struct{ Class, Text string }

func diffLines(diff string) []diffLine {
	lines := strings.Split(strings.TrimSuffix(diff, "\n"), "\n")
	out := make([]diffLine, 0, len(lines))
	for _, l := range lines {
		class := "ctx"
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			class = "file"
		case strings.HasPrefix(l, "@@"), strings.HasPrefix(l, `\ `):
			// A hunk header, or diff's "\ No newline at end of file":
			// about the lines, not one of them.
			class = "hunk"
		case strings.HasPrefix(l, "+"):
			class = "add"
		case strings.HasPrefix(l, "-"):
			class = "del"
		}
		out = append(out, diffLine{class, l})
	}
	return out
}

// pageData is what every page template gets.
type pageData struct {
	Title    string
	Nav      string // the current section
	Operator string
	D        map[string]any
}

// render writes a whole page. Templates are executed into a buffer first,
// so that a failure answers 500 rather than half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page, title, nav string, data map[string]any) {
	t, ok := templates[page]
	if !ok {
		panic("console: no page template " + page)
	}
	var b bytes.Buffer
	err := t.ExecuteTemplate(&b, "layout", pageData{Title: title, Nav: nav, Operator: operatorOf(r.Context()), D: data})
	if err != nil {
		c.log.Error("console: rendering", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	// html/template escapes markup, not controls or bidi characters: a
	// command would hide part of itself on the page as on a terminal.
	w.Write(termtext.Markup(b.Bytes()))
}

// renderFragment renders one named partial template.
func (c *Console) renderFragment(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := templates["approvals"].ExecuteTemplate(&b, name, data); err != nil {
		return "", err
	}
	return string(termtext.Markup(b.Bytes())), nil
}

func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	fsrv := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No directory listings.
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}
