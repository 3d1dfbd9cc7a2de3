package builtin

import (
	"bytes"
	"net/url"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// htmlText turns an HTML document into readable text: scripts, styles and
// other non-content elements dropped; blocks on lines of their own;
// headings marked with #, list items with -; links written [text](target)
// with the target resolved against base; images by their alt text.
func htmlText(doc []byte, base *url.URL) string {
	root, err := html.Parse(bytes.NewReader(doc))
	if err != nil {
		// html.Parse accepts any input; this is an I/O error of a byte reader.
		return strings.ToValidUTF8(string(doc), "\uFFFD")
	}
	w := &textWriter{base: base}
	if t := findTitle(root); t != "" {
		w.text(t)
		w.block(2)
	}
	w.node(root)
	return strings.TrimSpace(w.b.String())
}

// skipped elements hold no readable content.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Head: true, atom.Svg: true, atom.Math: true, atom.Iframe: true, atom.Object: true,
	atom.Embed: true, atom.Canvas: true, atom.Select: true, atom.Button: true, atom.Input: true,
}

// blocks start and end on lines of their own.
var blocks = map[atom.Atom]bool{
	atom.Address: true, atom.Article: true, atom.Aside: true, atom.Blockquote: true,
	atom.Body: true, atom.Dd: true, atom.Details: true, atom.Dialog: true, atom.Div: true,
	atom.Dl: true, atom.Dt: true, atom.Fieldset: true, atom.Figcaption: true, atom.Figure: true,
	atom.Footer: true, atom.Form: true, atom.Header: true, atom.Hr: true, atom.Li: true,
	atom.Main: true, atom.Nav: true, atom.Ol: true, atom.P: true, atom.Pre: true,
	atom.Section: true, atom.Summary: true, atom.Table: true, atom.Tr: true, atom.Ul: true,
	atom.Caption: true, atom.Thead: true, atom.Tbody: true, atom.Tfoot: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
}

var headings = map[atom.Atom]int{atom.H1: 1, atom.H2: 2, atom.H3: 3, atom.H4: 4, atom.H5: 5, atom.H6: 6}

func findTitle(n *html.Node) string {
	if n.Type == html.ElementNode && n.DataAtom == atom.Title {
		return strings.Join(strings.Fields(nodeText(n)), " ")
	}
	if n.Type == html.ElementNode && n.DataAtom == atom.Body {
		return ""
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if t := findTitle(c); t != "" {
			return t
		}
	}
	return ""
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// textWriter accumulates text, collapsing white space outside <pre>.
type textWriter struct {
	b        strings.Builder
	base     *url.URL
	pre      int  // depth inside <pre>
	space    bool // a space is due before the next word
	newlines int  // newlines ending the text so far (2 at most matter)
	started  bool
}

// block ends the current line and leaves n-1 empty lines (at most).
func (w *textWriter) block(n int) {
	if !w.started {
		return
	}
	for w.newlines < n {
		w.b.WriteByte('\n')
		w.newlines++
	}
	w.space = false
}

func (w *textWriter) raw(s string) {
	if s == "" {
		return
	}
	w.b.WriteString(s)
	w.started = true
	w.newlines = len(s) - len(strings.TrimRight(s, "\n"))
	w.space = false
}

// text writes running text, its white space collapsed.
func (w *textWriter) text(s string) {
	if w.pre > 0 {
		w.raw(s)
		return
	}
	if s == "" {
		return
	}
	lead := isSpace(s[0])
	trail := isSpace(s[len(s)-1])
	words := strings.Fields(s)
	if len(words) == 0 {
		if w.started && w.newlines == 0 {
			w.space = true
		}
		return
	}
	if (lead || w.space) && w.started && w.newlines == 0 {
		w.b.WriteByte(' ')
	}
	w.b.WriteString(strings.Join(words, " "))
	w.started = true
	w.newlines = 0
	w.space = trail
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

func (w *textWriter) node(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
		return
	case html.DocumentNode:
		w.children(n)
		return
	case html.ElementNode:
	default:
		return
	}
	a := n.DataAtom
	if skipped[a] {
		return
	}
	switch a {
	case atom.Br:
		w.raw("\n")
		return
	case atom.Hr:
		w.block(2)
		w.raw("---")
		w.block(2)
		return
	case atom.Img:
		if alt := strings.TrimSpace(attr(n, "alt")); alt != "" {
			w.text(" [image: " + alt + "] ")
		}
		return
	case atom.A:
		w.link(n)
		return
	case atom.Td, atom.Th:
		if n.PrevSibling != nil {
			w.text(" | ")
		}
		w.children(n)
		return
	case atom.Pre:
		w.block(2)
		w.pre++
		w.children(n)
		w.pre--
		w.block(2)
		return
	}
	if !blocks[a] {
		w.children(n)
		return
	}
	gap := 1
	if a == atom.P || headings[a] > 0 || a == atom.Blockquote || a == atom.Table || a == atom.Ul || a == atom.Ol {
		gap = 2
	}
	w.block(gap)
	if lvl := headings[a]; lvl > 0 {
		w.raw(strings.Repeat("#", lvl) + " ")
	}
	if a == atom.Li {
		w.raw("- ")
	}
	w.children(n)
	w.block(gap)
}

func (w *textWriter) children(n *html.Node) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.node(c)
	}
}

// link writes [text](target), or the text alone when the target adds
// nothing (none, a fragment, javascript:, or the text itself).
func (w *textWriter) link(n *html.Node) {
	href := strings.TrimSpace(attr(n, "href"))
	text := strings.Join(strings.Fields(nodeText(n)), " ")
	target := ""
	if href != "" && !strings.HasPrefix(href, "#") && !strings.HasPrefix(strings.ToLower(href), "javascript:") {
		if u, err := url.Parse(href); err == nil {
			if w.base != nil {
				u = w.base.ResolveReference(u)
			}
			target = u.String()
		}
	}
	if target == "" || target == text {
		if text == "" {
			text = target
		}
		w.text(text)
		return
	}
	if text == "" {
		w.text(target)
		return
	}
	// Keep the surrounding spacing as text nodes would have it.
	if w.space && w.started && w.newlines == 0 {
		w.b.WriteByte(' ')
		w.space = false
	}
	w.text("[" + text + "](" + target + ")")
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key && a.Namespace == "" {
			return a.Val
		}
	}
	return ""
}
